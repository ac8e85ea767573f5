package tracing_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/mongolock/mongolock/scheduler"
	"github.com/mongolock/mongolock/tracing"
)

// A firing run is one span, a trace of its own, with the documented
// attributes; the job's own spans are its children, and so are the
// acquisition and release of the job's lock and the driver's commands
// recording the run.
func TestRunSpans(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder(t)
		var cmds commandLog
		db := monitoredDB(t, &cmds)
		s := newSession(t, newLocker(t, db), r.tracer(t), "k1")
		sch, err := scheduler.New(db, s, scheduler.WithOpTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}

		type seen struct {
			run  scheduler.Run
			span trace.SpanContext // the job's own
		}
		var mu sync.Mutex
		var runs []seen
		errBoom := errors.New("boom")
		err = sch.AddJob("report", "@every 1s", func(ctx context.Context) error {
			_, sp := r.start(ctx, "report work")
			defer sp.End()
			run, _ := scheduler.RunFromContext(ctx)
			mu.Lock()
			defer mu.Unlock()
			runs = append(runs, seen{run: run, span: sp.SpanContext()})
			if len(runs) == 2 {
				return errBoom // the second run fails
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sch.Stop(context.Background()) }()
		spans := func() []sdktrace.ReadOnlySpan { return r.spans(named("mongolock.run")) }
		deadline := time.Now().Add(10 * time.Second)
		for len(spans()) < 2 {
			if time.Now().After(deadline) {
				t.Fatalf("%d run spans after 10s", len(spans()))
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := sch.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}

		mu.Lock()
		defer mu.Unlock()
		for i, want := range []struct {
			outcome string
			status  codes.Code
		}{{"succeeded", codes.Unset}, {"failed", codes.Error}} {
			job := runs[i]
			sp := r.await(t, time.Second, "run", named("mongolock.run", tracing.KeyScheduled.String(job.run.Scheduled.UTC().Format(time.RFC3339Nano))))
			if sp.Parent().IsValid() {
				t.Errorf("run %d: parent %v, want none (a trace of its own)", i, sp.Parent())
			}
			wantAttrs(t, sp, tracing.KeyJob.String("report"), tracing.KeyKeeperID.String("k1"),
				tracing.KeyLockID.String(sch.LockID("report")), fenceAttr(job.run.Fence),
				tracing.KeyOutcome.String(want.outcome), tracing.KeyAttempt.Int(1))
			if sp.Status().Code != want.status {
				t.Errorf("run %d: status %+v, want %v", i, sp.Status(), want.status)
			}
			if want.status == codes.Error && sp.Status().Description != errBoom.Error() {
				t.Errorf("run %d: status description %q, want %q", i, sp.Status().Description, errBoom)
			}
			if !slices.ContainsFunc(sp.Events(), func(e sdktrace.Event) bool { return e.Name == "run started" }) {
				t.Errorf("run %d: no run started event: %+v", i, sp.Events())
			}
			// The job's own span, the lock's acquisition and release, and the
			// commands that record the run are its children.
			own := r.await(t, time.Second, "job's own", func(s sdktrace.ReadOnlySpan) bool {
				return s.SpanContext().SpanID() == job.span.SpanID()
			})
			childOf(t, own, sp.SpanContext())
			acq := r.await(t, time.Second, "acquire", func(s sdktrace.ReadOnlySpan) bool {
				return s.Name() == "mongolock.acquire" && s.Parent().SpanID() == sp.SpanContext().SpanID()
			})
			wantAttrs(t, acq, tracing.KeyOutcome.String("acquired"), fenceAttr(job.run.Fence))
			rel := r.await(t, time.Second, "release", func(s sdktrace.ReadOnlySpan) bool {
				return s.Name() == "mongolock.release" && s.Parent().SpanID() == sp.SpanContext().SpanID()
			})
			wantAttrs(t, rel, tracing.KeyOutcome.String("released"), fenceAttr(job.run.Fence))
			if got := cmds.of(sp.SpanContext()); len(got) < 2 {
				t.Errorf("run %d: commands in the run span %v, want the start and end records", i, got)
			}
		}
	})
}
