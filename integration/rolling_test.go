//go:build unix

package integration

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/mongolock/mongolock/internal/cluster"
)

// Scenario 5: all three instances are restarted one after the other
// (SIGTERM, then a new process) while "@every 1s" jobs run. Every firing
// while at least one instance was up must have run exactly once, and the
// leadership must have been handed over at once.
//
// Each stop lands halfway between two firings. A stop that lands while its
// instance is claiming a firing may skip that firing (Stop claims and starts
// nothing more, as documented); the -integration.long variant stops at
// random instants and checks that only such firings are missed.
func TestRollingRestart(t *testing.T) {
	c := newCluster(t, testTTL, "tick-a", "tick-b")
	procs := c.spawnN(3)
	c.awaitLeader(0, startTimeout)
	windowStart := wallNow()
	for _, p := range procs {
		untilMidPeriod(1)
		from := c.Mark()
		c.terminate(p, instanceStopTimeout)
		c.awaitUp(from, c.spawn().Name())
	}
	untilMidPeriod(1)
	windowEnd := wallNow()
	sleep(every / 4) // the last firing's run reports

	c.checkFirings(windowStart, windowEnd)
	terms := cluster.LeaderTerms(c.Events(), wallNow())
	for i, g := range cluster.Gaps(terms) {
		t.Logf("handover %d: %v without a leader", i+1, g.Round(time.Millisecond))
	}
	c.checkExclusion()
}

// The rolling restart with stops at random instants, repeated: no firing runs
// twice, and a firing is missed only if an instance stopped within one
// period after it (it had claimed the firing and then stopped).
func TestRollingRestartRandom(t *testing.T) {
	if !*longRun {
		t.Skip("long variant: run with -integration.long")
	}
	c := newCluster(t, testTTL, "tick-a", "tick-b")
	procs := c.spawnN(3)
	c.awaitLeader(0, startTimeout)
	windowStart := wallNow()
	var stops []time.Time
	for round := range 12 {
		sleep(every + time.Duration(rand.Int64N(int64(2*every))))
		from := c.Mark()
		i := round % len(procs)
		stops = append(stops, wallNow())
		c.terminate(procs[i], instanceStopTimeout)
		procs[i] = c.spawn()
		c.awaitUp(from, procs[i].Name())
	}
	sleep(every)
	windowEnd := wallNow()
	sleep(every / 4)

	ran := c.firings()
	var unexplained, explained []string
	for _, f := range cluster.Scheduled(windowStart, windowEnd, every) {
		for _, job := range c.base.Jobs {
			k := cluster.NewFiring(job, f)
			switch {
			case ran[k] > 0:
			case nearStop(f, stops):
				explained = append(explained, k.String())
			default:
				unexplained = append(unexplained, k.String())
			}
		}
	}
	t.Logf("%d stops; firings missed right before a stop: %d (%s)", len(stops), len(explained), strings.Join(explained, ", "))
	if len(unexplained) > 0 {
		t.Errorf("firings missed with no stop within a period after them: %s", strings.Join(unexplained, ", "))
	}
	if len(explained) > len(stops)*len(c.base.Jobs) {
		t.Errorf("%d firings missed around %d stops: more than one per job per stop", len(explained), len(stops))
	}
	c.checkExclusion()
}

// nearStop reports whether an instance stopped within one period after
// firing f.
func nearStop(f time.Time, stops []time.Time) bool {
	for _, s := range stops {
		if !s.Before(f) && s.Sub(f) < every {
			return true
		}
	}
	return false
}
