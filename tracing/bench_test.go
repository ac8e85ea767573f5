package tracing_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/tracing"
)

// BenchmarkTracingOverhead interleaves Mutex.Lock+ReleaseLock pairs on the
// test database of a Session without a tracer and of one traced with the
// SDK (every span sampled, and exported to an exporter that drops it), and
// reports the cost of each and their ratio.
func BenchmarkTracingOverhead(b *testing.B) {
	db := mongotest.NewDatabase(b)
	l, err := lock.New(db)
	if err != nil {
		b.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr, err := tracing.New(tp)
	if err != nil {
		b.Fatal(err)
	}
	sessions := make([]*lock.Session, 2)
	for i, opts := range [][]lock.SessionOption{nil, {lock.WithTracer(tr)}} {
		s, err := lock.NewSession(l, opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		sessions[i] = s
	}
	ctx := context.Background()
	pair := func(s *lock.Session) time.Duration {
		m, _ := s.Mutex("b-" + s.KeeperID())
		start := time.Now()
		if _, err := m.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := m.ReleaseLock(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	pair(sessions[0]) // the clock estimate
	pair(sessions[1])
	var took [2]time.Duration
	for i := 0; b.Loop(); i++ {
		for j := range sessions {
			k := (i + j) % 2
			took[k] += pair(sessions[k])
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(took[0].Microseconds())/n, "none-µs/pair")
	b.ReportMetric(float64(took[1].Microseconds())/n, "traced-µs/pair")
	b.ReportMetric(float64(took[1])/float64(took[0]), "traced/none")
}
