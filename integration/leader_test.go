//go:build unix

package integration

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/cluster"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/scheduler"
)

// Timings of the leader-only scenario.
const (
	// leaderRunTime is how long each run of its jobs lasts: a good part of
	// the period, so that the leader can be caught in the middle of one.
	leaderRunTime = every * 2 / 5
	// leadSlack is how far outside its leader terms an instance's claim or
	// run may be reported: a term's report and the scheduler's first claim
	// race, and a claim sent just before the trust deadline is reported
	// after it.
	leadSlack = 500 * time.Millisecond
)

// failoverBound is how late a firing may run, after it was due, or after
// the leader failed if that was later. The failed leader's lease lapses at
// most a TTL after its last renewal, and another instance leads within a
// retry period after (the runner's failover). At its first poll, within a
// poll interval, the new leader takes over the claims left pending,
// without waiting for any presence lease (leading is enough), and claims
// the firings missed meanwhile; a claim less than a poll old waits a poll
// more; a job's lock taken after the last renewal outlives the lease by
// less than a poll (takeoverBound: TTL, two polls, slack). A firing missed
// behind a pending claim is claimed with the next firing, within a period.
// The missed firings of a job run oldest first, each after the run before
// it: at most missedMax of them.
var failoverBound = takeoverBound + retryPeriod + every + time.Duration(missedMax)*leaderRunTime

var (
	retryPeriod = lock.DefaultTimings(testTTL).RetryPeriod
	// missedMax is how many firings of a job fall due, at most, between a
	// failure of the leader and the first claims of the next one.
	missedMax = int(math.Ceil(float64(testTTL+retryPeriod+2*pollInterval)/float64(every))) + 1
)

// What the leader-only scenario does to the leader, in turn, besides
// stopAtClaim and killAtRun (armings): the driver kills or stops it while
// its job runs (after the job counted itself, before it returned).
const (
	killMidRun = "kill mid-run"
	stopMidRun = "stop mid-run"
)

var leaderFaults = []string{stopAtClaim, killMidRun, stopMidRun, killAtRun}

// Scenario 11: leader-only mode (scheduler.WithLeaderOnly, the instances'
// LeaderAwareRunner deciding). Three instances, three jobs "@every 1s"
// whose runs last leaderRunTime, runAllMisfires. Round after round the leader
// fails while it holds a firing, and a new instance replaces it:
//   - stopped (SIGSTOP) right after it claimed a firing (stopAtClaim), and
//     resumed once another instance ran the firing, 1.5 TTL after;
//   - killed (SIGKILL) in the middle of a run;
//   - stopped in the middle of a run, and resumed once another instance
//     ran a firing due after the stop, 1.5 TTL after;
//   - killed once the run's start is recorded, before its job is called
//     (killAtRun).
//
// Before each round, every firing due so far has run (or was spent): a
// round catches the leader on schedule, not in the middle of the takeovers
// and late firings that the round before left, which failoverBound does not
// allow for.
//
// No firing may run twice, ever. A firing whose run a failed leader
// started is spent: it counts as run, whether or not its job counted
// itself, and no instance may run it again (scheduler/doc.go: "A run is
// recorded ... only if its start was written"). That is a leader killed
// after the start record (killAtRun, or another job's run of the same
// instant): the scheduler's record says the run is going on, by the
// killed leader, until the job's next start; or a leader stopped after the
// start record, which on resuming finds its lease lost and does not call
// the job: the history records the firing as failed, "not run: ...". Only
// failed leaders may leave firings so. Every other firing due in the
// window, while at least two instances were up, must run once (how late
// after it was due, or after the last failure before its run, is a figure:
// failoverBound, in real time on a machine that may be loaded). Only
// leaders claim and run (within leadSlack of their terms), and a
// leader resumed after a pause past its lease finds its term lost, and
// claims and runs nothing that fell due after it stopped.
//
// The -integration.long variant plays the rounds three times.
func TestLeaderOnlyLeaderKilled(t *testing.T) { withSkews(t, leaderOnlyLeaderKilled) }

func leaderOnlyLeaderKilled(t *testing.T, skews []time.Duration) {
	rounds := len(leaderFaults)
	if *longRun {
		rounds *= 3
	}
	c := newLeaderCluster(t, skews, "tick-a", "tick-b", "tick-c")
	c.awaitOne(0, startTimeout, "a first run", cluster.IsKind(cluster.EvRun))
	windowStart := wallNow()
	for round := range rounds {
		c.awaitCaughtUp(windowStart)
		switch what := leaderFaults[round%len(leaderFaults)]; what {
		case stopAtClaim:
			before := len(c.victims)
			c.round(stopAtClaim, false) // resumed by resumeClaimant
			for _, v := range c.victims[before:] {
				c.faults = append(c.faults, fault{what: v.act.Msg, instance: v.act.Instance, at: v.act.T, firing: cluster.NewFiring(v.act.Job, v.act.Firing)})
			}
		case killAtRun:
			c.killAt(what)
		default:
			c.midRun(what == stopMidRun)
		}
	}
	windowEnd := wallNow()
	c.settle(false)
	c.awaitCaughtUp(windowStart)
	c.check(windowStart, windowEnd)
}

// leaderCluster plays the rounds of TestLeaderOnlyLeaderKilled: a
// claimantCluster (armings, stopped instances and their resumes) whose
// instances run their jobs on the leader only.
type leaderCluster struct {
	*claimantCluster
	faults  []fault
	counted map[cluster.Firing]bool // spent firings counted in firingsColl (countSpent)
}

// fault is what a round did to the leader.
type fault struct {
	what     string
	instance string
	at       time.Time      // when it was killed, or stopped
	firing   cluster.Firing // the firing it held: claimed, or running
}

func (f fault) String() string {
	return fmt.Sprintf("%s %s at %s (%s)", f.what, f.instance, f.at.Format("15:04:05.000"), f.firing)
}

// newLeaderCluster starts three instances in leader-only mode with the jobs
// given, runs of leaderRunTime, runAllMisfires and arm files (rearm). Stopped
// instances are stopped for good once resumed and checked, so that three
// stay up.
func newLeaderCluster(t *testing.T, skews []time.Duration, jobs ...string) *leaderCluster {
	t.Helper()
	c := &leaderCluster{
		claimantCluster: newClaimantCluster(t, skews, func(cfg *instanceConfig) {
			cfg.LeaderOnly, cfg.RunTime = true, leaderRunTime
		}, jobs...),
		counted: map[cluster.Firing]bool{},
	}
	c.retire = true
	return c
}

// up reports whether the instance runs and is neither stopped nor asked to
// stop.
func (c *leaderCluster) up(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.Proc(name)
	return p != nil && p.Up() && !c.stopped[name]
}

// midRun waits for the leader to run a job, and kills it, or stops it (to
// be resumed in the background, resumeLeader), before the run ends; a new
// instance replaces it.
func (c *leaderCluster) midRun(stop bool) {
	c.tb.Helper()
	c.deal(c.acted(), false) // late actors of the round before
	from := c.Mark()
	run := c.awaitOne(from, hang, "a run on the leader", func(e cluster.Event) bool {
		return e.Kind == cluster.EvRun && !e.Triggered && c.up(e.Instance)
	})
	p := c.proc(run.Instance)
	f := fault{what: killMidRun, instance: p.Name(), firing: cluster.NewFiring(run.Job, run.Firing)}
	ev := cluster.Event{Kind: cluster.EvKilled, Instance: p.Name(), Leader: true, Job: run.Job, Firing: run.Firing}
	if stop {
		must(c.tb, p.Pause())
		f.what, f.at, ev.Kind = stopMidRun, wallNow(), cluster.EvPaused
		c.mu.Lock()
		c.stopped[p.Name()] = true
		c.mu.Unlock()
		c.wg.Go(func() { c.resumeLeader(p, f) })
	} else {
		f.at = c.kill(p.Name())
		c.noteRunning(p.Name())
	}
	ev.T = f.at
	c.Add(ev)
	c.faults = append(c.faults, f)
	// The job goes on for RunTime after it reported its run.
	if end := run.T.Add(c.base.RunTime); !f.at.Before(end) {
		c.tb.Errorf("%v: %v after its run began, not in the middle of it (it lasts %v)", f, f.at.Sub(run.T).Round(time.Millisecond), c.base.RunTime)
	}
	c.replace()
}

// killAt arms the instances to kill themselves (an arming "kill@...", such
// as killAtRun); the leader does, its records are read at once
// (noteRunning), and a new instance replaces it. Unlike round, which
// replaces it first.
func (c *leaderCluster) killAt(arming string) {
	c.tb.Helper()
	c.deal(c.acted(), false) // late actors of the round before
	from := c.Mark()
	c.arm(arming)
	c.awaitOne(from, hang, "the leader acting", cluster.IsKind(cluster.EvActing))
	acts := c.acted()
	c.arm("")
	for _, act := range acts {
		f := fault{what: act.Msg, instance: act.Instance, firing: cluster.NewFiring(act.Job, act.Firing)}
		f.at = c.kill(act.Instance) // it killed itself: this marks its exit as expected
		c.noteRunning(act.Instance)
		c.faults = append(c.faults, f)
		c.replace()
	}
}

// replace starts an instance in place of the one that failed, and counts
// the firings it left spent (countSpent).
func (c *leaderCluster) replace() {
	c.tb.Helper()
	up := c.Mark()
	c.awaitUp(up, c.spawn(c.armFile).Name())
	c.countSpent()
}

// awaitCaughtUp waits until every firing due from windowStart to now, and
// every firing a failed leader held, ran, by the database, or was spent
// (noteSpent: a stopped leader records those it spent when it is resumed).
func (c *leaderCluster) awaitCaughtUp(windowStart time.Time) {
	c.tb.Helper()
	now := wallNow()
	for _, f := range c.faults {
		if f.firing.Scheduled.After(now) { // claimed early, by a clock ahead
			now = f.firing.Scheduled
		}
	}
	deadline := time.Now().Add(hang)
	for {
		c.noteSpent()
		c.countSpent()
		ran := c.firings()
		overlapped := c.overlapSkipped(c.base.Jobs)
		var missing []string
		for _, at := range cluster.Scheduled(windowStart, now, c.base.Every) {
			for _, job := range c.base.Jobs {
				if k := cluster.NewFiring(job, at); ran[k] == 0 && !overlapped[k] {
					missing = append(missing, k.String())
				}
			}
		}
		switch {
		case len(missing) == 0:
			return
		case time.Now().After(deadline):
			// Not fatal: the rounds go on, and check says what else failed.
			c.tb.Errorf("firings due by %s not run %v later: %s; events since %s:\n%s", now.Format("15:04:05.000"),
				time.Since(now).Round(time.Millisecond), strings.Join(missing, ", "), windowStart.Format("15:04:05"),
				format(cluster.Filter(c.Events(), func(e cluster.Event) bool { return !e.T.Before(windowStart) })))
			return
		}
		sleep(200 * time.Millisecond)
	}
}

// awaitRunsEnded waits until every run of the jobs that started has
// ended, by the history, but those of the instance dead (a killed
// instance's run stays running).
func (c *leaderCluster) awaitRunsEnded(dead string) {
	c.tb.Helper()
	deadline := time.Now().Add(hang)
	for {
		var going []string
		for _, job := range c.base.Jobs {
			for _, r := range c.history(job) {
				if r.Outcome == scheduler.OutcomeRunning && r.Keeper != dead {
					going = append(going, runText(r))
				}
			}
		}
		switch {
		case len(going) == 0:
			return
		case time.Now().After(deadline):
			c.tb.Fatalf("runs still going %v later: %s", hang, strings.Join(going, "; "))
		}
		sleep(50 * time.Millisecond)
	}
}

// noteSpent reads the firings whose start was recorded and whose job was
// then not called, or not seen to end, by the history: "not run: ..." (a
// stopped leader, resumed, found its lease lost meanwhile), or spent (the
// job's next run found the run still running, its instance gone).
func (c *leaderCluster) noteSpent() {
	c.tb.Helper()
	for _, job := range c.base.Jobs {
		for _, r := range c.history(job) {
			k := cluster.NewFiring(job, r.Scheduled)
			notRun := r.Outcome == scheduler.OutcomeFailed && strings.HasPrefix(r.Error, "not run:") || r.Outcome == scheduler.OutcomeSpent
			if notRun && !r.Triggered && c.spent[k] == "" {
				c.tb.Logf("spent: %s", runText(r))
				c.spent[k] = r.Keeper
			}
		}
	}
}

// countSpent counts in firingsColl the spent firings that no job counted
// (noteRunning, noteSpent): they ran, as far as the scheduler is
// concerned. Called once the failed leader's last writes have landed, it
// counts only what no run counted: a run after it would count the firing
// twice, and one before it is found by check, from the events.
func (c *leaderCluster) countSpent() {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for k, by := range c.spent {
		if c.counted[k] {
			continue
		}
		_, err := c.db.Collection(firingsColl).UpdateOne(ctx, bson.D{{Key: "_id", Value: firingID(k.Job, k.Scheduled)}},
			bson.D{{Key: "$setOnInsert", Value: bson.D{{Key: "job", Value: k.Job}, {Key: "scheduled", Value: k.Scheduled},
				{Key: "keeper", Value: by}, {Key: "n", Value: 1}, {Key: "spent", Value: true}}}},
			options.UpdateOne().SetUpsert(true))
		must(c.tb, err)
		c.counted[k] = true
	}
}

// resumeLeader resumes p, a leader stopped at f, once another instance ran
// a firing due after the stop and 1.5 TTL after it stopped. Resumed, p
// must find its term lost. It is watched for two periods more, then
// stopped (retire). It runs in a goroutine of its own: it reports with
// errorf.
func (c *leaderCluster) resumeLeader(p *cluster.Proc, f fault) {
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	_, err := c.Await(ctx, 0, 1, func(e cluster.Event) bool {
		return e.Kind == cluster.EvRun && !e.Triggered && e.Instance != p.Name() && e.Firing.After(f.at)
	})
	cancel()
	if err != nil {
		c.errorf("%v: no other instance ran a firing due after it (%v)", f, err)
	}
	sleep(time.Until(f.at.Add(testTTL * 3 / 2)))
	from := c.Mark()
	if err := p.Resume(); err != nil {
		c.tb.Error(err) // not a finding: the harness failed
		return
	}
	c.Add(cluster.Event{Kind: cluster.EvResumed, Instance: p.Name()})
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	ended, err := c.Await(ctx, from, 1, cluster.IsKindBy(cluster.EvUnlead, p.Name()))
	cancel()
	switch {
	case err != nil:
		c.errorf("%v: resumed %v later, its term did not end (%v)", f, time.Since(f.at).Round(time.Millisecond), err)
	case !ended[0].Lost:
		c.errorf("%v: resumed, its term ended with cause %q, want lock.ErrLeaseLost", f, ended[0].Msg)
	default:
		c.logf("%v: resumed %v later; its term ended: %s", f, time.Since(f.at).Round(time.Millisecond), ended[0].Msg)
	}
	sleep(2 * every) // what it does as a follower: check reads it
	if c.retire {
		c.terminate(p, instanceStopTimeout)
	}
	c.mu.Lock()
	delete(c.stopped, p.Name())
	c.mu.Unlock()
}

// check checks what TestLeaderOnlyLeaderKilled promises (see there), once
// the window's firings ran.
func (c *leaderCluster) check(windowStart, windowEnd time.Time) {
	c.tb.Helper()
	ran := c.checkFirings(windowStart, windowEnd) // none twice, none lost, counting those spent (countSpent)
	evs := c.Events()
	runs := cluster.Runs(evs)

	// A spent firing's run is its only run, and only failed leaders spend
	// firings so.
	failed := map[string]bool{}
	for _, f := range c.faults {
		failed[f.instance] = true
	}
	for _, k := range cluster.SortedFirings(c.spent) {
		by := c.spent[k]
		if others := slices.DeleteFunc(slices.Clone(runs[k]), func(r string) bool { return r == by }); len(others) > 0 {
			c.tb.Errorf("firing %s, whose run %s started before it failed, ran again on %s", k, by, strings.Join(others, ", "))
		}
		if !failed[by] {
			c.tb.Errorf("firing %s was started and not run by %s, which did not fail", k, by)
		}
		how := "its job counted it"
		if len(runs[k]) == 0 {
			how = "its job was not called, or killed before it counted it"
		}
		c.tb.Logf("firing %s started on %s, which failed: %s; %d run(s) in the database", k, by, how, ran[k])
	}

	terms := cluster.LeaderTerms(evs, wallNow())
	for i, f := range c.faults {
		if (f.what == killMidRun || f.what == killAtRun) && c.spent[f.firing] != f.instance {
			c.tb.Errorf("round %d, %v: the job's record does not show that run started and not ended", i+1, f)
		}
		next := "no other instance led"
		for _, s := range terms {
			if s.Instance != f.instance && s.Start.After(f.at) {
				next = fmt.Sprintf("%s led %v later", s.Instance, s.Start.Sub(f.at).Round(time.Millisecond))
				break
			}
		}
		c.tb.Logf("round %d: %v; %s", i+1, f, next)
		if f.what == stopAtClaim || f.what == stopMidRun {
			// Firings fall due by the server's clock (this machine's) as
			// the instance estimates it, never ahead of it, whatever its
			// skew: it had reached at most at when it stopped. Any firing
			// due later it could only claim, or run, after it lost its
			// term, and before it leads again (a later round's failover
			// may elect it).
			due := f.at
			again := time.Time{}
			for _, s := range terms {
				if s.Instance == f.instance && s.Start.After(f.at) {
					again = s.Start
					break
				}
			}
			for _, e := range evs {
				if !again.IsZero() && !e.T.Before(again) {
					continue
				}
				if e.Instance == f.instance && !e.Triggered && e.Firing.After(due) &&
					(e.Kind == cluster.EvClaimed || e.Kind == cluster.EvTakenOver || e.Kind == cluster.EvRun) {
					c.tb.Errorf("%v: resumed, it %s %s, due after it stopped", f, e.Kind, cluster.NewFiring(e.Job, e.Firing))
				}
			}
		}
	}

	// Only leaders claim and run.
	var notLeading []string
	for _, e := range evs {
		if e.Triggered || e.Kind != cluster.EvClaimed && e.Kind != cluster.EvTakenOver && e.Kind != cluster.EvRun {
			continue
		}
		if !slices.ContainsFunc(terms, func(s cluster.Span) bool {
			return s.Instance == e.Instance && !e.T.Before(s.Start.Add(-leadSlack)) && !e.T.After(s.End.Add(leadSlack))
		}) {
			notLeading = append(notLeading, e.String())
		}
	}
	if len(notLeading) > 0 {
		c.tb.Errorf("%d claims, takeovers and runs by instances that did not lead; the first:\n  %s\nleader terms:\n  %s",
			len(notLeading), strings.Join(notLeading[:min(len(notLeading), 5)], "\n  "), strings.Join(spans(terms), "\n  "))
	}

	// How late the window's firings ran: after they were due, or after
	// the last failure before their run.
	firstRun := map[cluster.Firing]time.Time{}
	for _, e := range evs {
		if k := cluster.NewFiring(e.Job, e.Firing); e.Kind == cluster.EvRun && !e.Triggered && firstRun[k].IsZero() {
			firstRun[k] = e.T
		}
	}
	var worst, worstDue time.Duration
	var worstK, worstDueK cluster.Firing
	var worstWhy string
	for _, at := range cluster.Scheduled(windowStart, windowEnd, c.base.Every) {
		for _, job := range c.base.Jobs {
			k := cluster.NewFiring(job, at)
			t, ok := firstRun[k]
			if !ok {
				continue // spent, or missed: said above
			}
			from, why := at, "it was due"
			for _, f := range c.faults {
				if f.at.After(from) && f.at.Before(t) {
					from, why = f.at, fmt.Sprintf("%s %s", f.what, f.instance)
				}
			}
			late := t.Sub(from)
			if late > worst {
				worst, worstK, worstWhy = late, k, why
			}
			if t.Sub(at) > worstDue {
				worstDue, worstDueK = t.Sub(at), k
			}
		}
	}
	overloaded := cluster.Filter(evs, func(e cluster.Event) bool {
		return e.Kind == cluster.EvSkipped && strings.HasPrefix(e.Msg, scheduler.ReasonOverloaded)
	})
	c.tb.Logf("firings skipped as %q: %d", scheduler.ReasonOverloaded, len(overloaded))
	c.tb.Logf("latest firing: %s, %v after it was due; %s ran %v after %s (bound %v, a figure here: a loaded machine delays runs by any amount)",
		worstDueK, worstDue.Round(time.Millisecond), worstK, worst.Round(time.Millisecond), worstWhy, failoverBound)
}

// Scenario 11b: once the leader that followed a failure has caught up (every
// firing missed meanwhile ran, runAllMisfires), it gets back on schedule:
// every firing runs on its own claim, as it falls, none skipped (as busy,
// overloaded or missed) to be caught up later by a claim that covers
// several. Three instances in leader-only mode, three jobs "@every 1s"
// whose runs last leaderRunTime; the leader is killed in the middle of a
// run, and the firings due from when every firing so far ran are watched,
// three periods at a time, until three periods in a row went so.
//
// It failed while the scheduler's admission control (scheduler/admission.go)
// took the runs of a claim's earlier firings for the setup time of its
// later ones (scheduler's TestAdmissionTimesEachCatchUpRunOnItsOwn): each
// claim that catches up two firings or more cuts the limit to one firing
// set up at a time, and the jobs due together then take turns, one claimed
// each period and the others skipped as overloaded, so every claim catches
// up several firings again, for ever. On a loaded machine a firing may
// also be skipped now and then, rightly: its job's run before it started
// late and was still going, or setting firings up took longer than
// admission control allows. So the test asks for three periods in a row
// on schedule within a minute, not for the first three.
func TestLeaderOnlyBackOnSchedule(t *testing.T) {
	c := newLeaderCluster(t, nil, "tick-a", "tick-b", "tick-c")
	c.awaitOne(0, startTimeout, "a first run", cluster.IsKind(cluster.EvRun))
	windowStart := wallNow()
	failed := c.Mark()
	c.midRun(false)
	killed := c.faults[0]
	c.awaitOne(failed, hang, "a run by the next leader", func(e cluster.Event) bool {
		return e.Kind == cluster.EvRun && e.Instance != killed.instance && e.Firing.After(killed.at)
	})
	c.awaitCaughtUp(windowStart)
	// The runs that caught up may still be going (each lasts
	// leaderRunTime, and the last may have begun just now): a firing due
	// meanwhile is skipped as busy, rightly. Watch the firings from the
	// first due after they ended.
	c.awaitRunsEnded(killed.instance)
	caughtUp := wallNow()
	deadline := caughtUp.Add(hang)
	from, to := caughtUp, caughtUp
	var skipped []string
	var latest time.Duration
	for {
		untilMidPeriod(3)
		to = wallNow()
		c.awaitFirings(c.base.Jobs, from, to, hang)
		skipped, latest = c.offSchedule(from, to)
		if len(skipped) == 0 {
			t.Logf("caught up at %s, %v after %v; on schedule from %s to %s, firings run at most %v after they were due",
				caughtUp.Format("15:04:05.000"), caughtUp.Sub(killed.at).Round(time.Millisecond), killed,
				from.Format("15:04:05.000"), to.Format("15:04:05.000"), latest.Round(time.Millisecond))
			break
		}
		t.Logf("firings in [%s, %s] skipped: %s", from.Format("15:04:05.000"), to.Format("15:04:05.000"), strings.Join(skipped, "; "))
		if to.After(deadline) {
			t.Errorf("caught up at %s, %v after %v: not three periods in a row on schedule within %v; the last skipped: %s",
				caughtUp.Format("15:04:05.000"), caughtUp.Sub(killed.at).Round(time.Millisecond), killed, hang, strings.Join(skipped, "; "))
			break
		}
		from = to
	}
	c.checkFirings(windowStart, to)
}

// offSchedule returns the firings in [from, to] that were skipped where
// they fell (each with the instance and reason), and how late the others
// ran after they were due.
func (c *leaderCluster) offSchedule(from, to time.Time) (skipped []string, latest time.Duration) {
	first := map[cluster.Firing]cluster.Event{}
	for _, e := range cluster.Filter(c.Events(), cluster.IsKind(cluster.EvRun, cluster.EvSkipped)) {
		if k := cluster.NewFiring(e.Job, e.Firing); !e.Triggered && first[k].Kind == "" {
			first[k] = e
		}
	}
	for _, at := range cluster.Scheduled(from, to, c.base.Every) {
		for _, job := range c.base.Jobs {
			k := cluster.NewFiring(job, at)
			switch e := first[k]; e.Kind {
			case cluster.EvSkipped:
				skipped = append(skipped, fmt.Sprintf("%s on %s: %s", k, e.Instance, e.Msg))
			case cluster.EvRun:
				latest = max(latest, e.T.Sub(at))
			}
		}
	}
	return skipped, latest
}

// spans formats terms, one a line.
func spans(terms []cluster.Span) []string {
	out := make([]string, len(terms))
	for i, s := range terms {
		out[i] = s.String()
	}
	return out
}
