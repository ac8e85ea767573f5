package runner_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
	"github.com/mongolock/mongolock/runner"
)

var errDown = errors.New("fake: database unreachable")

// While Run leads, the session renews every renew interval, counted from
// the sending of the last successful renewal, and nothing else happens.
func TestRenewSchedule(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		r, rec := h.newRunner("A")
		p := h.probe("A")
		stop, _, _ := goRun(t, r, p.task)

		acq := h.f.next(t, opAcquire)
		if !acq.ok {
			t.Fatalf("first campaign did not acquire: %+v", acq)
		}
		t0 := acq.start
		rn := p.next(t)
		if rn.fence != acq.fence || r.Fence() != acq.fence {
			t.Fatalf("task fence %d, runner fence %d; acquired %d", rn.fence, r.Fence(), acq.fence)
		}
		if l, ok := lock.LeaseFrom(rn.ctx); !ok || l.Fence() != acq.fence || l.LockID() != lockName {
			t.Fatalf("task context carries lease %v, %v", l, ok)
		}
		rec.wantCounts(t, 1, 0)
		rec.wantLeaders(t, "A")
		for i := 1; i <= 6; i++ {
			want := t0.Add(time.Duration(i) * fRI)
			h.advanceTo(want)
			c := h.f.next(t, opRenew)
			if !c.ok || !c.start.Equal(want) {
				t.Fatalf("renewal %d: ok=%v at %v, want ok at t0+%v", i, c.ok, c.start.Sub(t0), want.Sub(t0))
			}
			if !r.IsLeader() || r.Leader() != "A" {
				t.Fatalf("after renewal %d: IsLeader=%v Leader=%q", i, r.IsLeader(), r.Leader())
			}
			rn.running(t)
		}
		if err := stop(); err != nil {
			t.Fatalf("Run returned %v, want nil (a normal stop)", err)
		}
		if n := h.f.count(opRenew, ""); n != 6 {
			t.Fatalf("%d renewals, want 6", n)
		}
		if n := h.f.count(opAcquire, ""); n != 1 {
			t.Fatalf("%d acquisitions, want 1", n)
		}
		rec.wantCounts(t, 1, 1)
		if e := rec.wantEnd(t, "context ended", nil); e.Took != 6*fRI {
			t.Fatalf("TermEnded Took %v, want %v", e.Took, 6*fRI)
		}
	})
}

// A failed renewal is retried after a retry period; one that succeeds before
// the renew deadline costs nothing.
func TestTransientRenewalErrorKeepsLeadership(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		r, rec := h.newRunner("A")
		p := h.probe("A")
		stop, _, _ := goRun(t, r, p.task)
		t0 := h.f.next(t, opAcquire).start
		rn := p.next(t)

		h.f.Fail(opRenew, locktest.Always, errDown)
		h.advanceTo(t0.Add(fRI))
		if c := h.f.next(t, opRenew); c.err == nil {
			t.Fatal("injected renewal error did not happen")
		}
		h.f.Restore()
		h.advanceTo(t0.Add(fRI + fRP))
		c := h.f.next(t, opRenew)
		if !c.ok || !c.start.Equal(t0.Add(fRI+fRP)) {
			t.Fatalf("retry: ok=%v at t0+%v, want ok at t0+%v", c.ok, c.start.Sub(t0), fRI+fRP)
		}
		// Past the first term's original deadline: still leading on the retry.
		h.advanceTo(t0.Add(fRD + time.Second))
		if !r.IsLeader() {
			t.Fatal("not leader after a successful retry")
		}
		rn.running(t)
		// The next renewal is an interval after the retry's sending.
		h.advanceTo(t0.Add(2*fRI + fRP))
		if c := h.f.next(t, opRenew); !c.ok || !c.start.Equal(t0.Add(2*fRI+fRP)) {
			t.Fatalf("next renewal ok=%v at t0+%v, want t0+%v", c.ok, c.start.Sub(t0), 2*fRI+fRP)
		}
		rn.running(t)
		rec.wantCounts(t, 1, 0)
		_ = stop()
		if n := h.f.count(opAcquire, ""); n != 1 {
			t.Fatalf("%d acquisitions, want 1", n)
		}
		rec.wantCounts(t, 1, 1)
	})
}

// When renewals keep failing the task's context is cancelled with cause
// lock.ErrLeaseLost exactly at the renew deadline, measured from the sending
// of the acquisition; OnStoppedLeading and TermEnded fire once; the lock is
// released after the task returned; and Run campaigns again.
func TestRenewDeadlineCancelsTask(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		r, rec := h.newRunner("A")
		p := h.probe("A")
		stop, _, _ := goRun(t, r, p.task)
		acq := h.f.next(t, opAcquire)
		t0 := acq.start
		rn := p.next(t)

		h.f.Fail(opRenew, locktest.Always, errDown)
		for at := fRI; at < fRD; at += fRP {
			h.advanceTo(t0.Add(at))
			if c := h.f.next(t, opRenew); c.err == nil || !c.start.Equal(t0.Add(at)) {
				t.Fatalf("renewal at t0+%v: err=%v, want a failure at t0+%v", c.start.Sub(t0), c.err, at)
			}
		}
		h.advanceTo(t0.Add(fRD - time.Millisecond))
		if !r.IsLeader() {
			t.Fatal("not leader 1ms before the renew deadline")
		}
		rn.running(t)
		h.advanceTo(t0.Add(fRD))
		rn.wait(t)
		if !errors.Is(rn.cause, lock.ErrLeaseLost) || !rn.cancelledAt.Equal(t0.Add(fRD)) {
			t.Fatalf("task cancelled at t0+%v with cause %v; want t0+%v, lock.ErrLeaseLost",
				rn.cancelledAt.Sub(t0), rn.cause, fRD)
		}
		if r.IsLeader() || r.Fence() != 0 || r.Leader() != "" {
			t.Fatalf("after the deadline: IsLeader=%v Fence=%d Leader=%q", r.IsLeader(), r.Fence(), r.Leader())
		}
		rel := h.f.next(t, opRelease)
		if !rel.ok {
			t.Fatalf("release after loss: %+v", rel)
		}
		rec.wantCounts(t, 1, 1)
		if e := rec.wantEnd(t, "lease lost", lock.ErrLeaseLost); e.Took != fRD {
			t.Fatalf("TermEnded Took %v, want %v", e.Took, fRD)
		}
		seq := h.f.sequence()
		wantOrder(t, seq, "started:A", "task-start:A", "task-return:A", "release:A")
		wantOrder(t, seq, "started:A", "stopped:A", "release:A")

		// Campaigns again within a retry period, and leads a new term.
		h.advanceTo(rel.start.Add(fRP))
		acq2 := h.f.next(t, opAcquire)
		if !acq2.ok || acq2.fence <= acq.fence {
			t.Fatalf("second campaign: %+v, want a larger fence than %d", acq2, acq.fence)
		}
		rn2 := p.next(t)
		rec.wantCounts(t, 2, 1)
		_ = stop()
		rn2.wait(t)
		rec.wantCounts(t, 2, 2)
	})
}

// The renew deadline counts from the sending of the last successful
// renewal, not from its reply.
func TestRenewDeadlineCountsFromSending(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		r, rec := h.newRunner("A")
		p := h.probe("A")
		stop, _, _ := goRun(t, r, p.task)
		t0 := h.f.next(t, opAcquire).start
		rn := p.next(t)

		entered := make(chan struct{})
		unblock := make(chan struct{})
		h.f.BeforeCall(func(_ context.Context, c locktest.Call) error {
			if c.Op == opRenew {
				close(entered)
				<-unblock
			}
			return nil
		})
		h.advanceTo(t0.Add(fRI))
		<-entered
		h.advanceTo(t0.Add(fRI + 4*time.Second)) // a slow reply
		h.f.BeforeCall(nil)
		h.f.Fail(opRenew, locktest.Always, errDown) // from the next renewal on
		close(unblock)
		if c := h.f.next(t, opRenew); !c.ok || !c.start.Equal(t0.Add(fRI)) {
			t.Fatalf("slow renewal: %+v", c)
		}
		// Renewals are due an interval after the slow one was sent, then every
		// retry period; all fail.
		for at := 2 * fRI; at < fRI+fRD; at += fRP {
			h.advanceTo(t0.Add(at))
			if c := h.f.next(t, opRenew); c.err == nil || !c.start.Equal(t0.Add(at)) {
				t.Fatalf("renewal at t0+%v: %+v", at, c)
			}
		}
		h.advanceTo(t0.Add(fRI + fRD - time.Millisecond))
		rn.running(t)
		h.advanceTo(t0.Add(fRI + fRD))
		rn.wait(t)
		if !errors.Is(rn.cause, lock.ErrLeaseLost) || !rn.cancelledAt.Equal(t0.Add(fRI+fRD)) {
			t.Fatalf("cancelled at t0+%v cause %v; want t0+%v (sending + renew deadline)",
				rn.cancelledAt.Sub(t0), rn.cause, fRI+fRD)
		}
		rec.wantCounts(t, 1, 1)
		_ = stop()
	})
}

// The store's own deadline counts when it is earlier than the renew
// deadline.
func TestStoreDeadlineBoundsTrust(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		h.f = newLogStore(h.clk, locktest.WithSafety(fTTL-15*time.Second)) // leases trusted for 15s by the store
		r, rec := h.newRunner("A")
		p := h.probe("A")
		stop, _, _ := goRun(t, r, p.task)
		t0 := h.f.next(t, opAcquire).start
		rn := p.next(t)
		h.f.Fail(opRenew, locktest.Always, errDown)
		for _, at := range []time.Duration{10, 12, 14} {
			h.advanceTo(t0.Add(at * time.Second))
			h.f.next(t, opRenew)
		}
		h.advanceTo(t0.Add(15 * time.Second))
		rn.wait(t)
		if !errors.Is(rn.cause, lock.ErrLeaseLost) || !rn.cancelledAt.Equal(t0.Add(15*time.Second)) {
			t.Fatalf("cancelled at t0+%v cause %v; want t0+15s, lock.ErrLeaseLost", rn.cancelledAt.Sub(t0), rn.cause)
		}
		rec.wantCounts(t, 1, 1)
		_ = stop()
	})
}

// A renewal that hangs does not delay the loss: the task is cancelled at the
// deadline while the renewal is still outstanding.
func TestHungRenewalDoesNotDelayLoss(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		r, rec := h.newRunner("A")
		p := h.probe("A")
		goRun(t, r, p.task)
		t0 := h.f.next(t, opAcquire).start
		rn := p.next(t)

		sent := make(chan struct{}, 10)
		unblock := make(chan struct{})
		t.Cleanup(func() { close(unblock) }) // before Run's and the session's cleanup
		h.f.BeforeCall(func(_ context.Context, c locktest.Call) error {
			if c.Op != opRenew {
				return nil
			}
			sent <- struct{}{}
			<-unblock // ignores its context, like a driver stuck in a syscall
			return errDown
		})
		h.advanceTo(t0.Add(fRI))
		<-sent
		h.advanceTo(t0.Add(fRD))
		select {
		case <-rn.done:
		default:
			t.Fatal("task not cancelled at the deadline while a renewal hung")
		}
		if !errors.Is(rn.cause, lock.ErrLeaseLost) || !rn.cancelledAt.Equal(t0.Add(fRD)) {
			t.Fatalf("cancelled at t0+%v cause %v", rn.cancelledAt.Sub(t0), rn.cause)
		}
		rec.wantCounts(t, 1, 1)
	})
}

// A renewal that finds the lease taken ends the term at once, and the runner
// learns the new leader from its next campaign.
func TestRenewalFindsLeaseLost(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		r, rec := h.newRunner("A")
		p := h.probe("A")
		stop, _, _ := goRun(t, r, p.task)
		t0 := h.f.next(t, opAcquire).start
		rn := p.next(t)

		h.advanceTo(t0.Add(5 * time.Second))
		h.f.TakeOver(lockName, "B")
		h.advanceTo(t0.Add(fRI))
		if c := h.f.next(t, opRenew); c.ok {
			t.Fatal("renewal of a stolen lease succeeded")
		}
		rn.wait(t)
		if !errors.Is(rn.cause, lock.ErrLeaseLost) || !rn.cancelledAt.Equal(t0.Add(fRI)) {
			t.Fatalf("cancelled at t0+%v cause %v; want t0+%v, lock.ErrLeaseLost", rn.cancelledAt.Sub(t0), rn.cause, fRI)
		}
		rec.wantCounts(t, 1, 1)
		rec.wantEnd(t, "lease lost", lock.ErrLeaseLost)
		rel := h.f.next(t, opRelease)
		if rel.ok {
			t.Fatal("released a lease held by another keeper")
		}
		h.advanceTo(rel.start.Add(fRP))
		if c := h.f.next(t, opAcquire); c.ok {
			t.Fatal("acquired a lease held by another keeper")
		}
		h.f.next(t, opHolder)
		rec.wantLeaders(t, "A", "B")
		if r.Leader() != "B" {
			t.Fatalf("Leader()=%q, want B", r.Leader())
		}
		rec.wantCounts(t, 1, 1)
		_ = stop()
		rec.wantCounts(t, 1, 1)
		rec.wantLeaders(t, "A", "B")
	})
}

// An acquisition that returns after the renew deadline is never trusted: no
// callback or runner event fires for that term, the session releases the
// lock, and the next campaign starts a proper one.
func TestTermThatNeverStartedHasNoCallbacks(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		entered := make(chan struct{})
		unblock := make(chan struct{})
		first := true
		h.f.BeforeCall(func(_ context.Context, c locktest.Call) error {
			if c.Op == opAcquire && first {
				first = false
				close(entered)
				<-unblock
			}
			return nil
		})
		r, rec := h.newRunner("A")
		p := h.probe("A")
		stop, _, _ := goRun(t, r, p.task)
		<-entered
		h.advance(fRD)
		close(unblock)
		if c := h.f.next(t, opAcquire); !c.ok {
			t.Fatal("slow acquisition did not acquire")
		}
		if rel := h.f.next(t, opRelease); !rel.ok {
			t.Fatalf("untrusted acquisition not released: %+v", rel)
		}
		// The next campaign is due a retry period after the first was sent: now.
		if c := h.f.next(t, opAcquire); !c.ok {
			t.Fatal("second campaign did not acquire")
		}
		p.next(t)
		rec.wantCounts(t, 1, 0)
		_ = stop()
		rec.wantCounts(t, 1, 1)
		if len(p.runs) != 0 {
			t.Fatal("task ran twice")
		}
		// Nothing happened between the first acquisition and the second.
		wantOrder(t, h.f.sequence(), "acquire:A", "release:A", "acquire:A", "started:A", "task-start:A")
		if i := slices.Index(h.f.sequence(), "started:A"); i != 3 {
			t.Fatalf("sequence %v: a callback fired for the untrusted term", h.f.sequence())
		}
	})
}

// A task that stops calling Heartbeat is cancelled with ErrStalled (which is
// also lock.ErrLeaseLost) once the stall timeout passes, and the lock is
// released.
func TestStallDetection(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		const stall = 5 * time.Second
		r, rec := h.newRunner("A", runner.WithStallTimeout(stall))
		p := h.probe("A")
		stop, _, _ := goRun(t, r, p.task)
		t0 := h.f.next(t, opAcquire).start
		rn := p.next(t)

		h.advanceTo(t0.Add(4 * time.Second))
		rn.heartbeat(t)
		h.advanceTo(t0.Add(4*time.Second + stall - time.Millisecond))
		rn.running(t)
		h.advanceTo(t0.Add(4*time.Second + stall))
		rn.wait(t)
		if !errors.Is(rn.cause, runner.ErrStalled) || !errors.Is(rn.cause, lock.ErrLeaseLost) {
			t.Fatalf("cause %v, want ErrStalled and lock.ErrLeaseLost", rn.cause)
		}
		if !rn.cancelledAt.Equal(t0.Add(4*time.Second + stall)) {
			t.Fatalf("cancelled at t0+%v, want t0+%v", rn.cancelledAt.Sub(t0), 4*time.Second+stall)
		}
		if rel := h.f.next(t, opRelease); !rel.ok {
			t.Fatalf("stalled leader did not release: %+v", rel)
		}
		rec.wantCounts(t, 1, 1)
		rec.wantEnd(t, "task stalled", runner.ErrStalled)
		if n := h.f.count(opRenew, ""); n != 0 {
			t.Fatalf("%d renewals by a stalled leader", n)
		}
		_ = stop()
	})
}

// A task that calls Heartbeat keeps leading.
func TestHeartbeatKeepsLeader(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		const stall = 5 * time.Second
		r, rec := h.newRunner("A", runner.WithStallTimeout(stall))
		p := h.probe("A")
		stop, _, _ := goRun(t, r, p.task)
		t0 := h.f.next(t, opAcquire).start
		rn := p.next(t)
		next := t0.Add(fRI)
		for at := 4 * time.Second; at <= 40*time.Second; at += 4 * time.Second {
			h.advanceTo(t0.Add(at))
			if !h.clk.Now().Before(next) {
				c := h.f.next(t, opRenew)
				next = c.start.Add(fRI)
			}
			h.f.none(t, opRenew)
			rn.heartbeat(t)
		}
		rn.running(t)
		if !r.IsLeader() {
			t.Fatal("heartbeating leader lost leadership")
		}
		rec.wantCounts(t, 1, 0)
		_ = stop()
	})
}

// When ctx ends, Run waits for the task, then releases, then returns.
func TestRunReleasesAfterTaskReturns(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		r, rec := h.newRunner("A")
		p := h.probe("A")
		stop, _, _ := goRun(t, r, p.task)
		h.f.next(t, opAcquire)
		p.next(t)
		err := stop()
		if err != nil {
			t.Fatalf("Run returned %v, want nil (a normal stop)", err)
		}
		if n := h.f.count(opRelease, "A"); n != 1 {
			t.Fatalf("Run returned after %d releases, want 1", n)
		}
		if r.IsLeader() {
			t.Fatal("leader after Run returned")
		}
		rec.wantCounts(t, 1, 1)
		wantOrder(t, h.f.sequence(), "task-start:A", "task-return:A", "stopped:A", "release:A")
		notHeld(t, h.f)
	})
}

// While a task winds down after ctx ended, the lease is still renewed.
func TestRunRenewsWhileTaskWindsDown(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		r, rec := h.newRunner("A", runner.WithGracePeriod(time.Minute))
		p := h.probe("A")
		p.stubborn = true
		_, cancel, errc := goRun(t, r, p.task)
		t0 := h.f.next(t, opAcquire).start
		rn := p.next(t)
		cancel()
		for i := 1; i <= 4; i++ {
			h.advanceTo(t0.Add(time.Duration(i) * fRI))
			if c := h.f.next(t, opRenew); !c.ok {
				t.Fatalf("renewal %d while winding down failed", i)
			}
		}
		if !r.IsLeader() {
			t.Fatal("not leader while the task winds down")
		}
		rec.wantCounts(t, 1, 0)
		rn.stop <- nil
		if err := waitErr(t, errc); err != nil {
			t.Fatalf("Run returned %v", err)
		}
		rec.wantCounts(t, 1, 1)
		wantOrder(t, h.f.sequence(), "task-return:A", "stopped:A", "release:A")
	})
}

// A task that ignores its cancelled context for the grace period is
// abandoned: Run returns ErrTaskDidNotStop without releasing, and the lock
// is released once the task returns.
func TestAbandonedTaskIsReported(t *testing.T) {
	t.Parallel()
	const grace = 5 * time.Second
	for _, tc := range []struct {
		name string
		lose bool // lose the lease instead of cancelling ctx
	}{{"ctx ended", false}, {"lease lost", true}} {
		t.Run(tc.name, func(t *testing.T) {
			fast(t, func(t *testing.T, h *harness) {
				r, rec := h.newRunner("A", runner.WithGracePeriod(grace))
				p := h.probe("A")
				p.stubborn = true
				_, cancel, errc := goRun(t, r, p.task)
				t0 := h.f.next(t, opAcquire).start
				rn := p.next(t)
				stopped := false
				defer func() {
					if !stopped {
						rn.stop <- nil
					}
				}()
				if tc.lose {
					h.f.Fail(opRenew, locktest.Always, errDown)
					for at := fRI; at < fRD; at += fRP {
						h.advanceTo(t0.Add(at))
						h.f.next(t, opRenew)
					}
					h.advanceTo(t0.Add(fRD))
					<-rn.ctx.Done()
					h.advanceTo(t0.Add(fRD + grace - time.Millisecond))
					if returned(errc) {
						t.Fatalf("Run returned %v before the grace period passed", <-errc)
					}
					h.advanceTo(t0.Add(fRD + grace))
				} else {
					cancel()
					h.advance(grace - time.Millisecond)
					if returned(errc) {
						t.Fatalf("Run returned %v before the grace period passed", <-errc)
					}
					h.advance(time.Millisecond)
				}
				err := waitErr(t, errc)
				if !errors.Is(err, runner.ErrTaskDidNotStop) {
					t.Fatalf("Run returned %v, want ErrTaskDidNotStop", err)
				}
				if n := h.f.count(opRelease, ""); n != 0 {
					t.Fatalf("released %d times under a task that is still running", n)
				}
				rec.wantCounts(t, 1, 1)
				if tc.lose {
					rec.wantEnd(t, "lease lost", lock.ErrLeaseLost)
				} else {
					rec.wantEnd(t, "task did not stop", runner.ErrTaskDidNotStop)
				}
				if r.IsLeader() {
					t.Fatal("leader after abandoning the task")
				}
				renewals := h.f.count(opRenew, "")
				for range 6 { // steps of a renew interval: a live lease would be renewed at each
					h.advance(fRI)
				}
				if n := h.f.count(opRelease, ""); n != 0 {
					t.Fatalf("released %d times under a task that is still running", n)
				}
				if n := h.f.count(opRenew, "") - renewals; n != 0 {
					t.Fatalf("%d renewals after the task was abandoned: its lease must run out", n)
				}
				stopped = true
				rn.stop <- nil
				rn.wait(t)
				if rel := h.f.next(t, opRelease); !rel.ok || rel.keeper != "A" {
					t.Fatalf("release once the abandoned task returned: %+v", rel)
				}
				rec.wantCounts(t, 1, 1)
			})
		})
	}
}

// With WithCampaignAgain(false) Run returns after one term.
func TestRunOnce(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	t.Run("task error", func(t *testing.T) {
		fast(t, func(t *testing.T, h *harness) {
			r, rec := h.newRunner("A", runner.WithCampaignAgain(false))
			p := h.probe("A")
			_, _, errc := goRun(t, r, p.task)
			rn := p.next(t)
			rn.stop <- errBoom
			if err := waitErr(t, errc); !errors.Is(err, errBoom) {
				t.Fatalf("Run returned %v, want the task's error", err)
			}
			if n := h.f.count(opRelease, "A"); n != 1 {
				t.Fatalf("%d releases, want 1", n)
			}
			rec.wantCounts(t, 1, 1)
			rec.wantEnd(t, "task failed", errBoom)
		})
	})
	t.Run("task returned", func(t *testing.T) {
		fast(t, func(t *testing.T, h *harness) {
			r, rec := h.newRunner("A", runner.WithCampaignAgain(false))
			p := h.probe("A")
			_, _, errc := goRun(t, r, p.task)
			p.next(t).stop <- nil
			if err := waitErr(t, errc); err != nil {
				t.Fatalf("Run returned %v, want nil", err)
			}
			rec.wantCounts(t, 1, 1)
			rec.wantEnd(t, "task returned", nil)
		})
	})
	t.Run("lease lost", func(t *testing.T) {
		fast(t, func(t *testing.T, h *harness) {
			r, rec := h.newRunner("A", runner.WithCampaignAgain(false))
			p := h.probe("A")
			_, _, errc := goRun(t, r, p.task)
			t0 := h.f.next(t, opAcquire).start
			p.next(t)
			h.f.TakeOver(lockName, "B")
			h.advanceTo(t0.Add(fRI))
			if err := waitErr(t, errc); !errors.Is(err, lock.ErrLeaseLost) {
				t.Fatalf("Run returned %v, want lock.ErrLeaseLost", err)
			}
			rec.wantCounts(t, 1, 1)
			rec.wantEnd(t, "lease lost", lock.ErrLeaseLost)
		})
	})
}

// With the default WithCampaignAgain(true), a task that returns is run again
// in a new term after a retry period; callbacks pair up per term, and each
// failure is reported by the TermEnded event.
func TestRunCampaignsAgainAfterTaskReturns(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		r, rec := h.newRunner("A")
		p := h.probe("A")
		stop, _, _ := goRun(t, r, p.task)
		var last uint64
		errTransient := errors.New("transient task failure")
		for term := 1; term <= 3; term++ {
			rn := p.next(t)
			if rn.fence <= last {
				t.Fatalf("term %d fence %d not above %d", term, rn.fence, last)
			}
			last = rn.fence
			rec.wantCounts(t, term, term-1)
			rn.stop <- errTransient
			rn.wait(t)
			rel := h.f.next(t, opRelease)
			rec.wantCounts(t, term, term)
			rec.wantEnd(t, "task failed", errTransient)
			h.advanceTo(rel.start.Add(fRP))
		}
		p.next(t)
		_ = stop()
		rec.wantCounts(t, 4, 4)
		rec.wantEnd(t, "context ended", nil)
		// Between terms the leader is unknown: each term sees it anew.
		rec.wantLeaders(t, "A", "A", "A", "A")
	})
}

// Two runners on one lock: while one leads the other stays out; when the
// leader stops it releases and the other starts within one retry period; the
// tasks never overlap.
func TestFailoverOnGracefulStop(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		a, recA := h.newRunner("A")
		b, recB := h.newRunner("B")
		pa, pb := h.probe("A"), h.probe("B")
		stopA, _, _ := goRun(t, a, pa.task)
		rnA := pa.next(t)
		stopB, _, _ := goRun(t, b, pb.task)
		if c := h.f.next(t, opAcquire); c.keeper != "A" || !c.ok {
			t.Fatalf("first acquisition %+v", c)
		}
		if c := h.f.next(t, opAcquire); c.keeper != "B" || c.ok {
			t.Fatalf("B's campaign %+v", c)
		}
		h.f.next(t, opHolder)
		recB.wantLeaders(t, "A")
		if b.IsLeader() || b.Leader() != "A" {
			t.Fatalf("B: IsLeader=%v Leader=%q", b.IsLeader(), b.Leader())
		}
		_ = stopA()
		rnA.wait(t)
		h.f.next(t, opRelease)
		// B campaigns at least once per retry period: one period after the
		// release, without the clock moving again, it has taken over.
		h.advance(fRP)
		c := h.f.next(t, opAcquire)
		if c.keeper != "B" || !c.ok {
			t.Fatalf("B's campaign after A released: %+v", c)
		}
		rnB := pb.next(t)
		if rnB.fence <= rnA.fence {
			t.Fatalf("B's fence %d not above A's %d", rnB.fence, rnA.fence)
		}
		wantOrder(t, h.f.sequence(), "task-start:A", "task-return:A", "release:A", "task-start:B")
		_ = stopB()
		recA.wantCounts(t, 1, 1)
		recB.wantCounts(t, 1, 1)
		recA.wantLeaders(t, "A")
		recB.wantLeaders(t, "A", "B")
	})
}

// Run campaigns every retry period of its session, shortened by at most a
// fifth (the shared jitter), and never more often.
func TestRunCampaignsEveryRetryPeriod(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		const rp = 5 * time.Second
		a, _ := h.newRunner("A")
		rec := &recorder{f: h.f, name: "B"}
		b, err := runner.New(h.newSession("B", rec, lock.WithRetryPeriod(rp)), lockName, rec.options()...)
		if err != nil {
			t.Fatal(err)
		}
		pa, pb := h.probe("A"), h.probe("B")
		goRun(t, a, pa.task)
		pa.next(t)
		goRun(t, b, pb.task)
		prev := h.f.next(t, opAcquire) // A's
		for i := range 5 {
			c := h.f.next(t, opAcquire)
			if c.keeper != "B" || c.ok {
				t.Fatalf("campaign %d: %+v", i, c)
			}
			if i > 0 {
				if d := c.start.Sub(prev.start); d < rp*4/5 || d > rp {
					t.Fatalf("campaign %d came %v after the last, want within [%v, %v]", i, d, rp*4/5, rp)
				}
			}
			prev = c
			// Step through the period; B campaigns once in it.
			for range 10 {
				h.advance(rp / 10)
			}
		}
		rec.wantCounts(t, 0, 0)
		rec.wantLeaders(t, "A")
	})
}

// RunTaskOnLeader: runs the task only on the leader; leadership lasts
// between calls while the session's renewals succeed; when they fail past
// the renew deadline the leader stops trusting its lease, reports the end of
// the term at its next call, and the other instance takes over once the
// lease expired; Resign hands over.
func TestRunTaskOnLeader(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		a, recA := h.newRunner("A")
		b, recB := h.newRunner("B")
		ctx := context.Background()
		var fences []uint64
		task := func(ctx context.Context) error {
			f, _ := runner.FenceFrom(ctx)
			fences = append(fences, f)
			return nil
		}
		mustRun := func(r *runner.LeaderAwareRunner, want bool) {
			t.Helper()
			ran, err := r.RunTaskOnLeader(ctx, task)
			if err != nil || ran != want {
				t.Fatalf("%s: ran=%v err=%v, want ran=%v", r.KeeperID(), ran, err, want)
			}
		}
		t0 := h.clk.Now()
		mustRun(a, true)
		mustRun(b, false)
		if !a.IsLeader() || b.IsLeader() || b.Leader() != "A" {
			t.Fatalf("A IsLeader=%v, B IsLeader=%v Leader=%q", a.IsLeader(), b.IsLeader(), b.Leader())
		}
		// Nobody calls: the session renews A's lease all the same.
		for i := 1; i <= 4; i++ {
			h.advanceTo(t0.Add(time.Duration(i) * fRI))
			if c := h.f.next(t, opRenew); !c.ok || c.keeper != "A" || !c.start.Equal(t0.Add(time.Duration(i)*fRI)) {
				t.Fatalf("renewal %d between calls: %+v", i, c)
			}
			if !a.IsLeader() {
				t.Fatalf("A not leader after renewal %d", i)
			}
		}
		mustRun(a, true)
		mustRun(b, false)
		if n := h.f.count(opAcquire, "A"); n != 1 {
			t.Fatalf("A acquired %d times, want once: leadership lasts between calls", n)
		}
		if fences[1] != fences[0] {
			t.Fatalf("fences %v: a new term between calls", fences)
		}
		recA.wantCounts(t, 1, 0)

		// The store fails renewals: A leads until the renew deadline of its
		// last renewal, and not a moment longer.
		last := t0.Add(4 * fRI)
		h.f.Fail(opRenew, locktest.Always, errDown)
		for at := fRI; at < fRD; at += fRP {
			h.advanceTo(last.Add(at))
			if c := h.f.next(t, opRenew); c.err == nil {
				t.Fatalf("renewal at last+%v did not fail", at)
			}
		}
		h.advanceTo(last.Add(fRD - time.Millisecond))
		if !a.IsLeader() {
			t.Fatal("A not leader before its renew deadline")
		}
		h.advanceTo(last.Add(fRD))
		if a.IsLeader() || a.Fence() != 0 || a.Leader() != "" {
			t.Fatal("A still leader after its renew deadline")
		}
		recA.wantCounts(t, 1, 0) // reported by A's next call
		mustRun(b, false)        // the lease lives on until the store expires it
		h.f.Restore()
		h.advanceTo(last.Add(fTTL))
		mustRun(b, true)
		if fences[len(fences)-1] <= fences[0] {
			t.Fatalf("fences %v do not increase", fences)
		}
		mustRun(a, false)
		recA.wantCounts(t, 1, 1)
		if e := recA.wantEnd(t, "lease lost", lock.ErrLeaseLost); e.Took != 4*fRI+fRD {
			t.Fatalf("TermEnded Took %v, want %v: up to when the lease stopped being trusted", e.Took, 4*fRI+fRD)
		}
		if a.Leader() != "B" {
			t.Fatalf("A sees leader %q, want B", a.Leader())
		}
		if err := b.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		recB.wantCounts(t, 1, 1)
		recB.wantEnd(t, "resigned", nil)
		notHeld(t, h.f)
		mustRun(a, true)
		recA.wantCounts(t, 2, 1)
		if err := a.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		recA.wantCounts(t, 2, 2)
		recB.wantLeaders(t, "A", "B")
		recA.wantLeaders(t, "A", "B", "A")
	})
}

// A renewal failing between calls does not cost leadership: the session
// retries it a retry period later, and no call campaigns again.
func TestRunTaskOnLeaderTransientRenewalError(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		a, rec := h.newRunner("A")
		ctx := context.Background()
		t0 := h.clk.Now()
		task := func(ctx context.Context) error { return ctx.Err() }
		if ran, err := a.RunTaskOnLeader(ctx, task); !ran || err != nil {
			t.Fatalf("ran=%v err=%v", ran, err)
		}
		h.f.Fail(opRenew, locktest.Always, errDown)
		h.advanceTo(t0.Add(fRI))
		if c := h.f.next(t, opRenew); c.err == nil {
			t.Fatal("injected renewal error did not happen")
		}
		if ran, err := a.RunTaskOnLeader(ctx, task); !ran || err != nil {
			t.Fatalf("after a failed renewal: ran=%v err=%v", ran, err)
		}
		h.f.Restore()
		h.advanceTo(t0.Add(fRI + fRP - time.Millisecond))
		if n := h.f.count(opRenew, ""); n != 1 {
			t.Fatalf("%d renewals, want the retry to wait a retry period", n)
		}
		h.advanceTo(t0.Add(fRI + fRP))
		if c := h.f.next(t, opRenew); !c.ok {
			t.Fatalf("retry %+v", c)
		}
		if ran, err := a.RunTaskOnLeader(ctx, task); !ran || err != nil {
			t.Fatalf("ran=%v err=%v", ran, err)
		}
		rec.wantCounts(t, 1, 0)
		if n := h.f.count(opAcquire, ""); n != 1 {
			t.Fatalf("%d acquisitions, want 1", n)
		}
	})
}

// A task run by RunTaskOnLeader is cancelled with lock.ErrLeaseLost at the
// deadline if renewals fail, and the lock is released once it returned.
func TestRunTaskOnLeaderCancelsAtDeadline(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		a, rec := h.newRunner("A")
		p := h.probe("A")
		t0 := h.clk.Now()
		done := make(chan taskResult, 1)
		go func() {
			ran, err := a.RunTaskOnLeader(context.Background(), p.task)
			done <- taskResult{ran, err}
		}()
		rn := p.next(t)
		// Renewed while the task runs.
		h.advanceTo(t0.Add(fRI))
		if c := h.f.next(t, opRenew); !c.ok {
			t.Fatal("renewal failed")
		}
		h.f.Fail(opRenew, locktest.Always, errDown)
		for at := 2 * fRI; at < fRI+fRD; at += fRP {
			h.advanceTo(t0.Add(at))
			h.f.next(t, opRenew)
		}
		rn.running(t)
		h.advanceTo(t0.Add(fRI + fRD))
		rn.wait(t)
		if !errors.Is(rn.cause, lock.ErrLeaseLost) || !rn.cancelledAt.Equal(t0.Add(fRI+fRD)) {
			t.Fatalf("cancelled at t0+%v cause %v", rn.cancelledAt.Sub(t0), rn.cause)
		}
		res := waitResult(t, done)
		if !res.ran || !errors.Is(res.err, context.Canceled) {
			t.Fatalf("ran=%v err=%v, want ran and the task's error", res.ran, res.err)
		}
		rec.wantCounts(t, 1, 1)
		rec.wantEnd(t, "lease lost", lock.ErrLeaseLost)
		seq := h.f.sequence()
		wantOrder(t, seq, "task-return:A", "release:A")
		wantOrder(t, seq, "stopped:A", "release:A")
	})
}

// Closing the session ends the term (cause lock.ErrSessionClosed) and Run
// returns an error wrapping lock.ErrSessionClosed instead of campaigning.
func TestSessionCloseEndsRun(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		rec := &recorder{f: h.f, name: "A"}
		s := h.newSession("A", rec)
		r, err := runner.New(s, lockName, rec.options()...)
		if err != nil {
			t.Fatal(err)
		}
		p := h.probe("A")
		_, _, errc := goRun(t, r, p.task)
		rn := p.next(t)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		rn.wait(t)
		if !errors.Is(rn.cause, lock.ErrSessionClosed) {
			t.Fatalf("task cancelled with %v, want lock.ErrSessionClosed", rn.cause)
		}
		if err := waitErr(t, errc); !errors.Is(err, lock.ErrSessionClosed) {
			t.Fatalf("Run returned %v, want lock.ErrSessionClosed", err)
		}
		rec.wantCounts(t, 1, 1)
		rec.wantEnd(t, "session closed", lock.ErrSessionClosed)
		notHeld(t, h.f)
		if _, err := runner.New(s, lockName); !errors.Is(err, lock.ErrSessionClosed) {
			t.Fatalf("New on a closed session: %v", err)
		}
	})
}

func TestBusy(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		r, _ := h.newRunner("A")
		p := h.probe("A")
		stop, _, _ := goRun(t, r, p.task)
		p.next(t)
		if err := r.Run(context.Background(), p.task); !errors.Is(err, runner.ErrBusy) {
			t.Fatalf("second Run: %v, want ErrBusy", err)
		}
		if _, err := r.RunTaskOnLeader(context.Background(), p.task); !errors.Is(err, runner.ErrBusy) {
			t.Fatalf("RunTaskOnLeader during Run: %v, want ErrBusy", err)
		}
		if err := r.Resign(context.Background()); !errors.Is(err, runner.ErrBusy) {
			t.Fatalf("Resign during Run: %v, want ErrBusy", err)
		}
		_ = stop()
	})
}

func TestContextHelpersOutsideTasks(t *testing.T) {
	t.Parallel()
	runner.Heartbeat(context.Background()) // must not panic
	if f, ok := runner.FenceFrom(context.Background()); ok || f != 0 {
		t.Fatalf("FenceFrom outside a task: %d, %v", f, ok)
	}
}

// TestGapOfGracefulHandover: a handover by release is never reported as a
// longer failover gap than the lock was free. The follower last read the
// holder before the release, so it does not know when the lock was let
// go: it reports no gap (0, not known) rather than the time since its
// read, which once logged gap=2.828s for a handover of 190ms.
func TestGapOfGracefulHandover(t *testing.T) {
	fast(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		a, _ := h.newRunner("A")
		b, recB := h.newRunner("B")
		nop := func(context.Context) error { return nil }
		if ran, err := a.RunTaskOnLeader(ctx, nop); !ran || err != nil {
			t.Fatalf("A: ran=%v err=%v, want it to lead", ran, err)
		}
		if ran, err := b.RunTaskOnLeader(ctx, nop); ran || err != nil {
			t.Fatalf("B while A leads: ran=%v err=%v", ran, err)
		}
		h.advance(2638 * time.Millisecond)
		if err := a.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		released := h.clk.Now()
		h.advance(190 * time.Millisecond)
		if ran, err := b.RunTaskOnLeader(ctx, nop); !ran || err != nil {
			t.Fatalf("B after A resigned: ran=%v err=%v", ran, err)
		}
		free := h.clk.Since(released)
		started := recB.eventsOf(lock.TermStarted)
		if len(started) != 1 {
			t.Fatalf("B: %d TermStarted events, want 1", len(started))
		}
		if g := started[0].Gap; g > free {
			t.Fatalf("B's TermStarted reports gap=%v for a handover whose lock was free %v", g, free)
		}
	})
}
