package lock_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
)

// TestDoCancelsBeforeContenderAcquires: the holder's connection is cut
// while fn runs under Do. fn's context is cancelled with cause exactly
// ErrLeaseLost, and that happens before a contender in another Session,
// polling all along, sends the write that takes the lock over.
func TestDoCancelsBeforeContenderAcquires(t *testing.T) {
	t.Parallel()
	const ttl = 1500 * time.Millisecond
	dbName := newDB(t)
	client, fault := mongotest.NewProxiedClient(t)
	hl, err := lock.New(mongotest.Database(t, client, dbName), lock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	holder := faultySession(t, hl)
	rec := newRecorder()
	contender := newSession(t, onNewClient(t, dbName, lock.WithTTL(ttl)), lock.WithObserver(rec))
	ctx := testCtx(t, 30*time.Second)

	started := make(chan struct{})
	var cancelled time.Time
	var cause error
	var fence uint64
	done := make(chan error, 1)
	go func() {
		done <- holder.Do(ctx, "job", func(ctx context.Context) error {
			fence, _ = lock.FenceFrom(ctx)
			close(started)
			<-ctx.Done()
			cancelled, cause = time.Now(), context.Cause(ctx)
			return ctx.Err()
		})
	}()
	<-started
	took := make(chan *lock.Lease, 1)
	go func() {
		lease, err := newMutex(t, contender, "job").Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		took <- lease
	}()
	rec.await(t, 10*time.Second, "a refusal", func(ev []lock.Event) bool { return len(filter(ev, lock.Refused)) > 0 })
	fault.Cut()

	lease := <-took
	if lease == nil {
		t.FailNow()
	}
	err = <-done
	fault.Restore()
	acq := rec.of(lock.Acquired, "job")
	if len(acq) != 1 {
		t.Fatalf("contender's Acquired events: %+v", acq)
	}
	sent := acq[0].At.Add(-acq[0].Took) // the sending of the write that took it
	if cause != lock.ErrLeaseLost {
		t.Errorf("fn's context cause %v, want ErrLeaseLost itself", cause)
	}
	if !cancelled.Before(sent) {
		t.Fatalf("fn cancelled %v after the contender took the lock over", cancelled.Sub(sent))
	}
	t.Logf("fn cancelled %v before the contender's winning write", sent.Sub(cancelled))
	if !errors.Is(err, lock.ErrLeaseLost) || !errors.Is(err, context.Canceled) {
		t.Errorf("Do: %v, want fn's error and ErrLeaseLost", err)
	}
	if fence == 0 || lease.Fence() <= fence {
		t.Errorf("contender's fence %d, holder's %d", lease.Fence(), fence)
	}
}

// TestDoReleasesAfterCallerCancelled: Do's caller cancels its context;
// fn returns, and Do still deletes the lock rather than leaving it to
// expire. fn's context carries the lease and its fence.
func TestDoReleasesAfterCallerCancelled(t *testing.T) {
	t.Parallel()
	ls, _ := newLockers(t, 1, lock.WithTTL(10*time.Second))
	s := newSession(t, ls[0])
	ctx, cancel := context.WithCancel(testCtx(t, 30*time.Second))
	err := s.Do(ctx, "r", func(fctx context.Context) error {
		lease, ok := lock.LeaseFrom(fctx)
		fence, fok := lock.FenceFrom(fctx)
		if !ok || !fok || lease.LockID() != "r" || lease.KeeperID() != s.KeeperID() || fence != lease.Fence() || fence == 0 {
			t.Errorf("fn's context carries lease %v (%v), fence %d (%v)", lease, ok, fence, fok)
		}
		if h, err := ls[0].Holder(fctx, "r"); err != nil || h.Fence != fence {
			t.Errorf("holder while fn runs: %+v %v", h, err)
		}
		cancel()
		<-fctx.Done()
		if cause := context.Cause(fctx); cause != context.Canceled {
			t.Errorf("cause %v, want the caller's cancellation", cause)
		}
		return fctx.Err()
	})
	if !errors.Is(err, context.Canceled) || errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("Do: %v, want fn's context.Canceled alone", err)
	}
	if _, err := ls[0].Holder(testCtx(t, 10*time.Second), "r"); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("lock after Do returned: %v, want released", err)
	}
}

// TestDoAbandonsTaskThatIgnoresCancellation: fn ignores its cancelled
// context. Do returns ErrTaskDidNotStop exactly a grace period after the
// cancellation, stops renewing the lease, keeps the lock from others in
// the Session until fn returns, and then releases it.
func TestDoAbandonsTaskThatIgnoresCancellation(t *testing.T) {
	t.Parallel()
	const grace = 2 * time.Second
	cases := []struct {
		name  string
		cause error
		end   func(f *locktest.Store, cancel context.CancelFunc)
	}{
		{"caller cancelled", context.Canceled, func(_ *locktest.Store, cancel context.CancelFunc) { cancel() }},
		{"lease lost", lock.ErrLeaseLost, func(f *locktest.Store, _ context.CancelFunc) {
			f.ForceRelease("x")
			f.TakeOver("x", "other")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newMemStore(3 * time.Second)
				s := newSession(t, f, lock.WithGracePeriod(grace))
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				stop := make(chan struct{})
				fnCtx := make(chan context.Context, 1)
				type result struct {
					err error
					at  time.Time
				}
				done := make(chan result, 1)
				go func() {
					err := s.Do(ctx, "x", func(ctx context.Context) error {
						fnCtx <- ctx
						<-stop // ignores ctx
						return nil
					})
					done <- result{err, time.Now()}
				}()
				time.Sleep(100 * time.Millisecond)
				c.end(f, cancel)
				<-(<-fnCtx).Done()
				ended := time.Now()
				res := <-done
				err := res.err
				if got := res.at.Sub(ended); got != grace {
					t.Errorf("Do returned %v after fn's context ended, want the grace period %v", got, grace)
				}
				if !errors.Is(err, lock.ErrTaskDidNotStop) || !errors.Is(err, c.cause) {
					t.Errorf("Do: %v, want ErrTaskDidNotStop and %v", err, c.cause)
				}
				renews := len(f.Calls(locktest.OpRenew))
				time.Sleep(3 * s.Timings().RenewInterval)
				if n := len(f.Calls(locktest.OpRenew)); n != renews {
					t.Errorf("%d renewals of the abandoned lease", n-renews)
				}
				other := newMutex(t, s, "x")
				if _, ok, err := other.AcquireLock(context.Background()); ok || err != nil {
					t.Fatalf("lock of an abandoned task taken in its Session while it runs: %v %v", ok, err)
				}
				close(stop)
				synctest.Wait()
				if n := len(f.Calls(locktest.OpRelease)); n != 1 {
					t.Errorf("%d releases once the abandoned fn returned, want 1", n)
				}
				mustLock(t, context.Background(), other)
			})
		})
	}
}

// TestDoPanics: a panic in fn is raised again in Do's goroutine, after the
// lock is released.
func TestDoPanics(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newMemStore(3 * time.Second)
		s := newSession(t, f)
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want boom", r)
			}
			if h := f.HeldBy("p"); h != "" {
				t.Errorf("lock held by %q after the panic", h)
			}
		}()
		_ = s.Do(context.Background(), "p", func(context.Context) error { panic("boom") })
		t.Error("Do returned after fn panicked")
	})
}

// TestCloseLeavesAbandonedLockToExpire: closing the Session while an
// abandoned fn still runs does not delete its lock (another keeper would
// get it at once, beside the running fn); the lock is released when fn
// returns, and live leases are released by Close as usual.
func TestCloseLeavesAbandonedLockToExpire(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newMemStore(3 * time.Second)
		s, err := lock.NewSession(f, lock.WithGracePeriod(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		stop := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- s.Do(ctx, "x", func(context.Context) error { <-stop; return nil })
		}()
		live := mustLock(t, context.Background(), newMutex(t, s, "y"))
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, lock.ErrTaskDidNotStop) {
			t.Fatalf("Do: %v, want ErrTaskDidNotStop", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if h := f.HeldBy("x"); h != s.KeeperID() {
			t.Errorf("after Close the abandoned fn's lock is held by %q, want still %q", h, s.KeeperID())
		}
		if h := f.HeldBy("y"); h != "" || !errors.Is(live.Err(), lock.ErrSessionClosed) {
			t.Errorf("live lease after Close: holder %q, err %v; want released, ErrSessionClosed", h, live.Err())
		}
		close(stop)
		synctest.Wait()
		if h := f.HeldBy("x"); h != "" {
			t.Errorf("once the abandoned fn returned the lock is held by %q, want released", h)
		}
	})
}

// TestDoGoexit: a fn that ends its goroutine with runtime.Goexit (as
// t.FailNow does) is an error, not a success, and its lock is released.
func TestDoGoexit(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newMemStore(3 * time.Second)
		s := newSession(t, f)
		err := s.Do(context.Background(), "g", func(context.Context) error { runtime.Goexit(); return nil })
		if err == nil || !strings.Contains(err.Error(), "Goexit") {
			t.Errorf("Do: %v, want an error naming runtime.Goexit", err)
		}
		if h := f.HeldBy("g"); h != "" {
			t.Errorf("lock held by %q after Goexit", h)
		}
	})
}

// TestLockRetriesFailedAttempts: a waiting Lock (and so Do) rides out a
// store that fails for a while, and gives up only when its context ends,
// saying what the last attempt met.
func TestLockRetriesFailedAttempts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newMemStore(3 * time.Second)
		s := newSession(t, f)
		down := errors.New("no server")
		f.Fail(locktest.OpAcquire, 3, down)
		ran := false
		if err := s.Do(context.Background(), "r", func(context.Context) error { ran = true; return nil }); err != nil || !ran {
			t.Fatalf("Do through three failed attempts: ran %v, %v", ran, err)
		}
		if n := len(f.Calls(locktest.OpAcquire)); n != 4 {
			t.Errorf("%d attempts, want 4", n)
		}

		f.Fail(locktest.OpAcquire, locktest.Always, down)
		ctx, cancel := context.WithTimeout(context.Background(), 5*s.Timings().RetryPeriod)
		defer cancel()
		_, err := newMutex(t, s, "r").Lock(ctx)
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, down) {
			t.Errorf("Lock against a dead store: %v, want the deadline and the last failure", err)
		}
	})
}
