//go:build unix

package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/cluster"
	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
)

var (
	failoverTrials = flag.Int("integration.trials", 8, "failovers BenchmarkFailover measures of each kind")
	claimantRounds = flag.Int("integration.rounds", 12, "rounds BenchmarkClaimantsKilled plays of each kind")
)

// BenchmarkFailover reports how long the leadership stays vacant when the
// leader's process goes away, as p50 and p99 ratios to the TTL (1s here, so
// the runner's retry period is 67ms and its documented bound, TTL plus a
// retry period, is 1.07× TTL). Three instance processes; each trial times
// from the signal to the next leader task's start, then starts a new
// instance. With 8 trials p99 is the slowest.
//
// "kill" sends SIGKILL at a random point of the leader's renewal cycle: the
// others must wait until its lease expires by the server's clock.
// "graceful", the baseline of the same run, sends SIGTERM: the leader
// releases the lock and the next campaign wins.
func BenchmarkFailover(b *testing.B) {
	for _, kind := range []string{"kill", "graceful"} {
		b.Run(kind, func(b *testing.B) { benchFailover(b, kind == "kill") })
	}
}

func benchFailover(b *testing.B, kill bool) {
	const benchTTL = time.Second
	c := newCluster(b, benchTTL)
	c.spawnN(3)
	leader := c.awaitLeader(0, startTimeout)
	ri := lock.DefaultTimings(benchTTL).RenewInterval
	var samples []time.Duration
	for range b.N {
		for range *failoverTrials {
			// Not synchronisation: lands anywhere in the renewal cycle.
			sleep(ri + time.Duration(rand.Int64N(int64(ri))))
			from := c.Mark()
			at := wallNow()
			if kill {
				c.kill(leader.Instance)
			} else {
				c.terminate(c.proc(leader.Instance), instanceStopTimeout)
			}
			next := c.awaitLeader(from, benchTTL+slack+10*time.Second)
			samples = append(samples, next.T.Sub(at))
			c.spawnN(1)
			leader = next
		}
	}
	b.StopTimer()
	ttl := benchTTL.Seconds()
	b.ReportMetric(percentile(samples, 50).Seconds()/ttl, "p50/TTL")
	b.ReportMetric(percentile(samples, 99).Seconds()/ttl, "p99/TTL")
	b.ReportMetric(float64(percentile(samples, 50).Milliseconds()), "p50-ms")
	b.ReportMetric(float64(percentile(samples, 99).Milliseconds()), "p99-ms")
	b.Logf("%d failovers, TTL %v: %v", len(samples), benchTTL, samples)
	c.checkExclusion()
}

// BenchmarkClaimantsKilled reports what becomes of the firings of cron jobs
// when the instances that claimed them die or stall between the claim and
// the run's start: the share of the firings in the window that ran
// exactly once (goal 100 %), how many ran twice (goal 0), how many never
// ran, and how many were spent: started, by the job's record, on an
// instance killed before its job counted the run (a kill armed for
// another job's firing lands while this one's run is in flight: at most
// once, by design; not counted as never run); and how late the taken-over firings ran, from their scheduled
// time to their run's report, as p50 and p99 ratios to the TTL (2s here;
// the test bounds a takeover to a TTL, two poll intervals and slack after
// the last claimant acted, and a firing may have had several).
// Taken over are the firings a claimant held when it acted on itself, and
// every firing an instance reported taking over. Three instances, three
// jobs "@every 1s", runAllMisfires.
//
// "kill": each round, after a random pause of up to a TTL, arms the
// instances with kill@claim, stop@claim, kill@lock or stop@lock, at random
// (rearm); the first to reach that point acts on itself (with three jobs,
// another may at the same instant), and a new instance replaces each that
// did. A stopped one is resumed, at random, once the firing ran elsewhere,
// or at a random instant one to two and a half TTLs after it stopped,
// before or after the takeover; then it is stopped, so that three instances
// stay up. "none", the baseline of the same run, plays as many rounds with
// no one armed: each pauses as long, then waits for a claim. With a dozen
// rounds, a few dozen firings are taken over: p99 is the slowest.
//
// It measures and does not fail on what it measures: TestClaimantKilled
// asserts. What the test would report as failures is logged.
func BenchmarkClaimantsKilled(b *testing.B) {
	for _, kind := range []string{"kill", "none"} {
		b.Run(kind, func(b *testing.B) { benchClaimantsKilled(b, kind == "kill") })
	}
}

func benchClaimantsKilled(b *testing.B, kill bool) {
	c := newClaimantCluster(b, nil, nil, "tick-a", "tick-b", "tick-c")
	var mu sync.Mutex
	var findings []string
	c.errorf = func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		findings = append(findings, fmt.Sprintf(format, args...))
	}
	c.logf = func(string, ...any) {}
	c.retire = true
	from := wallNow()
	for range b.N {
		for range *claimantRounds {
			// Not synchronisation: lands anywhere in the firings' cycle,
			// sometimes while the last round's takeover is pending.
			sleep(rand.N(testTTL))
			if kill {
				c.round(claimantArmings[rand.N(len(claimantArmings))], rand.N(2) == 0)
			} else {
				c.awaitOne(c.Mark(), 2*every+slack, "a claim", cluster.IsKind(cluster.EvClaimed))
			}
		}
	}
	to := wallNow()
	b.StopTimer()
	c.settle(false)
	c.awaitFirings(c.base.Jobs, from, to, takeoverBound+10*time.Second)

	ran, evs := c.firings(), c.Events()
	started := map[cluster.Firing]time.Time{} // its first run's report
	taken := map[cluster.Firing]bool{}
	for _, v := range c.victims {
		taken[cluster.NewFiring(v.act.Job, v.act.Firing)] = true
	}
	for _, e := range evs {
		k := cluster.NewFiring(e.Job, e.Firing)
		switch {
		case e.Kind == cluster.EvTakenOver:
			taken[k] = true
		case e.Kind == cluster.EvRun && !e.Triggered && started[k].IsZero():
			started[k] = e.T
		}
	}
	var firings, once, spent int
	var never []string
	var late, takenLate []time.Duration
	for _, f := range cluster.Scheduled(from, to, every) {
		for _, job := range c.base.Jobs {
			k := cluster.NewFiring(job, f)
			firings++
			switch ran[k] {
			case 0:
				if c.spent[k] != "" {
					spent++ // started on an instance killed with its run
				} else {
					never = append(never, k.String())
				}
			case 1:
				once++
			}
			if t, ok := started[k]; ok {
				late = append(late, t.Sub(f))
				if taken[k] {
					takenLate = append(takenLate, t.Sub(f))
				}
			}
		}
	}
	var twice []string
	for _, k := range cluster.SortedFirings(ran) {
		if ran[k] > 1 {
			twice = append(twice, fmt.Sprintf("%s (%d runs)", k, ran[k]))
		}
	}

	ttl := testTTL.Seconds()
	b.ReportMetric(100*float64(once)/float64(max(firings, 1)), "once-%")
	b.ReportMetric(float64(len(twice)), "twice")
	b.ReportMetric(float64(len(never)), "never")
	b.ReportMetric(float64(spent), "spent")
	b.ReportMetric(float64(firings), "firings")
	b.ReportMetric(percentile(late, 50).Seconds()/ttl, "late-p50/TTL")
	b.ReportMetric(float64(len(takenLate)), "taken-over")
	if len(takenLate) > 0 {
		b.ReportMetric(percentile(takenLate, 50).Seconds()/ttl, "takeover-p50/TTL")
		b.ReportMetric(percentile(takenLate, 99).Seconds()/ttl, "takeover-p99/TTL")
	}
	armed := map[string]int{}
	for _, v := range c.victims {
		armed[v.act.Msg]++
	}
	slices.Sort(takenLate)
	for i, d := range takenLate {
		takenLate[i] = d.Round(10 * time.Millisecond)
	}
	b.Logf("%d rounds, %d firings in [%s, %s]: %d ran once, never: %v, twice: %v; acted: %v; taken over: %v",
		b.N**claimantRounds, firings, from.Format(time.TimeOnly), to.Format(time.TimeOnly), once, never, twice, armed, takenLate)
	for _, f := range findings {
		b.Log(f)
	}
	// What became of each firing that never ran: its job's events and
	// history around it, for whoever chases it, in a file (a benchmark's
	// log is cut to a few lines).
	var dump strings.Builder
	for _, f := range cluster.Scheduled(from, to, every) {
		for _, job := range c.base.Jobs {
			if k := cluster.NewFiring(job, f); ran[k] == 0 && c.spent[k] == "" {
				near := cluster.Filter(evs, func(e cluster.Event) bool {
					return e.T.After(f.Add(-5*every)) && e.T.Before(f.Add(takeoverBound+5*every)) && (e.Job == "" || e.Job == job)
				})
				var hist []string
				for _, r := range c.history(job) {
					if d := r.Scheduled.Sub(f); d > -5*every && d < 5*every {
						hist = append(hist, runText(r))
					}
				}
				fmt.Fprintf(&dump, "%s never ran; events near it:\n%s\nhistory near it:\n%s\n\n", k, format(near), strings.Join(hist, "\n"))
			}
		}
	}
	if dump.Len() > 0 {
		f, err := os.CreateTemp("", "claimants-killed-*.log")
		if err != nil {
			b.Logf("what became of the firings that never ran: not written: %v", err)
			return
		}
		_, err = f.WriteString(dump.String())
		b.Logf("what became of the firings that never ran: %s (%v)", f.Name(), errors.Join(err, f.Close()))
	}
}

// BenchmarkAcquireRelease measures the throughput of uncontended
// Mutex AcquireLock+ReleaseLock pairs from several goroutines of one Session, against the
// baseline a user would write by hand with the driver (an upsert and a
// delete, with the same write concern), in alternating slots of the same run.
func BenchmarkAcquireRelease(b *testing.B) {
	useBackend(b)
	const (
		workers = 4
		slot    = 500 * time.Millisecond
		rounds  = 3
	)
	db := mongotest.NewDatabase(b)
	l, err := lock.New(db)
	if err != nil {
		b.Fatal(err)
	}
	session, err := lock.NewSession(l, lock.WithKeeperID("bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer session.Close()
	raw := db.Collection("raw", options.Collection().SetWriteConcern(lock.DefaultWriteConcern()))
	withLock := func(ctx context.Context, id string) error {
		m, err := session.Mutex(id)
		if err != nil {
			return err
		}
		if _, ok, err := m.AcquireLock(ctx); err != nil || !ok {
			return errors.Join(fmt.Errorf("acquire %s: acquired=%v", id, ok), err)
		}
		return m.ReleaseLock(ctx)
	}
	byHand := func(ctx context.Context, id string) error {
		filter := bson.M{"_id": id, "kid": "bench"}
		set := bson.M{"$set": bson.M{"kid": "bench"}, "$currentDate": bson.M{"ts": true}}
		if _, err := raw.UpdateOne(ctx, filter, set, options.UpdateOne().SetUpsert(true)); err != nil {
			return err
		}
		_, err := raw.DeleteOne(ctx, filter)
		return err
	}
	var lockPairs, rawPairs int
	for range b.N {
		for r := range rounds {
			// Alternate which goes first, so neither gains from the other's
			// warm caches.
			first, second := withLock, byHand
			if r%2 == 1 {
				first, second = byHand, withLock
			}
			n1, n2 := pairsIn(b, slot, workers, first), pairsIn(b, slot, workers, second)
			if r%2 == 1 {
				n1, n2 = n2, n1
			}
			lockPairs += n1
			rawPairs += n2
		}
	}
	secs := float64(b.N*rounds) * slot.Seconds()
	b.ReportMetric(float64(lockPairs)/secs, "lock-pairs/s")
	b.ReportMetric(float64(rawPairs)/secs, "raw-pairs/s")
	b.ReportMetric(float64(lockPairs)/float64(rawPairs), "lock/raw")
}

// pairsIn runs pair from workers goroutines, each on its own ids, for d and
// returns how many calls completed.
func pairsIn(b *testing.B, d time.Duration, workers int, pair func(context.Context, string) error) int {
	b.Helper()
	var stop atomic.Bool
	t := time.AfterFunc(d, func() { stop.Store(true) })
	defer t.Stop()
	ctx := context.Background()
	counts := make([]int, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				if errs[w] = pair(ctx, fmt.Sprintf("w%d-%d", w, i%16)); errs[w] != nil {
					return
				}
				counts[w]++
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	return total
}

// percentile returns the p-th percentile (0..100) of ds, nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p/100*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}
