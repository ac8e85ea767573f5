//go:build unix

package integration

import (
	"testing"
	"time"

	"github.com/mongolock/mongolock/internal/cluster"
)

// Scenario 4: three instances whose wall clocks are off by -TTL, 0 and +TTL
// (their lock, runner, scheduler and migrator all read the skewed clock).
// Leases are judged by the server's clock and firings are claimed once, so
// there must be no double holder and no double firing, and a failover takes
// as long as without skew. The instance most ahead claims the firings; that
// it runs them early is the documented price of its skew.
func TestSkewedClocks(t *testing.T) {
	c := newCluster(t, testTTL, "tick-a", "tick-b")
	skews := map[string]time.Duration{}
	from := c.Mark()
	for _, s := range []time.Duration{-testTTL, 0, testTTL} {
		p := c.spawn(func(cfg *instanceConfig) { cfg.Skew = s })
		skews[p.Name()] = s
	}
	for k := range skews {
		c.awaitUp(from, k)
	}
	first := c.awaitLeader(0, startTimeout)
	sleep(3 * every)

	// Kill the leader: the others take over by the server's clock.
	mark := c.Mark()
	killedAt := c.kill(first.Instance)
	next := c.awaitLeader(mark, hang)
	failover := next.T.Sub(killedAt)
	t.Logf("leader %s (skew %v) killed; %s (skew %v) led %v later", first.Instance, skews[first.Instance],
		next.Instance, skews[next.Instance], failover.Round(time.Millisecond))
	// Then the instance whose clock is ahead, which claims the firings, if it
	// is still there.
	for k, s := range skews {
		if s > 0 && k != first.Instance {
			c.kill(k)
		}
	}
	// The instance behind claims F only when its clock reads F, TTL late:
	// keep going long enough for it to run some, so the check below covers
	// firings claimed by clocks on both sides. How many each ran is logged,
	// not asserted: the share depends on scheduling.
	sleep(testTTL + 4*every)

	byKeeper := map[string]int{}
	for _, e := range c.Events() {
		if e.Kind == cluster.EvRun {
			byKeeper[e.Instance]++
		}
	}
	for k, n := range byKeeper {
		t.Logf("%s (skew %+v) ran %d firings", k, skews[k], n)
	}
	c.checkExclusion()
}
