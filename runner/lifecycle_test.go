package runner_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
)

// taskResult is what RunTaskOnLeader returned.
type taskResult struct {
	ran bool
	err error
}

func waitResult(t *testing.T, c chan taskResult) taskResult {
	t.Helper()
	select {
	case res := <-c:
		return res
	case <-time.After(5 * time.Second):
		t.Fatal("call did not return within 5s (real time)")
		return taskResult{}
	}
}

func notHeld(t *testing.T, f *fakeLocker) {
	t.Helper()
	if h, err := f.Holder(context.Background(), lockName); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("lock still held (%+v, %v), want it released", h, err)
	}
}

// An abandoned task blocks campaigning until it returns: AcquireLock gives a
// keeper its own lock back at once, so a campaign would run a second copy of
// the task beside it. This holds even after the abandoned task's lease
// expired.
func TestAbandonedTaskBlocksRunTaskOnLeader(t *testing.T) {
	t.Parallel()
	const grace = 5 * time.Second
	h := newHarness(t)
	r, rec := h.newRunner("A", runner.WithGracePeriod(grace))
	p := h.probe("A1")
	p.stubborn = true
	t0 := h.clk.Now()
	ctx, cancel := context.WithCancel(context.Background())
	results := make(chan taskResult, 1)
	go func() {
		ran, err := r.RunTaskOnLeader(ctx, p.task)
		results <- taskResult{ran, err}
	}()
	rn := p.next(t)
	cancel()
	rec.waitLog(t, "context ended; waiting for the task")
	h.clk.Advance(grace)
	if res := waitResult(t, results); !res.ran || !errors.Is(res.err, runner.ErrTaskDidNotStop) {
		t.Fatalf("ran=%v err=%v, want ran and ErrTaskDidNotStop", res.ran, res.err)
	}
	rec.wantCounts(t, 1, 1)

	second := func(context.Context) error {
		t.Error("task ran again while the abandoned one still runs")
		return nil
	}
	for _, at := range []time.Duration{grace, fTTL + time.Second} { // before and after the lease expired
		h.advanceTo(t0.Add(at))
		ran, err := r.RunTaskOnLeader(context.Background(), second)
		if ran || !errors.Is(err, runner.ErrTaskDidNotStop) {
			t.Fatalf("at t0+%v: ran=%v err=%v, want ErrTaskDidNotStop", at, ran, err)
		}
	}
	if n := h.f.count(opAcquire, "A"); n != 1 {
		t.Fatalf("%d campaigns, want none while the abandoned task runs", n)
	}

	// Once it returned, the next call campaigns and runs the task.
	rn.stop <- nil
	rn.wait(t)
	var fence uint64
	ran, err := r.RunTaskOnLeader(context.Background(), func(ctx context.Context) error {
		fence, _ = runner.FenceFrom(ctx)
		return nil
	})
	if !ran || err != nil || fence <= rn.fence {
		t.Fatalf("after the abandoned task returned: ran=%v err=%v fence %d (abandoned %d)", ran, err, fence, rn.fence)
	}
	rec.wantCounts(t, 2, 1)
}

// A Run started after an earlier Run abandoned its task waits for that task
// to return before campaigning, so the task never runs twice at once.
func TestRunWaitsForAbandonedTask(t *testing.T) {
	t.Parallel()
	const grace = 5 * time.Second
	h := newHarness(t)
	r, rec := h.newRunner("A", runner.WithGracePeriod(grace))
	p1, p2 := h.probe("A1"), h.probe("A2")
	p1.stubborn = true
	_, cancel, errc := goRun(t, r, p1.task)
	rn1 := p1.next(t)
	cancel()
	rec.waitLog(t, "context ended; waiting for the task")
	h.clk.Advance(grace)
	if err := waitErr(t, errc); !errors.Is(err, runner.ErrTaskDidNotStop) {
		t.Fatalf("Run returned %v, want ErrTaskDidNotStop", err)
	}

	stop, _, _ := goRun(t, r, p2.task)
	rec.waitLog(t, "waiting for the abandoned task to return before campaigning")
	h.clk.Advance(fTTL) // the lease expired long ago; many retry periods pass
	if n := h.f.count(opAcquire, ""); n != 1 {
		t.Fatalf("%d campaigns, want none while the abandoned task runs", n)
	}
	rn1.stop <- nil
	rn1.wait(t)
	rn2 := p2.next(t)
	if rn2.fence <= rn1.fence {
		t.Fatalf("new term's fence %d not above %d", rn2.fence, rn1.fence)
	}
	wantOrder(t, h.f.sequence(), "task-start:A1", "task-return:A1", "acquire:A", "task-start:A2")
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v", err)
	}
	rec.wantCounts(t, 2, 2)
}

// A term begun by RunTaskOnLeader, still trusted or lapsed without being
// reported, ends (OnStoppedLeading) before Run begins its own: callbacks pair
// up per term.
func TestRunEndsTermLeftByRunTaskOnLeader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		lapsed bool
	}{{"trusted", false}, {"lapsed", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			r, rec := h.newRunner("A")
			t0 := h.clk.Now()
			if ran, err := r.RunTaskOnLeader(context.Background(), func(context.Context) error { return nil }); !ran || err != nil {
				t.Fatalf("ran=%v err=%v", ran, err)
			}
			rec.wantCounts(t, 1, 0)
			if tc.lapsed {
				h.advanceTo(t0.Add(fRD))
				if r.IsLeader() {
					t.Fatal("leader past the renew deadline")
				}
			}
			p := h.probe("A")
			stop, _, _ := goRun(t, r, p.task)
			rn := p.next(t)
			rec.wantCounts(t, 2, 1)
			wantOrder(t, h.f.sequence(), "started:A", "stopped:A", "acquire:A", "started:A", "task-start:A")
			if err := stop(); !errors.Is(err, context.Canceled) {
				t.Fatalf("Run returned %v", err)
			}
			rn.wait(t)
			rec.wantCounts(t, 2, 2)
		})
	}
}

// A failed release is retried every retry period within the release timeout,
// so the others need not wait for the lease to expire.
func TestFailedReleaseIsRetried(t *testing.T) {
	t.Parallel()
	t.Run("Resign", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		r, rec := h.newRunner("A")
		if ran, err := r.RunTaskOnLeader(context.Background(), func(context.Context) error { return nil }); !ran || err != nil {
			t.Fatalf("ran=%v err=%v", ran, err)
		}
		var failed atomic.Bool
		h.f.setHook(func(_ context.Context, op, _ string) error {
			if op == opRelease && !failed.Swap(true) {
				return errDown
			}
			return nil
		})
		done := make(chan error, 1)
		go func() { done <- r.Resign(context.Background()) }()
		c1 := h.f.next(t, opRelease)
		if c1.err == nil {
			t.Fatal("injected release error did not happen")
		}
		h.advanceTo(c1.start.Add(fRP))
		if c2 := h.f.next(t, opRelease); !c2.ok || !c2.start.Equal(c1.start.Add(fRP)) {
			t.Fatalf("retry %+v, want a release a retry period after the first", c2)
		}
		if err := waitErr(t, done); err != nil {
			t.Fatalf("Resign: %v", err)
		}
		notHeld(t, h.f)
		rec.wantCounts(t, 1, 1)
	})
	t.Run("Run", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		r, rec := h.newRunner("A")
		p := h.probe("A")
		_, cancel, errc := goRun(t, r, p.task)
		p.next(t)
		h.f.failOps(errDown, opRelease)
		cancel()
		c1 := h.f.next(t, opRelease)
		h.f.setHook(nil)
		h.advanceTo(c1.start.Add(fRP))
		if c2 := h.f.next(t, opRelease); !c2.ok {
			t.Fatalf("retry %+v", c2)
		}
		if err := waitErr(t, errc); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v", err)
		}
		notHeld(t, h.f)
		rec.wantCounts(t, 1, 1)
	})
}

// Retries stop at the release timeout. The lock may still be ours then, so
// the next Resign tries again even though no term is left.
func TestReleaseFailingPastTimeoutIsRetriedByResign(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, rec := h.newRunner("A") // release timeout 5s, retry period 2s
	p := h.probe("A")
	_, cancel, errc := goRun(t, r, p.task)
	p.next(t)
	h.f.failOps(errDown, opRelease)
	cancel()
	first := h.f.next(t, opRelease).start
	for _, at := range []time.Duration{fRP, 2 * fRP} {
		h.advanceTo(first.Add(at))
		if c := h.f.next(t, opRelease); c.err == nil || !c.start.Equal(first.Add(at)) {
			t.Fatalf("attempt %+v, want a failed one at +%v", c, at)
		}
	}
	if err := waitErr(t, errc); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v", err)
	}
	if n := h.f.count(opRelease, "A"); n != 3 {
		t.Fatalf("%d release attempts, want 3 (at 0, 2s and 4s of a 5s timeout)", n)
	}
	h.f.setHook(nil)
	if err := r.Resign(context.Background()); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	if c := h.f.next(t, opRelease); !c.ok {
		t.Fatalf("Resign's release %+v", c)
	}
	notHeld(t, h.f)
	rec.wantCounts(t, 1, 1)
}

// A call that finds the runner free, just as Run takes it, gets ErrBusy
// instead of waiting for the whole of Run.
func TestCallRacingRunGetsErrBusy(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, _ := h.newRunner("A")
	got := make(chan error, 2)
	runner.SetRunEnteredHook(r, func() {
		for _, call := range []func() error{
			func() error {
				_, err := r.RunTaskOnLeader(context.Background(), func(context.Context) error { return nil })
				return err
			},
			func() error { return r.Resign(context.Background()) },
		} {
			done := make(chan error, 1)
			go func() { done <- call() }()
			select {
			case err := <-done:
				got <- err
			case <-time.After(2 * time.Second):
				got <- errors.New("still waiting for the runner after 2s (real time)")
			}
		}
	})
	p := h.probe("A")
	stop, _, _ := goRun(t, r, p.task)
	for range 2 {
		if err := <-got; !errors.Is(err, runner.ErrBusy) {
			t.Fatalf("call as Run started: %v, want ErrBusy", err)
		}
	}
	p.next(t)
	_ = stop()
}

// If ctx ends while the campaign is in flight, the task does not start, no
// callback fires, and the lock just taken is released.
func TestContextEndedDuringCampaign(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) (*harness, *runner.LeaderAwareRunner, *recorder, context.Context) {
		h := newHarness(t)
		r, rec := h.newRunner("A")
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		h.f.setHook(func(_ context.Context, op, _ string) error {
			if op == opAcquire {
				cancel() // the acquisition itself succeeds
			}
			return nil
		})
		return h, r, rec, ctx
	}
	check := func(t *testing.T, h *harness, rec *recorder) {
		t.Helper()
		if c := h.f.next(t, opAcquire); !c.ok {
			t.Fatalf("acquisition %+v", c)
		}
		if c := h.f.next(t, opRelease); !c.ok {
			t.Fatalf("release %+v, want the lock just taken released", c)
		}
		notHeld(t, h.f)
		rec.wantCounts(t, 0, 0)
	}
	t.Run("RunTaskOnLeader", func(t *testing.T) {
		t.Parallel()
		h, r, rec, ctx := setup(t)
		ran, err := r.RunTaskOnLeader(ctx, func(context.Context) error {
			t.Error("task started after its context ended")
			return nil
		})
		if ran || !errors.Is(err, context.Canceled) {
			t.Fatalf("ran=%v err=%v, want context.Canceled", ran, err)
		}
		check(t, h, rec)
	})
	t.Run("Run", func(t *testing.T) {
		t.Parallel()
		h, r, rec, ctx := setup(t)
		errc := make(chan error, 1)
		go func() {
			errc <- r.Run(ctx, func(context.Context) error {
				t.Error("task started after its context ended")
				return nil
			})
		}()
		if err := waitErr(t, errc); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v, want context.Canceled", err)
		}
		check(t, h, rec)
	})
	// With a term already held, a ctx that ends during the renewal keeps the
	// task from starting; the term goes on.
	t.Run("renewal", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		r, rec := h.newRunner("A")
		t0 := h.clk.Now()
		if ran, err := r.RunTaskOnLeader(context.Background(), func(context.Context) error { return nil }); !ran || err != nil {
			t.Fatalf("ran=%v err=%v", ran, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		h.f.setHook(func(_ context.Context, op, _ string) error {
			if op == opRenew {
				cancel()
			}
			return nil
		})
		h.advanceTo(t0.Add(fRI))
		ran, err := r.RunTaskOnLeader(ctx, func(context.Context) error {
			t.Error("task started after its context ended")
			return nil
		})
		if ran || !errors.Is(err, context.Canceled) {
			t.Fatalf("ran=%v err=%v, want context.Canceled", ran, err)
		}
		if c := h.f.next(t, opRenew); !c.ok {
			t.Fatalf("renewal %+v", c)
		}
		if !r.IsLeader() {
			t.Fatal("term ended by a cancelled call")
		}
		rec.wantCounts(t, 1, 0)
	})
}
