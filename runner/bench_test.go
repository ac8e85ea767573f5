package runner_test

import (
	"errors"
	"flag"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/mongolock/mongolock/lock"
)

var failoverTrials = flag.Int("failover.trials", 10, "failovers measured per benchmark iteration")

// benchTTL is the lease of the failover benchmark; the session's defaults
// for it are renew interval 333ms, renew deadline 667ms, retry period 67ms.
const benchTTL = time.Second

// BenchmarkFailover measures how long leadership is vacant, over repeated
// trials on three runners, and reports p50/p99 in milliseconds and as
// ratios to the TTL and to TTL plus a retry period (the goal: p99 ≤ 1).
//
//   - cut: the leader's connection is cut at a random point of its renewal
//     cycle; the others wait for the lease to expire by the server's clock.
//     Timed from the cut to the next task start.
//   - graceful: the baseline of the same run; the leader's Run is cancelled
//     and it releases the lock. Timed from the cancellation to the next start.
func BenchmarkFailover(b *testing.B) {
	b.Run("cut", func(b *testing.B) { benchFailover(b, true) })
	b.Run("graceful", func(b *testing.B) { benchFailover(b, false) })
}

func benchFailover(b *testing.B, cut bool) {
	c := newCluster(b, 3, benchTTL)
	c.startAll()
	leader := c.nextStart(10 * time.Second)
	ri, rp := c.timings().RenewInterval, c.timings().RetryPeriod
	var samples []time.Duration
	b.ResetTimer()
	for range b.N {
		for range *failoverTrials {
			i := c.index(leader.keeper)
			var from time.Time
			if cut {
				// Not synchronisation: the cut lands anywhere in the cycle.
				time.Sleep(time.Duration(rand.Int64N(int64(ri))))
				from = time.Now()
				c.faults[i].Cut()
			} else {
				// Not synchronisation: lets a runner restarted by the last
				// trial settle, and lands anywhere in the followers' cycle.
				time.Sleep(rp + time.Duration(rand.Int64N(int64(rp))))
				from = time.Now()
				if err := c.stop(i); err == nil {
					b.Fatal("Run returned nil")
				}
			}
			end := c.nextEnd(benchTTL + 10*time.Second)
			next := c.nextStart(benchTTL + 10*time.Second)
			if end.keeper != leader.keeper || next.keeper == leader.keeper {
				b.Fatalf("%s stopped and %s started; %s led", end.keeper, next.keeper, leader.keeper)
			}
			if cut && !errors.Is(end.cause, lock.ErrLeaseLost) {
				b.Fatalf("cut leader's task ended with %v", end.cause)
			}
			samples = append(samples, next.start.Sub(from))
			if cut {
				c.faults[i].Restore()
			} else {
				c.start(i)
			}
			leader = next
		}
	}
	b.StopTimer()
	for i := range c.runners {
		_ = c.stop(i)
	}
	c.checkNoOverlap()

	slices.Sort(samples)
	p50, p99 := percentile(samples, 50), percentile(samples, 99)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(p50), "p50_ms")
	b.ReportMetric(ms(p99), "p99_ms")
	b.ReportMetric(float64(p50)/float64(benchTTL), "p50/ttl")
	b.ReportMetric(float64(p99)/float64(benchTTL), "p99/ttl")
	b.ReportMetric(float64(p99)/float64(benchTTL+rp), "p99/(ttl+retry)")
	b.ReportMetric(0, "ns/op") // an iteration is many trials; its time means nothing
}

// percentile returns the p-th percentile of sorted samples (nearest rank).
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100
	return sorted[max(rank, 1)-1]
}
