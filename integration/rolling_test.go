//go:build unix

package integration

import (
	"math/rand/v2"
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
// Each stop lands as its instance claims a firing (its clock's reading of
// the firing, plus up to 30 ms), the moment a stop is most likely to leave
// a claim not started. Stop starts nothing more, and releases the
// instance's presence lease once its firings are gone: another instance
// takes such a claim over within a poll interval or two and runs it, late.
// Firings that fall meanwhile cannot be claimed (the claims of a job
// settle in order) and are missed: only a catch-up policy that runs missed
// firings runs them, hence catchUpAll; the default, CatchUpLatest, would
// record all but the newest as not run. The -integration.long variant
// stops at random instants, more often.
func TestRollingRestart(t *testing.T) {
	withSkews(t, func(t *testing.T, skews []time.Duration) {
		rollingRestart(t, skews, 6, func(p *cluster.Proc) {
			untilFiring(1, -skewOf(skews, p.Name())+rand.N(30*time.Millisecond))
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
	c.base.CatchUp = &catchUpAll
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
