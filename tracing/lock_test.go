package tracing_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/tracing"
)

// The Session's acquisitions, renewals and releases are spans with the
// documented attributes, children of the caller's span, and the driver's
// commands of each carry its span in their context.
func TestLockSpans(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder(t)
		var cmds commandLog
		db := monitoredDB(t, &cmds)
		locker := newLocker(t, db)
		s := newSession(t, locker, r.tracer(t), "k1")
		other := newSession(t, newLocker(t, db), r.tracer(t), "k2")

		ctx, caller := r.start(context.Background(), "caller")
		m, err := s.Mutex("a")
		if err != nil {
			t.Fatal(err)
		}
		lease, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		acq := r.await(t, time.Second, "acquire", named("mongolock.acquire", tracing.KeyKeeperID.String("k1")))
		childOf(t, acq, caller.SpanContext())
		wantAttrs(t, acq, tracing.KeyLockID.String("a"), tracing.KeyAttempt.Int(1),
			tracing.KeyOutcome.String("acquired"), fenceAttr(lease.Fence()))
		if acq.Status().Code != codes.Unset {
			t.Errorf("acquire status %v, want unset", acq.Status())
		}
		if got := cmds.of(acq.SpanContext()); !slices.Contains(got, "findAndModify") {
			t.Errorf("commands in the acquire span: %v, want a findAndModify", got)
		}

		// The keep-alive's renewals begin traces of their own.
		ka := r.await(t, 5*time.Second, "keep-alive renew", func(s sdktrace.ReadOnlySpan) bool {
			return named("mongolock.renew", tracing.KeyKeeperID.String("k1"))(s) && !s.Parent().IsValid()
		})
		wantAttrs(t, ka, tracing.KeyLockID.String("a"), tracing.KeyAttempt.Int(1),
			tracing.KeyOutcome.String("renewed"), fenceAttr(lease.Fence()))
		if got := cmds.of(ka.SpanContext()); len(got) == 0 {
			t.Error("no command in the keep-alive's renew span")
		}

		if err := lease.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		ren := r.await(t, time.Second, "renew", func(s sdktrace.ReadOnlySpan) bool {
			return s.Name() == "mongolock.renew" && s.Parent().IsValid()
		})
		childOf(t, ren, caller.SpanContext())
		wantAttrs(t, ren, tracing.KeyLockID.String("a"), tracing.KeyOutcome.String("renewed"), fenceAttr(lease.Fence()))

		// Refused elsewhere: not a failure.
		m2, _ := other.Mutex("a")
		if _, ok, err := m2.AcquireLock(ctx); ok || err != nil {
			t.Fatalf("AcquireLock in another session: %v, %v", ok, err)
		}
		ref := r.await(t, time.Second, "refused acquire", named("mongolock.acquire", tracing.KeyKeeperID.String("k2")))
		childOf(t, ref, caller.SpanContext())
		wantAttrs(t, ref, tracing.KeyLockID.String("a"), tracing.KeyOutcome.String("refused"),
			tracing.KeyReason.String("held elsewhere"))
		noAttr(t, ref, tracing.KeyAttempt) // one attempt, not counted
		if ref.Status().Code != codes.Unset {
			t.Errorf("refused acquire status %v, want unset", ref.Status())
		}

		// Several locks: one span, the refused lock as an event.
		taken, err := other.AcquireLocks(ctx, "b", "a")
		if err != nil || len(taken.Leases) != 1 {
			t.Fatalf("AcquireLocks: %+v, %v", taken, err)
		}
		many := r.await(t, time.Second, "acquire of several", named("mongolock.acquire", tracing.KeyLockCount.Int(2)))
		wantAttrs(t, many, tracing.KeyLockIDs.StringSlice([]string{"b", "a"}), tracing.KeyOutcome.String(tracing.OutcomeMixed))
		if evs := many.Events(); len(evs) != 1 || evs[0].Name != "refused" ||
			!slices.Contains(evs[0].Attributes, tracing.KeyLockID.String("a")) {
			t.Errorf("events of the acquire of several: %+v, want one refused of a", evs)
		}
		if err := other.ReleaseLocks(ctx, taken.Leases...); err != nil {
			t.Fatal(err)
		}

		if err := m.ReleaseLock(ctx); err != nil {
			t.Fatal(err)
		}
		rel := r.await(t, time.Second, "release", named("mongolock.release", tracing.KeyKeeperID.String("k1")))
		childOf(t, rel, caller.SpanContext())
		wantAttrs(t, rel, tracing.KeyLockID.String("a"), tracing.KeyOutcome.String("released"), fenceAttr(lease.Fence()))
		if got := cmds.of(rel.SpanContext()); len(got) == 0 {
			t.Error("no command in the release span")
		}
		caller.End()
	})
}

// A failed acquisition ends its span with status Error and the error.
func TestAcquireFailedSpan(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder(t)
		db, fault := simDB(t, nil)
		s := newSession(t, newLocker(t, db), r.tracer(t), "k1", lock.WithReleaseTimeout(200*time.Millisecond))
		m, _ := s.Mutex("a")
		fault.Cut()
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if _, _, err := m.AcquireLock(ctx); err == nil {
			t.Fatal("AcquireLock through a cut connection succeeded")
		}
		sp := r.await(t, time.Second, "failed acquire", named("mongolock.acquire"))
		wantAttrs(t, sp, tracing.KeyOutcome.String("failed"))
		if sp.Status().Code != codes.Error || sp.Status().Description == "" {
			t.Errorf("status %+v, want Error with a description", sp.Status())
		}
		if !slices.ContainsFunc(sp.Events(), func(e sdktrace.Event) bool { return e.Name == "exception" }) {
			t.Errorf("no exception event: %+v", sp.Events())
		}
		fault.Restore()
	})
}

// A filter leaves operations out: their round trips stay in the caller's
// span.
func TestFilter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder(t)
		var cmds commandLog
		db := monitoredDB(t, &cmds)
		tr := r.tracer(t, tracing.WithFilter(func(op lock.Op) bool { return op.Kind != lock.OpAcquire }))
		s := newSession(t, newLocker(t, db), tr, "k1")
		ctx, caller := r.start(context.Background(), "caller")
		m, _ := s.Mutex("a")
		if _, err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := m.ReleaseLock(ctx); err != nil {
			t.Fatal(err)
		}
		caller.End()
		r.await(t, time.Second, "release", named("mongolock.release"))
		if got := r.spans(named("mongolock.acquire")); len(got) != 0 {
			t.Errorf("%d acquire spans, want none", len(got))
		}
		if got := cmds.of(caller.SpanContext()); !slices.Contains(got, "findAndModify") {
			t.Errorf("commands in the caller's span: %v, want the acquisition's findAndModify", got)
		}
	})
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	r := newRecorder(t)
	for name, f := range map[string]func() (*tracing.Tracer, error){
		"nil provider": func() (*tracing.Tracer, error) { return tracing.New(nil) },
		"nil option":   func() (*tracing.Tracer, error) { return tracing.New(r.tp, nil) },
		"nil filter":   func() (*tracing.Tracer, error) { return tracing.New(r.tp, tracing.WithFilter(nil)) },
	} {
		if tr, err := f(); err == nil || tr != nil {
			t.Errorf("%s: %v, %v; want an error", name, tr, err)
		}
	}
	if _, err := lock.NewSession(nil, lock.WithTracer(nil)); err == nil {
		t.Error("WithTracer(nil) accepted")
	}
}

// Each attempt of a waiting Lock is an acquire span with its attempt.
func TestLockAttempts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder(t)
		db := monitoredDB(t, nil)
		holder := newSession(t, newLocker(t, db), r.tracer(t), "k1")
		waiter := newSession(t, newLocker(t, db), r.tracer(t), "k2")
		m1, _ := holder.Mutex("a")
		if _, err := m1.Lock(context.Background()); err != nil {
			t.Fatal(err)
		}
		m2, _ := waiter.Mutex("a")
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond) // a few retry periods (100ms)
		defer cancel()
		if _, err := m2.Lock(ctx); err == nil {
			t.Fatal("Lock of a held lock succeeded")
		}
		spans := r.spans(named("mongolock.acquire", tracing.KeyKeeperID.String("k2")))
		if len(spans) < 2 {
			t.Fatalf("%d acquire spans of the waiter, want several", len(spans))
		}
		for i, s := range spans {
			wantAttrs(t, s, tracing.KeyAttempt.Int(i+1))
			if i < len(spans)-1 { // the last may have been cut short by ctx: failed
				wantAttrs(t, s, tracing.KeyOutcome.String("refused"))
			}
		}
	})
}

// The keep-alive renews every lease in one round trip, and so in one span.
func TestKeepAliveSpanOfSeveral(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder(t)
		s := newSession(t, newLocker(t, monitoredDB(t, nil)), r.tracer(t), "k1")
		taken, err := s.AcquireLocks(context.Background(), "a", "b")
		if err != nil || len(taken.Leases) != 2 {
			t.Fatalf("AcquireLocks: %+v, %v", taken, err)
		}
		sp := r.await(t, 5*time.Second, "keep-alive renew", named("mongolock.renew", tracing.KeyLockCount.Int(2)))
		if sp.Parent().IsValid() {
			t.Errorf("parent %v, want none", sp.Parent())
		}
		wantAttrs(t, sp, tracing.KeyOutcome.String("renewed"), tracing.KeyAttempt.Int(1))
		noAttr(t, sp, tracing.KeyFence) // one per lock: in the events, were any to fail
		if ids, _ := attr(sp, tracing.KeyLockIDs); !slices.Equal(sorted(ids.AsStringSlice()), []string{"a", "b"}) {
			t.Errorf("lock ids %v, want a and b", ids.AsStringSlice())
		}
		if len(sp.Events()) != 0 {
			t.Errorf("events %+v, want none (every lease renewed)", sp.Events())
		}
	})
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
