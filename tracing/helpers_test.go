package tracing_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/simdb"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/tracing"
)

// testTTL is the lease of the tests: the keep-alive renews every 500ms.
const testTTL = 1500 * time.Millisecond

// recorder is a TracerProvider of the SDK that keeps every span ended.
type recorder struct {
	tp  *sdktrace.TracerProvider
	rec *tracetest.SpanRecorder
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &recorder{tp: tp, rec: rec}
}

// tracer is a tracing.Tracer on r's provider.
func (r *recorder) tracer(t *testing.T, opts ...tracing.Option) *tracing.Tracer {
	t.Helper()
	tr, err := tracing.New(r.tp, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// start begins a span of the test itself, as a user's code would.
func (r *recorder) start(ctx context.Context, name string) (context.Context, trace.Span) {
	return r.tp.Tracer("test").Start(ctx, name)
}

// spans returns the spans ended so far that match.
func (r *recorder) spans(match func(sdktrace.ReadOnlySpan) bool) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.rec.Ended() {
		if match(s) {
			out = append(out, s)
		}
	}
	return out
}

// await waits up to d for a span that matches to end, and returns the
// first.
func (r *recorder) await(t *testing.T, d time.Duration, what string, match func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if s := r.spans(match); len(s) > 0 {
			return s[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s span within %v; spans: %v", what, d, names(r.rec.Ended()))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name()
	}
	return out
}

// named matches spans called name whose attributes include want.
func named(name string, want ...attribute.KeyValue) func(sdktrace.ReadOnlySpan) bool {
	return func(s sdktrace.ReadOnlySpan) bool {
		if s.Name() != name {
			return false
		}
		for _, kv := range want {
			if v, ok := attr(s, kv.Key); !ok || v != kv.Value {
				return false
			}
		}
		return true
	}
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// wantAttrs checks that s has the attributes want.
func wantAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want ...attribute.KeyValue) {
	t.Helper()
	for _, kv := range want {
		v, ok := attr(s, kv.Key)
		switch {
		case !ok:
			t.Errorf("%s: no attribute %s (want %s)", s.Name(), kv.Key, kv.Value.Emit())
		case v != kv.Value && !(v.Type() == attribute.STRINGSLICE && slices.Equal(v.AsStringSlice(), kv.Value.AsStringSlice())):
			t.Errorf("%s: %s = %s, want %s", s.Name(), kv.Key, v.Emit(), kv.Value.Emit())
		}
	}
}

// noAttr checks that s lacks attribute k.
func noAttr(t *testing.T, s sdktrace.ReadOnlySpan, k attribute.Key) {
	t.Helper()
	if v, ok := attr(s, k); ok {
		t.Errorf("%s: attribute %s = %s, want none", s.Name(), k, v.Emit())
	}
}

// childOf checks that s is a child of parent.
func childOf(t *testing.T, s sdktrace.ReadOnlySpan, parent trace.SpanContext) {
	t.Helper()
	if s.Parent().SpanID() != parent.SpanID() || s.SpanContext().TraceID() != parent.TraceID() {
		t.Errorf("%s: parent %s/%s, want %s/%s", s.Name(), s.Parent().TraceID(), s.Parent().SpanID(), parent.TraceID(), parent.SpanID())
	}
}

// linkedTo checks that s links to to.
func linkedTo(t *testing.T, s sdktrace.ReadOnlySpan, to trace.SpanContext) {
	t.Helper()
	for _, l := range s.Links() {
		if l.SpanContext.SpanID() == to.SpanID() && l.SpanContext.TraceID() == to.TraceID() {
			return
		}
	}
	t.Errorf("%s: no link to %s/%s (links: %v)", s.Name(), to.TraceID(), to.SpanID(), s.Links())
}

// command is a command the driver started, with the span the context of
// its CommandStartedEvent carried.
type command struct {
	name string
	span trace.SpanContext
}

// commandLog records, with the driver's command monitor, the span the
// context of each command carries: the span an instrumented driver would
// make the command span a child of.
type commandLog struct {
	mu       sync.Mutex
	commands []command
}

func (l *commandLog) started(ctx context.Context, e *event.CommandStartedEvent) {
	l.mu.Lock()
	l.commands = append(l.commands, command{name: e.CommandName, span: trace.SpanContextFromContext(ctx)})
	l.mu.Unlock()
}

// of returns the names of the commands sent in span sc.
func (l *commandLog) of(sc trace.SpanContext) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, c := range l.commands {
		if c.span.SpanID() == sc.SpanID() && c.span.TraceID() == sc.TraceID() {
			out = append(out, c.name)
		}
	}
	return out
}

// monitoredDB returns a database on a simulated server (simdb), in the
// test's synctest bubble, on a client whose commands l records (none if l
// is nil). The tests run there: what they check is the spans, and a
// loaded machine could make a round trip to the test server outlast the
// short leases of the tests, or the waits for spans.
func monitoredDB(t *testing.T, l *commandLog) *mongo.Database {
	t.Helper()
	db, _ := simDB(t, l)
	return db
}

// simDB is monitoredDB, with the fault that breaks its client's link.
func simDB(t *testing.T, l *commandLog) (*mongo.Database, *mongotest.SimFault) {
	t.Helper()
	f := mongotest.NewSimFault(time.Millisecond)
	co := options.Client()
	if l != nil {
		co.SetMonitor(&event.CommandMonitor{Started: l.started})
	}
	client, err := simdb.NewServer(simdb.MongoDB, 0).NewLink("test", f.Plan).Connect(co)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return client.Database("app"), f
}

// newSession returns a Session on locker with tr, closed at cleanup.
func newSession(t *testing.T, locker lock.Store, tr lock.Tracer, keeper string, opts ...lock.SessionOption) *lock.Session {
	t.Helper()
	s, err := lock.NewSession(locker, append([]lock.SessionOption{lock.WithTracer(tr), lock.WithKeeperID(keeper)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func newLocker(t *testing.T, db *mongo.Database) *lock.Locker {
	t.Helper()
	l, err := lock.New(db, lock.WithTTL(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func fenceAttr(f uint64) attribute.KeyValue { return tracing.KeyFence.Int64(int64(f)) }
