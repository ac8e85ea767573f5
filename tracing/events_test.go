package tracing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/tracing"
)

// TestRunSpanEvents: the scheduler's events of retries, takeovers and
// control become events of a run's span; retries do not change the span's
// attempt (the tries taking the lock) but are counted.
func TestRunSpanEvents(t *testing.T) {
	t.Parallel()
	r := newRecorder(t)
	tr := r.tracer(t)
	at := time.Date(2030, 1, 1, 3, 0, 0, 0, time.UTC)
	_, sp := tr.Start(context.Background(), lock.Op{Kind: lock.OpRun, KeeperID: "k", LockIDs: []string{"scheduler/j"}, Job: "j", Scheduled: at})
	sp.Event(lock.Event{Kind: lock.FiringTakenOver, At: at, Job: "j", Leader: "dead-keeper"})
	sp.Event(lock.Event{Kind: lock.RunStarted, At: at, Job: "j", Fence: 7, Attempt: 2, Lateness: time.Second})
	boom := errors.New("boom")
	sp.Event(lock.Event{Kind: lock.RunRetrying, At: at.Add(time.Second), Job: "j", Fence: 7, Attempt: 1, Err: boom, Took: 1500 * time.Millisecond})
	sp.Event(lock.Event{Kind: lock.RunRetrying, At: at.Add(3 * time.Second), Job: "j", Fence: 7, Attempt: 2, Err: boom, Took: 3 * time.Second})
	sp.Event(lock.Event{Kind: lock.JobPaused, At: at.Add(4 * time.Second), Job: "j", Reason: "deploy freeze"})
	sp.Event(lock.Event{Kind: lock.RunEnded, At: at.Add(5 * time.Second), Job: "j", Fence: 7, Outcome: "succeeded"})
	sp.End(nil)

	s := r.await(t, time.Second, "run", named("mongolock.run"))
	wantAttrs(t, s, tracing.KeyOutcome.String("succeeded"), tracing.KeyAttempt.Int(2), tracing.KeyRetries.Int(2), fenceAttr(7))
	noAttr(t, s, tracing.KeyReason)
	events := map[string][]sdktrace.Event{}
	for _, e := range s.Events() {
		events[e.Name] = append(events[e.Name], e)
	}
	has := func(e sdktrace.Event, want ...attribute.KeyValue) {
		t.Helper()
		for _, w := range want {
			found := false
			for _, a := range e.Attributes {
				found = found || a == w
			}
			if !found {
				t.Errorf("event %q: no %v in %v", e.Name, w, e.Attributes)
			}
		}
	}
	if got := events["firing taken over"]; len(got) != 1 {
		t.Errorf("takeover events %v", got)
	} else {
		has(got[0], tracing.KeyClaimant.String("dead-keeper"))
	}
	if got := events["run retrying"]; len(got) != 2 {
		t.Errorf("retry events %v", got)
	} else {
		has(got[0], tracing.KeyAttempt.Int(1), tracing.KeyError.String("boom"), tracing.KeyDelay.Float64(1.5))
		has(got[1], tracing.KeyAttempt.Int(2), tracing.KeyDelay.Float64(3))
		if !got[1].Time.Equal(at.Add(3 * time.Second)) {
			t.Errorf("retry event at %v", got[1].Time)
		}
	}
	if got := events["job paused"]; len(got) != 1 {
		t.Errorf("pause events %v", got)
	} else {
		has(got[0], tracing.KeyReason.String("deploy freeze"))
	}
	if len(events["run started"]) != 1 {
		t.Errorf("events %v", s.Events())
	}

	// A run with no retry has no retries attribute.
	_, sp = tr.Start(context.Background(), lock.Op{Kind: lock.OpRun, Job: "j", Scheduled: at.Add(time.Hour)})
	sp.Event(lock.Event{Kind: lock.RunEnded, Job: "j", Outcome: "succeeded"})
	sp.End(nil)
	s = r.await(t, time.Second, "second run", named("mongolock.run", tracing.KeyScheduled.String(at.Add(time.Hour).Format(time.RFC3339Nano))))
	noAttr(t, s, tracing.KeyRetries)
}
