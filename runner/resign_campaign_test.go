package runner_test

import (
	"context"
	"sync/atomic"
	"testing"
)

// Resign called while RunTaskOnLeader is still campaigning stops it: the
// task does not start once the campaign wins, and Resign releases the
// lock, rather than waiting for a task that nobody told to stop.
func TestResignWhileCampaigning(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		r, _ := h.newRunner("A")
		h.f.Pause(opAcquire)
		var started atomic.Bool
		ran := make(chan error, 1)
		go func() {
			_, err := r.RunTaskOnLeader(context.Background(), func(ctx context.Context) error {
				started.Store(true)
				<-ctx.Done() // a task that runs until told to stop
				return ctx.Err()
			})
			ran <- err
		}()
		h.settle() // the campaign waits for the server
		resigned := make(chan error, 1)
		go func() { resigned <- r.Resign(context.Background()) }()
		h.settle() // Resign waits for the call
		h.f.Resume()
		if err := waitErr(t, resigned); err != nil {
			t.Fatalf("Resign: %v", err)
		}
		if err := waitErr(t, ran); err != nil {
			t.Fatalf("RunTaskOnLeader: %v", err)
		}
		if started.Load() {
			t.Error("the task started after Resign was called")
		}
		notHeld(t, h.f)
	})
}
