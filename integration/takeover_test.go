//go:build unix

package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mongolock/mongolock/internal/cluster"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/scheduler"
)

// skewed are the clocks of the skewed variants of the scheduler's
// scenarios, given to the instances in turn: 400 ms behind, right, 400 ms
// ahead.
var skewed = []time.Duration{-400 * time.Millisecond, 0, 400 * time.Millisecond}

// withSkews runs scenario twice, as parallel subtests: every clock right,
// and the instances' clocks skewed in turn (skewed).
func withSkews(t *testing.T, scenario func(t *testing.T, skews []time.Duration)) {
	for _, v := range []struct {
		name  string
		skews []time.Duration
	}{{"no skew", nil}, {"skew ±400ms", skewed}} {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			scenario(t, v.skews)
		})
	}
}

// pollInterval is the scheduler's poll interval in the tests: the
// default, the Session's renew interval.
var pollInterval = lock.DefaultTimings(testTTL).RenewInterval

// takeoverBound is how late a firing whose claimant died between its claim
// and its start may run, after the claim: the claimant's presence lease
// lapses at most a TTL after its last renewal (before the claim), the
// others look at the claim every poll interval once it is a poll old,
// plus slack for the lock's margins, the job's lock, the firings the
// claim covers, and a loaded machine (scheduler/doc.go, "Taking over").
var takeoverBound = testTTL + 2*pollInterval + slack

// runAllMisfires runs every misfire within the hour. A claim that waits
// to be taken over keeps the job's later firings from being claimed (the
// claims of a job settle in order): the claim after the takeover covers
// them, and they run late within the misfire threshold; this policy runs
// those a loaded machine delays past it too, where the default
// (MisfireRunLatest) would record all but the latest as misfired.
var runAllMisfires = scheduler.MisfireRunAll(time.Hour, 100)

// Scenario 8: the instance that claimed a firing is killed (SIGKILL), or
// stopped (SIGSTOP), before the run's start, round after round: right
// after its claim, or once it took the job's lock. At each round every
// instance up is armed to act on itself so (rearm), the first to reach that
// point does (and any other that reaches it before the disarm), the others
// are disarmed, and a new instance replaces each that acted.
// Every such firing must run exactly once, on another instance (how soon
// is logged: takeoverBound, in real time on a machine that may be loaded,
// is a figure here; scheduler's TestClaimTakenOver checks the bound on a
// simulated server); a stopped claimant, resumed after the firing ran elsewhere
// and more than a TTL after it stopped, must not run it, and reports its
// claim taken over (or the job's lock held elsewhere). With runAllMisfires, every firing of the window must run
// exactly once, including those that fell while a claim waited to be taken
// over.
//
// The -integration.long variant plays more rounds, and resumes stopped
// claimants at random instants from one to two and a half TTLs after they
// stopped, before or after the takeover: either the claimant runs the
// firing or another instance does, never both.
func TestClaimantKilled(t *testing.T) { withSkews(t, claimantKilled) }

// claimantArmings are what the claimant scenarios arm the instances to
// do, in turn (TestClaimantKilled) or at random (BenchmarkClaimantsKilled).
var claimantArmings = []string{killAtClaim, stopAtClaim, killAtLock, stopAtLock}

func claimantKilled(t *testing.T, skews []time.Duration) {
	rounds := len(claimantArmings)
	if *longRun {
		rounds = 4 * len(claimantArmings)
	}
	c := newClaimantCluster(t, skews, nil, "tick")
	windowStart := wallNow()
	for round := range rounds {
		c.round(claimantArmings[round%len(claimantArmings)], *longRun)
	}
	windowEnd := wallNow()
	c.settle(*longRun)
	c.awaitFirings(c.base.Jobs, windowStart, windowEnd, hang)

	ran := c.checkFirings(windowStart, windowEnd)
	// A firing may have had several claimants act on it in turn: one that
	// took it over may be the next round's victim.
	evs := c.Events()
	byFiring := map[cluster.Firing][]victim{}
	for _, v := range c.victims {
		k := cluster.NewFiring(v.act.Job, v.act.Firing)
		byFiring[k] = append(byFiring[k], v)
	}
	for _, k := range cluster.SortedFirings(byFiring) {
		vs := byFiring[k]
		last := vs[len(vs)-1].act
		var acts []string
		actors := map[string]bool{}
		for _, v := range vs {
			acts = append(acts, fmt.Sprintf("%s (skew %v) %s at %s", v.act.Instance, skewOf(skews, v.act.Instance), v.act.Msg, v.act.T.Format("15:04:05.000")))
			actors[v.act.Instance] = true
		}
		runs := cluster.Filter(evs, func(e cluster.Event) bool {
			return e.Kind == cluster.EvRun && !e.Triggered && cluster.NewFiring(e.Job, e.Firing) == k
		})
		if len(runs) != 1 || ran[k] != 1 {
			t.Errorf("firing %s, after %s: %d runs reported, %d in the database; want 1", k, strings.Join(acts, ", then "), len(runs), ran[k])
			continue
		}
		run := runs[0]
		late := run.T.Sub(last.T)
		t.Logf("firing %s: %s; %s ran it %v after the last (%v after the firing)", k, strings.Join(acts, ", then "),
			run.Instance, late.Round(time.Millisecond), run.T.Sub(k.Scheduled).Round(time.Millisecond))
		if *longRun {
			// Claimants resumed at random instants may have run it, or
			// taken a claim over again and lost it: only once counts.
			continue
		}
		if actors[run.Instance] {
			t.Errorf("firing %s ran on %s, which had claimed it and stopped; want another instance", k, run.Instance)
			continue
		}
		taken := cluster.Filter(evs, func(e cluster.Event) bool {
			return e.Kind == cluster.EvTakenOver && e.Instance == run.Instance && cluster.NewFiring(e.Job, e.Firing) == k
		})
		if len(taken) != 1 || taken[0].Keeper != last.Instance {
			t.Errorf("firing %s ran on %s, which reported taking it over %d times (%v); want once, from %s", k, run.Instance, len(taken), taken, last.Instance)
		}
	}
}

// claimantCluster plays the rounds of the claimant scenarios
// (TestClaimantKilled, BenchmarkClaimantsKilled): in each, the instance
// that claimed a firing kills or stops itself before the run's start, and
// a new instance replaces it.
type claimantCluster struct {
	*testCluster
	// errorf reports what the scenario promises and did not see, and logf
	// what it saw: the test's Errorf and Logf. The benchmark counts what
	// became of the firings instead, and must not fail before it reports.
	errorf, logf func(format string, args ...any)
	// retire stops each stopped claimant once resumed and its claim
	// settled, so that as many instances stay up as at the start.
	retire bool

	armDir  string // each instance's arm file, by its name (armFile)
	victims []victim
	seen    int            // the events acted looked at
	wg      sync.WaitGroup // the stopped claimants' resumes
	mu      sync.Mutex
	stopped map[string]bool // until resumed (or retired): not armed
	// spent are the firings whose start a killed or failed instance
	// recorded, by the scheduler's records, and which it did not end, or
	// did not run (noteRunning; the leader scenario's noteSpent): each
	// counts as its firing's run.
	spent map[cluster.Firing]string // the instance
}

// victim is an instance that acted on itself, and the firing it held.
type victim struct {
	act   cluster.Event // its EvActing
	raced bool          // resumed without waiting for the takeover
}

// newClaimantCluster starts three instances with the jobs given,
// runAllMisfires and arm files (rearm), configured further by base (nil
// leaves out the runner: a stopped leader's term outlasts its lease, not
// the claimant scenarios' concern).
func newClaimantCluster(tb testing.TB, skews []time.Duration, base func(*instanceConfig), jobs ...string) *claimantCluster {
	tb.Helper()
	c := &claimantCluster{testCluster: newCluster(tb, testTTL, jobs...), errorf: tb.Errorf, logf: tb.Logf,
		armDir: tb.TempDir(), stopped: map[string]bool{}, spent: map[cluster.Firing]string{}}
	c.skews = skews
	c.base.Misfire = &runAllMisfires
	if base == nil {
		c.base.NoRunner = true
	} else {
		base(&c.base)
	}
	c.spawnN(3, c.armFile)
	c.seen = c.Mark()
	return c
}

// armFile gives each instance an arm file of its own. A stopped instance
// sent a rearm reads its file when resumed: only the files of the
// instances armed are armed, so it reads "".
func (c *claimantCluster) armFile(cfg *instanceConfig) {
	cfg.ArmFile = filepath.Join(c.armDir, cfg.Keeper)
}

// arm arms every instance up and not stopped (rearm). With "" it disarms
// them, and empties every arm file.
func (c *claimantCluster) arm(arming string) {
	c.tb.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.Procs() {
		up := p.Up() && !c.stopped[p.Name()]
		if !up && arming != "" {
			continue
		}
		file := filepath.Join(c.armDir, p.Name())
		must(c.tb, os.WriteFile(file+".new", []byte(arming), 0o600))
		must(c.tb, os.Rename(file+".new", file))
		if up {
			must(c.tb, p.Signal(rearm))
		}
	}
}

// round arms the instances, waits for the first to act on itself, and
// disarms them. Others may act too, on another job's firing or before the
// disarm reaches them: round deals with each it sees, the next round (or
// settle) with later ones.
func (c *claimantCluster) round(arming string, raced bool) {
	c.tb.Helper()
	c.deal(c.acted(), raced)
	from := c.Mark()
	c.arm(arming)
	c.awaitOne(from, hang, "an armed instance acting", cluster.IsKind(cluster.EvActing))
	acts := c.acted() // before disarming, so that the stopped are not sent a rearm
	c.arm("")
	c.deal(append(acts, c.acted()...), raced)
}

// settle deals with the instances that acted after the last round, and
// waits until every stopped claimant was resumed and its claim settled.
func (c *claimantCluster) settle(raced bool) {
	c.tb.Helper()
	c.deal(c.acted(), raced)
	c.wg.Wait()
}

// acted returns the EvActing events since it last looked, and marks the
// instances that stopped themselves as stopped.
func (c *claimantCluster) acted() []cluster.Event {
	evs := c.Since(c.seen)
	c.seen += len(evs)
	acts := cluster.Filter(evs, cluster.IsKind(cluster.EvActing))
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, act := range acts {
		if !strings.HasPrefix(act.Msg, "kill@") {
			c.stopped[act.Instance] = true
		}
	}
	return acts
}

// deal records the instances that acted as victims, waits for those that
// killed themselves to exit, resumes those that stopped in the background
// (resumeClaimant, raced), and replaces each with a new instance.
func (c *claimantCluster) deal(acts []cluster.Event, raced bool) {
	c.tb.Helper()
	from := c.Mark()
	var spawned []string
	for _, act := range acts {
		c.victims = append(c.victims, victim{act: act, raced: raced})
		p := c.proc(act.Instance)
		if strings.HasPrefix(act.Msg, "kill@") {
			c.kill(p.Name()) // it killed itself: this marks its exit as expected
			// Its runs of other jobs that it had started: killed with it.
			c.noteRunning(p.Name())
		} else {
			c.wg.Go(func() {
				c.resumeClaimant(p, act, raced)
				if c.retire {
					c.terminate(p, instanceStopTimeout)
				}
				c.mu.Lock()
				delete(c.stopped, p.Name())
				c.mu.Unlock()
			})
		}
		spawned = append(spawned, c.spawn(c.armFile).Name())
	}
	for _, name := range spawned {
		c.awaitUp(from, name)
	}
}

// noteRunning reads, right after killed was killed, which runs it had
// started and not ended, by the jobs' records: each job's last run. No
// other instance can have started a run of those jobs since: their locks
// stay the killed instance's until its leases lapse (and in leader-only
// mode none leads until the killed leader's lease lapsed).
func (c *claimantCluster) noteRunning(killed string) {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recs, _, err := scheduler.LoadRecords(ctx, c.db.Collection(scheduler.DefaultJobsCollection), c.base.Jobs...)
	must(c.tb, err)
	for _, r := range recs {
		if run := r.LastRun; run != nil && run.Keeper == killed && run.Outcome == scheduler.OutcomeRunning && !run.Triggered {
			c.spent[cluster.NewFiring(r.Name, run.Scheduled)] = killed
		}
	}
}

// resumeClaimant resumes p, which stopped itself (act) after claiming a
// firing, or taking it over, and before starting it: once the firing ran
// elsewhere and more than a TTL after it stopped, or, if raced, at a
// random instant from one to two and a half TTLs after it stopped.
// Resumed after the takeover, p must not run any firing its claim covered,
// and must report its claim taken over, the job's lock held elsewhere
// throughout its wait, or (stopped holding the lock) its lease lost before
// it recorded the start. It runs in a goroutine of its own: it reports with
// errorf.
func (c *claimantCluster) resumeClaimant(p *cluster.Proc, act cluster.Event, raced bool) {
	claim := act
	k := cluster.NewFiring(claim.Job, claim.Firing)
	resumeAt := claim.T.Add(testTTL * 3 / 2)
	if raced {
		resumeAt = claim.T.Add(testTTL + rand.N(testTTL*3/2))
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		_, err := c.Await(ctx, 0, 1, func(e cluster.Event) bool {
			return e.Kind == cluster.EvRun && !e.Triggered && cluster.NewFiring(e.Job, e.Firing) == k
		})
		cancel()
		if err != nil {
			c.errorf("firing %s, claimed by %s before it stopped itself (%s): no run (%v)", k, p.Name(), act.Msg, err)
		}
	}
	sleep(time.Until(resumeAt))
	from := c.Mark()
	if err := p.Resume(); err != nil {
		c.tb.Error(err) // not a finding: the harness failed
		return
	}
	// What the claimant does once it wakes: run the firings its claim
	// covers (only if it won the race), or find its claim taken over. Its
	// claim covers the firing claimed and those missed before it; it
	// reports the takeover under the one it was trying. Or, if it never
	// gets the job's lock (the taker, or the job's later runs, hold it
	// throughout its wait: seen with the leader-only scenario's long runs
	// on a loaded machine), it gives up on the firing as "lock held
	// elsewhere", without learning of the takeover. Or, if it got the
	// lock before it stopped and its claim was not taken over yet, it finds
	// its lease lost before it records the start, and leaves the claim
	// pending, for its next poll or another instance (the checks of the
	// firings say it then ran once).
	covered := func(e cluster.Event) bool {
		return e.Instance == p.Name() && e.Job == k.Job && !e.Triggered && !e.Firing.After(k.Scheduled)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	ended, err := c.Await(ctx, from, 1, func(e cluster.Event) bool {
		return covered(e) && (e.Kind == cluster.EvRun || e.Kind == cluster.EvSkipped &&
			(strings.HasPrefix(e.Msg, scheduler.ReasonTakenOver) || strings.HasPrefix(e.Msg, scheduler.ReasonLockHeld) ||
				strings.HasPrefix(e.Msg, scheduler.ReasonNoStart)))
	})
	var saw []string
	for _, e := range cluster.Filter(c.Since(from), covered) {
		saw = append(saw, e.String())
	}
	switch {
	case err != nil:
		c.errorf("%s, resumed, did not report what became of its claim of %s (%v); it reported:\n  %s", p.Name(), k, err, strings.Join(saw, "\n  "))
	case ended[0].Kind == cluster.EvRun && !raced:
		c.errorf("%s, resumed after %s ran elsewhere, ran a firing its claim covered: %v", p.Name(), k, ended[0])
	default:
		c.logf("%s resumed %v after it stopped (%s, %s): %s", p.Name(), time.Since(claim.T).Round(time.Millisecond), act.Msg, k, strings.Join(saw, "; "))
	}
}

// skewOf returns the skew of the instance called name, as testCluster
// gives them out (inst-01 first).
func skewOf(skews []time.Duration, name string) time.Duration {
	var n int
	if len(skews) == 0 || !strings.HasPrefix(name, "inst-") {
		return 0
	}
	for _, r := range name[len("inst-"):] {
		n = n*10 + int(r-'0')
	}
	return skews[(n-1)%len(skews)]
}
