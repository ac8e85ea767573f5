//go:build unix

package integration

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mongolock/mongolock/internal/cluster"
	"github.com/mongolock/mongolock/scheduler"
)

// Scenario 5: all three instances are restarted one after the other, twice
// (SIGTERM, then a new process), while "@every 1s" jobs run. Every firing
// due while at least one instance was up must have run exactly once, and
// the leadership must have been handed over at once.
//
// Each stop lands as its instance claims a firing (the firing, by the
// server's clock, which firings fall due by, plus up to 30 ms), the moment a stop is most likely to leave
// a claim not started. Stop starts nothing more, and releases the
// instance's presence lease once its firings are gone: another instance
// takes such a claim over within a poll interval or two and runs it, late.
// Firings that fall meanwhile cannot be claimed (the claims of a job
// settle in order): the claim after the takeover covers them, and they
// run late, within the misfire threshold; runAllMisfires runs any that
// a loaded machine delays past it too. The -integration.long variant
// stops at random instants, more often.
func TestRollingRestart(t *testing.T) {
	withSkews(t, func(t *testing.T, skews []time.Duration) {
		rollingRestart(t, skews, 6, func(p *cluster.Proc) {
			untilFiring(1, rand.N(30*time.Millisecond))
		})
	})
}

// The rolling restart with stops at random instants, repeated.
func TestRollingRestartRandom(t *testing.T) {
	if !*longRun {
		t.Skip("long variant: run with -integration.long")
	}
	withSkews(t, func(t *testing.T, skews []time.Duration) {
		rollingRestart(t, skews, 12, func(*cluster.Proc) { sleep(every + rand.N(2*every)) })
	})
}

// rollingRestart restarts the instances, one at a time, n times, each
// stop once wait returns, and checks that every firing ran once.
func rollingRestart(t *testing.T, skews []time.Duration, n int, wait func(*cluster.Proc)) {
	c := newCluster(t, testTTL, "tick-a", "tick-b")
	c.skews = skews
	c.base.Misfire = &runAllMisfires
	procs := c.spawnN(3)
	c.awaitLeader(0, startTimeout)
	windowStart := wallNow()
	for round := range n {
		i := round % len(procs)
		wait(procs[i])
		from := c.Mark()
		c.terminate(procs[i], instanceStopTimeout)
		procs[i] = c.spawn()
		c.awaitUp(from, procs[i].Name())
	}
	untilMidPeriod(1)
	windowEnd := wallNow()
	c.awaitFirings(c.base.Jobs, windowStart, windowEnd, hang)

	c.checkFirings(windowStart, windowEnd)
	left := cluster.Filter(c.Events(), func(e cluster.Event) bool {
		return e.Kind == cluster.EvSkipped && strings.HasPrefix(e.Msg, scheduler.ReasonStopping) || e.Kind == cluster.EvTakenOver
	})
	t.Logf("%d restarts; claims left by a stop, and taken over: %d", n, len(left))
	for _, e := range left {
		t.Logf("  %v", e)
	}
	terms := cluster.LeaderTerms(c.Events(), wallNow())
	for i, g := range cluster.Gaps(terms) {
		t.Logf("handover %d: %v without a leader", i+1, g.Round(time.Millisecond))
	}
	c.checkExclusion()
}

// untilFiring sleeps until offset after a firing instant (a multiple of
// every), at least periods from now.
func untilFiring(periods int, offset time.Duration) {
	now := time.Now()
	next := now.Truncate(every).Add(offset)
	for next.Before(now) {
		next = next.Add(every)
	}
	sleep(next.Sub(now) + time.Duration(periods)*every)
}

// Scenario 5b: a rolling deploy that changes a job's spec. Two instances
// run "tick" every 2s; they are replaced, one at a time, by two that run
// it every 3s. The firings follow one spec at any time, cluster-wide: the
// 2s spec's until the first new instance registered the job (the job
// document's SpecSince, on the server's clock), the 3s spec's after it.
// None ran twice, none of either spec outside its time, and every firing
// of the spec followed while an instance was up ran.
func TestRollingDeployChangesSpec(t *testing.T) {
	const oldEvery, newEvery = 2 * time.Second, 3 * time.Second
	c := newCluster(t, testTTL, "tick")
	c.base.Every = oldEvery
	olds := c.spawnN(2)
	windowStart := wallNow()
	sleep(2 * oldEvery)
	neu := func(cfg *instanceConfig) { cfg.Every = newEvery }
	for _, old := range olds {
		from := c.Mark()
		p := c.spawn(neu)
		c.awaitUp(from, p.Name())
		sleep(oldEvery)
		c.terminate(old, instanceStopTimeout)
	}
	sleep(2 * newEvery)
	windowEnd := wallNow()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recs, _, err := scheduler.LoadRecords(ctx, c.db.Collection(scheduler.DefaultJobsCollection), "tick")
	if err != nil || len(recs) != 1 || recs[0].SpecSince.IsZero() || recs[0].Spec != "@every 3s" {
		t.Fatalf("record of tick %+v %v: want the new spec, since its first registration", recs, err)
	}
	since := recs[0].SpecSince
	want := map[cluster.Firing]bool{}
	for _, f := range cluster.Scheduled(windowStart, since, oldEvery) {
		want[cluster.NewFiring("tick", f)] = true
	}
	for _, f := range cluster.Scheduled(since.Add(time.Nanosecond), windowEnd, newEvery) {
		want[cluster.NewFiring("tick", f)] = true
	}
	deadline := time.Now().Add(takeoverBound)
	ran := c.firings()
	for missing := true; missing && time.Now().Before(deadline); ran = c.firings() {
		missing = false
		for k := range want {
			missing = missing || ran[k] == 0
		}
		if missing {
			time.Sleep(100 * time.Millisecond)
		}
	}
	c.checkFiringsOf(nil, time.Time{}, time.Time{}) // none twice
	for _, k := range cluster.SortedFirings(ran) {
		f := k.Scheduled
		switch {
		case f.Before(windowStart):
		case !f.After(since) && f.UnixNano()%int64(oldEvery) != 0:
			t.Errorf("firing %s of the new spec ran before its registration at %s", k, since.Local().Format("15:04:05.000"))
		case f.After(since) && f.UnixNano()%int64(newEvery) != 0:
			t.Errorf("firing %s of the superseded spec ran after the new one's registration at %s", k, since.Local().Format("15:04:05.000"))
		}
	}
	var missed []string
	for k := range want {
		if ran[k] == 0 {
			missed = append(missed, k.String())
		}
	}
	if len(missed) > 0 {
		slices.Sort(missed)
		t.Errorf("firings of the spec followed that did not run: %s (the new spec since %s)", strings.Join(missed, ", "), since.Local().Format("15:04:05.000"))
		c.logRecords([]string{"tick"}, windowStart, windowEnd)
	}
	t.Logf("%d firings ran in [%s, %s], the new spec's since %s", len(want), windowStart.Format(time.TimeOnly),
		windowEnd.Format(time.TimeOnly), since.Local().Format("15:04:05.000"))
}
