package tracing_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/tracing"
)

// Under Run, a term is a span, a child of Run's context, and the task's
// context carries it: the task's own spans are its children.
func TestTermSpanUnderRun(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r, ld := newTracedRunner(t)
		ctx, app := r.start(context.Background(), "app")
		var own trace.SpanContext
		var fence uint64
		err := ld.Run(ctx, func(ctx context.Context) error {
			_, sp := r.start(ctx, "leader work")
			defer sp.End()
			own, fence = sp.SpanContext(), ld.Fence()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		app.End()
		term := r.await(t, time.Second, "term", named("mongolock.term"))
		childOf(t, term, app.SpanContext())
		wantAttrs(t, term, tracing.KeyLockID.String("leader"), tracing.KeyKeeperID.String("k1"), fenceAttr(fence),
			tracing.KeyOutcome.String("ended"), tracing.KeyReason.String("task returned"))
		work := r.await(t, time.Second, "leader work", func(s sdktrace.ReadOnlySpan) bool { return s.SpanContext().SpanID() == own.SpanID() })
		childOf(t, work, term.SpanContext())
		acq := r.await(t, time.Second, "acquire", named("mongolock.acquire"))
		childOf(t, acq, app.SpanContext())
	})
}

// A term whose lease is lost while the task runs ends with outcome "lost"
// and status Error.
func TestTermSpanLost(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder(t)
		db, fault := simDB(t, nil)
		s := newSession(t, newLocker(t, db), r.tracer(t), "k1", lock.WithReleaseTimeout(200*time.Millisecond))
		ld, err := runner.New(s, "leader", runner.WithCampaignAgain(false))
		if err != nil {
			t.Fatal(err)
		}
		err = ld.Run(context.Background(), func(ctx context.Context) error {
			fault.Cut() // renewals fail until the renew deadline passes
			<-ctx.Done()
			return context.Cause(ctx)
		})
		fault.Restore()
		if !errors.Is(err, lock.ErrLeaseLost) {
			t.Fatalf("Run: %v, want %v", err, lock.ErrLeaseLost)
		}
		term := r.await(t, time.Second, "term", named("mongolock.term"))
		wantAttrs(t, term, tracing.KeyOutcome.String("lost"), tracing.KeyReason.String("lease lost"))
		if term.Status().Code != codes.Error {
			t.Errorf("status %+v, want Error", term.Status())
		}
		// The keep-alive's failed renewals are spans with status Error too.
		ren := r.await(t, time.Second, "failed renew", named("mongolock.renew", tracing.KeyOutcome.String("failed")))
		if ren.Status().Code != codes.Error {
			t.Errorf("renew status %+v, want Error", ren.Status())
		}
	})
}

// A task failing under Run ends its term as failed, with status Error.
func TestTermSpanFailed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r, ld := newTracedRunner(t)
		errBoom := errors.New("boom")
		if err := ld.Run(context.Background(), func(context.Context) error { return errBoom }); !errors.Is(err, errBoom) {
			t.Fatalf("Run: %v, want %v", err, errBoom)
		}
		term := r.await(t, time.Second, "term", named("mongolock.term"))
		wantAttrs(t, term, tracing.KeyOutcome.String("failed"), tracing.KeyReason.String("task failed"))
		if term.Status().Code != codes.Error || term.Status().Description != errBoom.Error() {
			t.Errorf("status %+v, want Error %q", term.Status(), errBoom)
		}
	})
}

// A term begun by RunTaskOnLeader outlives the call: it begins a trace of
// its own, linked to the call, and each task is a span of the call's trace
// linked to the term.
func TestTermSpanRunTaskOnLeader(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder(t)
		s := newSession(t, newLocker(t, monitoredDB(t, nil)), r.tracer(t), "k1")
		ld, err := runner.New(s, "leader")
		if err != nil {
			t.Fatal(err)
		}
		var calls []trace.SpanContext
		var own []trace.SpanContext
		for range 2 {
			ctx, call := r.start(context.Background(), "request")
			ran, err := ld.RunTaskOnLeader(ctx, func(ctx context.Context) error {
				_, sp := r.start(ctx, "leader work")
				own = append(own, sp.SpanContext())
				sp.End()
				return nil
			})
			if !ran || err != nil {
				t.Fatalf("RunTaskOnLeader: %v, %v", ran, err)
			}
			call.End()
			calls = append(calls, call.SpanContext())
		}
		if err := ld.Resign(context.Background()); err != nil {
			t.Fatal(err)
		}
		terms := r.spans(named("mongolock.term"))
		if len(terms) != 1 {
			t.Fatalf("%d term spans, want 1 (both tasks ran in one term)", len(terms))
		}
		term := terms[0]
		if term.Parent().IsValid() {
			t.Errorf("term parent %v, want none", term.Parent())
		}
		linkedTo(t, term, calls[0])
		wantAttrs(t, term, tracing.KeyOutcome.String("ended"), tracing.KeyReason.String("resigned"))
		for i, call := range calls {
			task := r.await(t, time.Second, "task", func(s sdktrace.ReadOnlySpan) bool {
				return s.Name() == "mongolock.task" && s.Parent().SpanID() == call.SpanID()
			})
			childOf(t, task, call)
			linkedTo(t, task, term.SpanContext())
			wantAttrs(t, task, tracing.KeyLockID.String("leader"), tracing.KeyOutcome.String("succeeded"))
			work := r.await(t, time.Second, "leader work", func(s sdktrace.ReadOnlySpan) bool { return s.SpanContext().SpanID() == own[i].SpanID() })
			childOf(t, work, task.SpanContext())
		}
	})
}

// newTracedRunner returns a recorder of spans and a runner of "leader" that
// campaigns once, on a Session of keeper k1 traced to it.
func newTracedRunner(t *testing.T) (*recorder, *runner.LeaderAwareRunner) {
	t.Helper()
	r := newRecorder(t)
	s := newSession(t, newLocker(t, monitoredDB(t, nil)), r.tracer(t), "k1")
	ld, err := runner.New(s, "leader", runner.WithCampaignAgain(false))
	if err != nil {
		t.Fatal(err)
	}
	return r, ld
}
