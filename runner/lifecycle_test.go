package runner_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
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
		t.Fatal("call did not return")
		return taskResult{}
	}
}

func notHeld(t *testing.T, f *logStore) {
	t.Helper()
	if h, err := f.Holder(context.Background(), lockName); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("lock still held (%+v, %v), want it released", h, err)
	}
}

// An abandoned task blocks campaigning until it returns: a new term would
// run a second copy of the task beside it. This holds however long it
// runs. Once it returned its lock is released, and the next call campaigns.
func TestAbandonedTaskBlocksRunTaskOnLeader(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		const grace = 5 * time.Second
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
		defer func() {
			select {
			case rn.stop <- nil:
			default:
			}
		}()
		cancel()
		h.advance(grace)
		if res := waitResult(t, results); !res.ran || !errors.Is(res.err, runner.ErrTaskDidNotStop) {
			t.Fatalf("ran=%v err=%v, want ran and ErrTaskDidNotStop", res.ran, res.err)
		}
		rec.wantCounts(t, 1, 1)
		rec.wantEnd(t, "task did not stop", runner.ErrTaskDidNotStop)

		second := func(context.Context) error {
			t.Error("task ran again while the abandoned one still runs")
			return nil
		}
		for _, at := range []time.Duration{grace, fTTL + time.Second} { // before and after the lease's TTL
			h.advanceTo(t0.Add(at))
			ran, err := r.RunTaskOnLeader(context.Background(), second)
			if ran || !errors.Is(err, runner.ErrTaskDidNotStop) {
				t.Fatalf("at t0+%v: ran=%v err=%v, want ErrTaskDidNotStop", at, ran, err)
			}
			if err := r.Resign(context.Background()); err != nil {
				t.Fatalf("Resign while the abandoned task runs: %v", err)
			}
		}
		if n := h.f.count(opAcquire, "A"); n != 1 {
			t.Fatalf("%d campaigns, want none while the abandoned task runs", n)
		}
		if n := h.f.count(opRelease, "A"); n != 0 {
			t.Fatalf("%d releases while the abandoned task runs", n)
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
		wantOrder(t, h.f.sequence(), "task-return:A1", "release:A", "acquire:A", "started:A")
		rec.wantCounts(t, 2, 1)
	})
}

// A Run started after an earlier Run abandoned its task waits for that task
// to return before campaigning, so the task never runs twice at once.
func TestRunWaitsForAbandonedTask(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		const grace = 5 * time.Second
		r, rec := h.newRunner("A", runner.WithGracePeriod(grace))
		p1, p2 := h.probe("A1"), h.probe("A2")
		p1.stubborn = true
		_, cancel, errc := goRun(t, r, p1.task)
		rn1 := p1.next(t)
		defer func() {
			select {
			case rn1.stop <- nil:
			default:
			}
		}()
		cancel()
		h.advance(grace)
		if err := waitErr(t, errc); !errors.Is(err, runner.ErrTaskDidNotStop) {
			t.Fatalf("Run returned %v, want ErrTaskDidNotStop", err)
		}

		// A Run stopped while the abandoned task runs neither campaigns nor
		// releases the lock under it.
		_, cancel2, errc2 := goRun(t, r, p2.task)
		h.advance(fRP)
		cancel2()
		if err := waitErr(t, errc2); err != nil {
			t.Fatalf("Run returned %v, want nil (a normal stop)", err)
		}
		h.settle()
		if n, m := h.f.count(opAcquire, ""), h.f.count(opRelease, ""); n != 1 || m != 0 {
			t.Fatalf("%d campaigns and %d releases while the abandoned task runs, want 1 and 0", n, m)
		}

		stop, _, _ := goRun(t, r, p2.task)
		h.advance(fTTL) // many retry periods pass
		if n := h.f.count(opAcquire, ""); n != 1 {
			t.Fatalf("%d campaigns, want none while the abandoned task runs", n)
		}
		rn1.stop <- nil
		rn1.wait(t)
		rn2 := p2.next(t)
		if rn2.fence <= rn1.fence {
			t.Fatalf("new term's fence %d not above %d", rn2.fence, rn1.fence)
		}
		wantOrder(t, h.f.sequence(), "task-start:A1", "task-return:A1", "release:A", "acquire:A", "task-start:A2")
		if err := stop(); err != nil {
			t.Fatalf("Run returned %v", err)
		}
		rec.wantCounts(t, 2, 2)
	})
}

// A term begun by RunTaskOnLeader, still trusted or lost without being
// reported, ends (OnStoppedLeading) before Run begins its own: callbacks pair
// up per term.
func TestRunEndsTermLeftByRunTaskOnLeader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		lapsed bool
	}{{"trusted", false}, {"lapsed", true}} {
		t.Run(tc.name, func(t *testing.T) {
			fast(t, func(t *testing.T, h *harness) {
				r, rec := h.newRunner("A")
				t0 := h.clk.Now()
				if ran, err := r.RunTaskOnLeader(context.Background(), func(context.Context) error { return nil }); !ran || err != nil {
					t.Fatalf("ran=%v err=%v", ran, err)
				}
				rec.wantCounts(t, 1, 0)
				if tc.lapsed {
					h.f.Fail(opRenew, locktest.Always, errDown)
					h.advanceTo(t0.Add(fRD))
					if r.IsLeader() {
						t.Fatal("leader past the renew deadline")
					}
					h.f.Restore()
				}
				p := h.probe("A")
				stop, _, _ := goRun(t, r, p.task)
				rn := p.next(t)
				rec.wantCounts(t, 2, 1)
				if tc.lapsed {
					rec.wantEnd(t, "lease lost", lock.ErrLeaseLost)
				} else {
					rec.wantEnd(t, "superseded by a new campaign", nil)
				}
				wantOrder(t, h.f.sequence(), "started:A", "stopped:A", "acquire:A", "started:A", "task-start:A")
				if err := stop(); err != nil {
					t.Fatalf("Run returned %v", err)
				}
				rn.wait(t)
				rec.wantCounts(t, 2, 2)
			})
		})
	}
}

// A failed release is retried by the session after its first pause (the
// shared backoff: a sixteenth of the retry period, less up to a fifth) and
// not before, so the others need not wait for the lease to expire.
func TestFailedReleaseIsRetried(t *testing.T) {
	t.Parallel()
	wantRetry := func(t *testing.T, h *harness, c1 call) {
		t.Helper()
		h.advanceTo(c1.start.Add(fB1*4/5 - time.Nanosecond))
		h.f.none(t, opRelease)
		h.advanceTo(c1.start.Add(fB1))
		c2 := h.f.next(t, opRelease)
		if d := c2.start.Sub(c1.start); !c2.ok || d < fB1*4/5 || d > fB1 {
			t.Fatalf("retry %+v, %v after the first; want a release within [%v, %v]", c2, d, fB1*4/5, fB1)
		}
	}
	t.Run("Resign", func(t *testing.T) {
		fastOnBubbleClock(t, func(t *testing.T, h *harness) {
			r, rec := h.newRunner("A")
			if ran, err := r.RunTaskOnLeader(context.Background(), func(context.Context) error { return nil }); !ran || err != nil {
				t.Fatalf("ran=%v err=%v", ran, err)
			}
			h.f.Fail(opRelease, 1, errDown)
			done := make(chan error, 1)
			go func() { done <- r.Resign(context.Background()) }()
			c1 := h.f.next(t, opRelease)
			if c1.err == nil {
				t.Fatal("injected release error did not happen")
			}
			wantRetry(t, h, c1)
			if err := waitErr(t, done); err != nil {
				t.Fatalf("Resign: %v", err)
			}
			notHeld(t, h.f)
			rec.wantCounts(t, 1, 1)
			rec.wantEnd(t, "resigned", nil)
		})
	})
	t.Run("Run", func(t *testing.T) {
		fastOnBubbleClock(t, func(t *testing.T, h *harness) {
			r, rec := h.newRunner("A")
			p := h.probe("A")
			_, cancel, errc := goRun(t, r, p.task)
			p.next(t)
			h.f.Fail(opRelease, 1, errDown)
			cancel()
			c1 := h.f.next(t, opRelease)
			if c1.err == nil {
				t.Fatal("injected release error did not happen")
			}
			wantRetry(t, h, c1)
			if err := waitErr(t, errc); err != nil {
				t.Fatalf("Run returned %v", err)
			}
			notHeld(t, h.f)
			rec.wantCounts(t, 1, 1)
		})
	})
}

// Retries back off (the session's one policy) and stop at the session's
// release timeout. The lock may still be ours then, so the next Resign
// tries again even though no term is left.
func TestReleaseFailingPastTimeoutIsRetriedByResign(t *testing.T) {
	fastOnBubbleClock(t, func(t *testing.T, h *harness) {
		r, rec := h.newRunner("A")
		p := h.probe("A")
		_, cancel, errc := goRun(t, r, p.task)
		p.next(t)
		h.f.Fail(opRelease, locktest.Always, errDown)
		cancel()
		first := h.f.next(t, opRelease)
		h.advanceTo(first.start.Add(fRT + fRP))
		if err := waitErr(t, errc); err != nil {
			t.Fatalf("Run returned %v", err)
		}
		h.advance(time.Minute)
		n := h.f.count(opRelease, "A")
		if n < 3 {
			t.Fatalf("%d release attempts within the release timeout, want at least 3", n)
		}
		prev, pause := first, fB1
		for i := 2; i <= n; i++ {
			c := h.f.next(t, opRelease)
			if d := c.start.Sub(prev.start); c.err == nil || d < pause*4/5 || d > pause || c.start.Sub(first.start) > fRT {
				t.Fatalf("attempt %d %+v, %v after the last; want a failed one within [%v, %v], within %v of the first",
					i, c, d, pause*4/5, pause, fRT)
			}
			prev, pause = c, min(2*pause, fRP)
		}
		h.f.Restore()
		if err := r.Resign(context.Background()); err != nil {
			t.Fatalf("Resign: %v", err)
		}
		if c := h.f.next(t, opRelease); !c.ok {
			t.Fatalf("Resign's release %+v", c)
		}
		notHeld(t, h.f)
		rec.wantCounts(t, 1, 1)
	})
}

// A call that finds the runner free, just as Run takes it, gets ErrBusy
// instead of waiting for the whole of Run.
func TestCallRacingRunGetsErrBusy(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
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
					got <- errors.New("still waiting for the runner after 2s")
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
	})
}

// If ctx ends while the campaign is in flight, the task does not start, no
// callback fires, and the lock just taken is released.
func TestContextEndedDuringCampaign(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T, h *harness) (*runner.LeaderAwareRunner, *recorder, context.Context) {
		r, rec := h.newRunner("A")
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		h.f.BeforeCall(func(_ context.Context, c locktest.Call) error {
			if c.Op == opAcquire {
				cancel() // the acquisition itself succeeds
			}
			return nil
		})
		return r, rec, ctx
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
		fast(t, func(t *testing.T, h *harness) {
			r, rec, ctx := setup(t, h)
			ran, err := r.RunTaskOnLeader(ctx, func(context.Context) error {
				t.Error("task started after its context ended")
				return nil
			})
			if ran || !errors.Is(err, context.Canceled) {
				t.Fatalf("ran=%v err=%v, want context.Canceled", ran, err)
			}
			check(t, h, rec)
		})
	})
	t.Run("Run", func(t *testing.T) {
		fast(t, func(t *testing.T, h *harness) {
			r, rec, ctx := setup(t, h)
			errc := make(chan error, 1)
			go func() {
				errc <- r.Run(ctx, func(context.Context) error {
					t.Error("task started after its context ended")
					return nil
				})
			}()
			if err := waitErr(t, errc); err != nil {
				t.Fatalf("Run returned %v, want nil (a normal stop)", err)
			}
			check(t, h, rec)
		})
	})
}

// With a term held, a call whose ctx has ended runs nothing and makes no
// round trip, and the term goes on.
func TestContextEndedWhileLeading(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		r, rec := h.newRunner("A")
		if ran, err := r.RunTaskOnLeader(context.Background(), func(context.Context) error { return nil }); !ran || err != nil {
			t.Fatalf("ran=%v err=%v", ran, err)
		}
		h.settle()
		calls := len(h.f.sequence())
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		ran, err := r.RunTaskOnLeader(ctx, func(context.Context) error {
			t.Error("task started after its context ended")
			return nil
		})
		if ran || !errors.Is(err, context.Canceled) {
			t.Fatalf("ran=%v err=%v, want context.Canceled", ran, err)
		}
		h.settle()
		if seq := h.f.sequence(); len(seq) != calls {
			t.Fatalf("round trips %v after the call", seq[calls:])
		}
		if !r.IsLeader() {
			t.Fatal("term ended by a cancelled call")
		}
		rec.wantCounts(t, 1, 0)
	})
}

// Without WithGracePeriod the runner gives a task the session's grace
// period (lock.WithGracePeriod): one timing vocabulary, set once.
func TestGracePeriodFromSession(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		const grace = 3 * time.Second
		rec := &recorder{f: h.f, name: "A"}
		r, err := runner.New(h.newSession("A", rec, lock.WithGracePeriod(grace)), lockName, rec.options()...)
		if err != nil {
			t.Fatal(err)
		}
		p := h.probe("A1")
		p.stubborn = true
		ctx, cancel := context.WithCancel(context.Background())
		results := make(chan taskResult, 1)
		go func() {
			ran, err := r.RunTaskOnLeader(ctx, p.task)
			results <- taskResult{ran, err}
		}()
		rn := p.next(t)
		defer func() { rn.stop <- nil }()
		cancel()
		h.advance(grace - time.Millisecond)
		select {
		case res := <-results:
			t.Fatalf("returned %v before the session's grace period passed", res.err)
		default:
		}
		h.advance(time.Millisecond)
		if res := waitResult(t, results); !errors.Is(res.err, runner.ErrTaskDidNotStop) {
			t.Fatalf("err=%v, want ErrTaskDidNotStop after the session's grace period", res.err)
		}
	})
}

// A normal stop (Run's context ends) returns nil, even with the store
// down: the task returned and the release was tried. With the store down
// the stop takes the session's release timeout, which bounds it, and no
// more: the lock is left to expire.
func TestRunNormalStopReturnsNil(t *testing.T) {
	fastOnBubbleClock(t, func(t *testing.T, h *harness) {
		r, _ := h.newRunner("A")
		p := h.probe("A")
		_, cancel, errc := goRun(t, r, p.task)
		p.next(t)
		cancel()
		if err := waitErr(t, errc); err != nil {
			t.Fatalf("Run returned %v on a normal stop, want nil", err)
		}

		// The store goes down: campaigns fail, then the stop.
		for _, op := range []locktest.Op{opAcquire, opRenew, opRelease, opHolder} {
			h.f.Fail(op, locktest.Always, errDown)
		}
		_, cancel, errc = goRun(t, r, p.task)
		h.f.next(t, opAcquire)
		h.settle()
		stopped := h.clk.Now()
		cancel()
		if err := waitErr(t, errc); err != nil {
			t.Fatalf("Run returned %v on a normal stop with the store down, want nil", err)
		}
		if took := h.clk.Since(stopped); took > fRT {
			t.Errorf("the stop took %v, more than the release timeout %v", took, fRT)
		}
	})
}

// TestTaskPanic: a panic in a task ends its term (TermEnded, Reason
// "task panicked at:" and the stack, Err wrapping ErrTaskPanicked),
// releases the lock, and is raised again in the caller's goroutine, as
// lock.Session.Do does; the runner can lead again afterwards. Before, the
// panic killed the process from the task's goroutine.
func TestTaskPanic(t *testing.T) {
	for _, shape := range []string{"Run", "RunTaskOnLeader"} {
		t.Run(shape, func(t *testing.T) {
			fast(t, func(t *testing.T, h *harness) {
				ctx := context.Background()
				r, rec := h.newRunner("A")
				task := func(context.Context) error { panic("boom") }
				got := func() (p any) {
					defer func() { p = recover() }()
					if shape == "Run" {
						err := r.Run(ctx, task)
						t.Errorf("Run returned %v after its task panicked", err)
					} else {
						ran, err := r.RunTaskOnLeader(ctx, task)
						t.Errorf("RunTaskOnLeader returned %v, %v after its task panicked", ran, err)
					}
					return nil
				}()
				if got != "boom" {
					t.Fatalf("%s's caller recovered %v, want the task's panic", shape, got)
				}
				rec.wantCounts(t, 1, 1)
				e := rec.lastEnd(t)
				if !strings.HasPrefix(e.Reason, "task panicked at:\n") || !strings.Contains(e.Reason, "lifecycle_test.go") {
					t.Errorf("TermEnded reason %q, want the panic's stack", e.Reason)
				}
				if !errors.Is(e.Err, runner.ErrTaskPanicked) || !strings.Contains(e.Err.Error(), "boom") {
					t.Errorf("TermEnded err %v, want ErrTaskPanicked with the value", e.Err)
				}
				h.f.next(t, opAcquire)
				if c := h.f.next(t, opRelease); !c.ok || c.keeper != "A" {
					t.Fatalf("release after the panic: %+v", c)
				}
				if r.IsLeader() {
					t.Fatal("still leader after the panic")
				}
				if ran, err := r.RunTaskOnLeader(ctx, func(context.Context) error { return nil }); !ran || err != nil {
					t.Fatalf("after the panic: ran=%v err=%v, want to lead again", ran, err)
				}
			})
		})
	}
}
