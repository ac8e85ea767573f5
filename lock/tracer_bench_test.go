package lock_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
)

// nopTracer is the cheapest Tracer: it passes the context on and ends
// nothing. It measures the hook itself.
type nopTracer struct{}

func (nopTracer) Start(ctx context.Context, _ lock.Op) (context.Context, lock.Span) {
	return ctx, nopSpan{}
}

type nopSpan struct{}

func (nopSpan) Event(lock.Event) {}
func (nopSpan) End(error)        {}

// BenchmarkTracerOverhead interleaves Mutex.Lock+ReleaseLock pairs of a
// Session without a tracer and of one with a tracer that does nothing, on
// an in-memory store (where nothing hides the cost), and reports the time
// and the allocations of a pair of each, and their ratio. Without a tracer
// the hook must cost nothing: compare none-allocs/pair with
// BenchmarkObserverOverhead's sessions, which never had one.
func BenchmarkTracerOverhead(b *testing.B) {
	const pairs = 1000
	f := newMemStore(lock.DefaultTTL, locktest.WithoutCallLog())
	none := newSession(b, f)
	nop := newSession(b, f, lock.WithTracer(nopTracer{}))
	ctx := context.Background()
	loop := func(s *lock.Session) (time.Duration, uint64) {
		m := newMutex(b, s, "t-"+s.KeeperID())
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		for range pairs {
			if _, err := m.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := m.ReleaseLock(ctx); err != nil {
				b.Fatal(err)
			}
		}
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		return took, after.Mallocs - before.Mallocs
	}
	loop(none)
	loop(nop)
	var noneTime, nopTime time.Duration
	var noneAllocs, nopAllocs uint64
	for i := 0; b.Loop(); i++ {
		first, second := none, nop
		if i%2 == 1 {
			first, second = nop, none
		}
		for _, s := range []*lock.Session{first, second} {
			d, a := loop(s)
			if s == none {
				noneTime, noneAllocs = noneTime+d, noneAllocs+a
			} else {
				nopTime, nopAllocs = nopTime+d, nopAllocs+a
			}
		}
	}
	n := float64(b.N * pairs)
	b.ReportMetric(float64(noneTime.Nanoseconds())/n, "none-ns/pair")
	b.ReportMetric(float64(nopTime.Nanoseconds())/n, "nop-ns/pair")
	b.ReportMetric(float64(noneAllocs)/n, "none-allocs/pair")
	b.ReportMetric(float64(nopAllocs)/n, "nop-allocs/pair")
	b.ReportMetric(float64(nopTime)/float64(noneTime), "nop/none")
}
