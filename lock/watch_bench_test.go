package lock_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mongolock/mongolock/lock"
)

// BenchmarkWatchLatency times, for a watcher polling every watchPeriod,
// how long after a release (from just before it was sent) the watcher
// sees it, and reports it as a fraction of the period (latency/period).
// The release is sent a random pause after the watcher saw the
// acquisition, so it lands at a random point of the reader's period: about
// 0.5 on average, plus a read's and a release's round trips; worst/period
// stays under 1 plus those (the stated bound).
func BenchmarkWatchLatency(b *testing.B) {
	const watchPeriod = 50 * time.Millisecond
	ls, db := newLockers(b, 1)
	holder := ls[0]
	w, err := lock.New(db, lock.WithWatchPeriod(watchPeriod))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	ws := watch(b, w, "leader")
	ws.await(b, "no document", func(h lock.Holder) bool { return true })
	var total, worst time.Duration
	b.ResetTimer() // ns/op includes the pauses; the metrics do not
	for i := 0; i < b.N; i++ {
		mustAcquire(b, ctx, holder, "leader", "k")
		ws.await(b, "the acquisition", heldBy("k"))
		time.Sleep(rand.N(watchPeriod)) //nolint:forbidigo // a random phase of the reader's period
		sent := time.Now()
		if err := releaseOne(ctx, holder, "leader", "k"); err != nil {
			b.Fatal(err)
		}
		ws.await(b, "the release", func(h lock.Holder) bool { return h.Released })
		d := time.Since(sent)
		total += d
		worst = max(worst, d)
	}
	mean := total / time.Duration(b.N)
	b.ReportMetric(float64(mean)/float64(watchPeriod), "latency/period")
	b.ReportMetric(float64(worst)/float64(watchPeriod), "worst/period")
	b.ReportMetric(float64(mean)/float64(time.Millisecond), "latency-ms")
}
