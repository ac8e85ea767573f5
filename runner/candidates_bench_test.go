package runner_test

import (
	"flag"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/runner"
)

var handoverTrials = flag.Int("handover.trials", 5, "preference handovers measured per benchmark iteration")

// benchGrace is the preference grace of the handover benchmark: with
// benchTTL the retry period is 67ms.
const benchGrace = time.Second

// BenchmarkPreferredHandover measures, on the test server, how long a
// higher-priority candidate waits from the start of its Run to the start
// of its task, while a lower-priority leader's term is already older than
// the grace. The promise is the grace plus a few retry periods: the
// candidate publishes its candidacy (one round trip), the leader sees it
// at its next look (every retry period) and, once it has been seen waiting
// for the grace, steps down and releases; the candidate acquires at its
// next campaign. It reports p50/p99 in milliseconds, as ratios to the
// grace, and the excess over the grace in retry periods. The baseline of
// the same run is the preferred candidate's return: the lower one leading
// again after the preferred one's Run is cancelled (a release and a
// campaign, no grace).
func BenchmarkPreferredHandover(b *testing.B) {
	name := mongotest.NewDatabase(b).Name()
	c := newClusterEach(b, benchTTL, func() (*mongo.Database, fault) {
		client, fault := mongotest.NewProxiedClient(b)
		return mongotest.Database(b, client, name), fault
	}, [][]runner.Option{
		{runner.WithPriority(0), runner.WithPreferenceGrace(benchGrace)},
		{runner.WithPriority(5), runner.WithPreferenceGrace(benchGrace)},
	})
	rp := c.timings().RetryPeriod
	c.start(0)
	if tm := c.nextStart(10 * time.Second); tm.keeper != "k0" {
		b.Fatalf("%s led first", tm.keeper)
	}
	var samples, back []time.Duration
	b.ResetTimer()
	for range b.N {
		for range *handoverTrials {
			// Not synchronisation: k0's term must be older than the grace
			// for the candidate's wait alone to count.
			time.Sleep(benchGrace + rp)
			from := time.Now()
			c.start(1)
			next := c.nextStart(benchGrace + 10*time.Second)
			if next.keeper != "k1" {
				b.Fatalf("%s led; want the preferred k1", next.keeper)
			}
			samples = append(samples, next.start.Sub(from))
			from = time.Now()
			_ = c.stop(1)
			again := c.nextStart(10 * time.Second)
			if again.keeper != "k0" {
				b.Fatalf("%s led after k1 left; want k0", again.keeper)
			}
			back = append(back, again.start.Sub(from))
		}
	}
	b.StopTimer()
	_ = c.stop(0) // k1 is stopped already
	c.checkNoOverlap()

	slices.Sort(samples)
	slices.Sort(back)
	p50, p99 := percentile(samples, 50), percentile(samples, 99)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(p50), "p50_ms")
	b.ReportMetric(ms(p99), "p99_ms")
	b.ReportMetric(float64(p50)/float64(benchGrace), "p50/grace")
	b.ReportMetric(float64(p99)/float64(benchGrace), "p99/grace")
	b.ReportMetric(float64(p99-benchGrace)/float64(rp), "(p99-grace)/retry")
	b.ReportMetric(float64(percentile(back, 50))/float64(rp), "back_p50/retry")
	b.ReportMetric(0, "ns/op") // an iteration is many trials; its time means nothing
}
