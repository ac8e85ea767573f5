package lock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/simdb"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
)

// TestKeepAliveRenewsAllInOneCallPerInterval: however many leases a
// Session holds, and however out of step they were taken, the keep-alive
// renews them all with one store call per renew interval.
func TestKeepAliveRenewsAllInOneCallPerInterval(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 100, 1000} {
		t.Run(fmt.Sprintf("locks=%d", n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newMemStore(3 * time.Second)
				s := newSession(t, f)
				ri := s.Timings().RenewInterval
				ctx := context.Background()
				ids := lockIDs(n)
				start := time.Now()
				// Half now, half a third of an interval later.
				first, err := s.AcquireLocks(ctx, ids[:(n+1)/2]...)
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(ri / 3)
				second, err := s.AcquireLocks(ctx, ids[(n+1)/2:]...)
				if err != nil {
					t.Fatal(err)
				}
				leases := append(first.Leases, second.Leases...)
				if len(leases) != n {
					t.Fatalf("took %d of %d", len(leases), n)
				}
				const rounds = 5
				time.Sleep(start.Add(rounds*ri + ri/2).Sub(time.Now()))
				renews := f.Calls(locktest.OpRenew)
				if len(renews) != rounds {
					t.Fatalf("%d renew calls in %d renew intervals, want %d", len(renews), rounds, rounds)
				}
				for i, c := range renews {
					if len(c.LockIDs) != n {
						t.Errorf("renew %d covered %d of %d locks", i, len(c.LockIDs), n)
					}
					if want := start.Add(time.Duration(i+1) * ri); !c.Start.Equal(want) {
						t.Errorf("renew %d sent at %v, want %v (one renew interval after the last)", i, c.Start.Sub(start), want.Sub(start))
					}
				}
				for _, l := range leases {
					if err := l.Err(); err != nil {
						t.Fatalf("lease %s: %v", l.LockID(), err)
					}
				}
			})
		})
	}
}

func lockIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("lock-%05d", i)
	}
	return ids
}

// TestKeepAliveLeaseEndsAtRenewDeadline: while renewals fail, the
// keep-alive retries them, and the lease ends with ErrLeaseLost exactly at
// its renew deadline, whether renewals fail at once or hang.
func TestKeepAliveLeaseEndsAtRenewDeadline(t *testing.T) {
	t.Parallel()
	failures := map[string]func(f *locktest.Store){
		"renewals fail": func(f *locktest.Store) { f.Fail(locktest.OpRenew, locktest.Always, errors.New("connection refused")) },
		"renewals hang": func(f *locktest.Store) { f.Pause(locktest.OpRenew) },
	}
	for name, fail := range failures {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newMemStore(3 * time.Second)
				rec := newRecorder()
				s := newSession(t, f, lock.WithObserver(rec))
				tm := s.Timings()
				fail(f)
				start := time.Now()
				m := newMutex(t, s, "a")
				l := mustLock(t, context.Background(), m)
				if !l.Deadline().Equal(start.Add(tm.RenewDeadline)) {
					t.Fatalf("deadline %v after the acquisition, want the renew deadline %v", l.Deadline().Sub(start), tm.RenewDeadline)
				}
				time.Sleep(tm.RenewDeadline - time.Nanosecond)
				if err := l.Err(); err != nil || l.Remaining() != time.Nanosecond {
					t.Fatalf("a nanosecond before the deadline: err %v, remaining %v", err, l.Remaining())
				}
				<-l.Done()
				if took := time.Since(start); took != tm.RenewDeadline {
					t.Errorf("lease ended %v after the acquisition, want exactly the renew deadline %v", took, tm.RenewDeadline)
				}
				if !errors.Is(l.Err(), lock.ErrLeaseLost) || l.Remaining() != 0 {
					t.Errorf("after the deadline: err %v, remaining %v", l.Err(), l.Remaining())
				}
				renews := f.Calls(locktest.OpRenew)
				if len(renews) < 3 {
					t.Errorf("%d renewal attempts before the deadline, want retries", len(renews))
				}
				for _, c := range renews {
					if c.Start.Sub(start) >= tm.RenewDeadline {
						t.Errorf("renewal sent %v after the acquisition, at or past the deadline", c.Start.Sub(start))
					}
				}
				if lost := rec.of(lock.LeaseLost, "a"); len(lost) != 1 || !lost[0].At.Equal(start.Add(tm.RenewDeadline)) {
					t.Errorf("LeaseLost events %+v, want one at the deadline", lost)
				}
				if err := m.ReleaseLock(context.Background()); !errors.Is(err, lock.ErrLeaseLost) {
					t.Errorf("release of the lost lease: %v, want ErrLeaseLost", err)
				}
			})
		})
	}
}

// TestKeepAliveOneCommandPerInterval counts the keep-alive's commands with
// the command monitor: one update per round, whether the Session holds one
// lock, a hundred or a thousand, and one round per renew interval. On a
// simulated server, in a synctest bubble: its round trips take no time, so
// the rounds come exactly a renew interval apart, however loaded the
// machine. (TestRenewMany renews many locks in one command on the test
// server.)
func TestKeepAliveOneCommandPerInterval(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 100, 1000} {
		t.Run(fmt.Sprintf("locks=%d", n), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				counter := mongotest.NewCounter()
				srv := simdb.NewServer(simdb.MongoDB, 0)
				l, _, _ := simLocker(t, srv, "a", nil, options.Client().SetMonitor(counter.Monitor()), lock.WithTTL(12*time.Second))
				rec := newRecorder()
				s := newSession(t, l, lock.WithObserver(rec), lock.WithRenewInterval(3*time.Second))
				ri := s.Timings().RenewInterval
				taken, err := s.AcquireLocks(context.Background(), lockIDs(n)...)
				if err != nil || len(taken.Leases) != n {
					t.Fatalf("took %d of %d: %v", len(taken.Leases), n, err)
				}
				counter.Reset()
				rec.reset()
				start := time.Now()
				const rounds = 2
				time.Sleep(rounds*ri + ri/2)
				if got := counter.Count("update"); got != rounds {
					t.Errorf("%d update commands for %d rounds of %d renewals, want one per round", got, rounds, n)
				}
				if got := counter.Total(); got != rounds {
					t.Errorf("%d commands in all for %d rounds, want %d: %v", got, rounds, rounds, counter.Counts())
				}
				if failed := filter(rec.all(), lock.RenewFailed, lock.LeaseLost); len(failed) > 0 {
					t.Errorf("renewals failed: %v", kinds(failed))
				}
				renewed := filter(rec.all(), lock.Renewed)
				if len(renewed) != rounds*n {
					t.Fatalf("%d renewals in %d rounds of %d locks", len(renewed), rounds, n)
				}
				for i, e := range renewed {
					if round := i/n + 1; !e.At.Equal(start.Add(time.Duration(round) * ri)) {
						t.Errorf("renewal %d of %s at %v, want round %d at %v: one per renew interval", i, e.LockID, e.At.Sub(start), round, time.Duration(round)*ri)
						break
					}
				}
			})
		})
	}
}

// filter returns the events of the given kinds.
func filter(events []lock.Event, kinds ...lock.EventKind) []lock.Event {
	var out []lock.Event
	for _, e := range events {
		for _, k := range kinds {
			if e.Kind == k {
				out = append(out, e)
			}
		}
	}
	return out
}

// TestRenewLostLease: renewing a lease that was lost returns an error
// wrapping ErrLeaseLost, never nil, and never revives it.
func TestRenewLostLease(t *testing.T) {
	t.Parallel()
	t.Run("taken over", func(t *testing.T) {
		t.Parallel()
		ls, _ := newLockers(t, 2, lock.WithTTL(10*time.Second))
		ctx := testCtx(t, 30*time.Second)
		s1, s2 := newSession(t, ls[0]), newSession(t, ls[1])
		m1 := newMutex(t, s1, "job")
		lease := mustLock(t, ctx, m1)
		if err := lease.Renew(ctx); err != nil {
			t.Fatalf("renew of a live lease: %v", err)
		}
		if err := ls[1].ForceRelease(ctx, "job"); err != nil {
			t.Fatal(err)
		}
		taker := mustLock(t, ctx, newMutex(t, s2, "job"))
		for range 2 {
			if err := lease.Renew(ctx); !errors.Is(err, lock.ErrLeaseLost) {
				t.Fatalf("renew of a lease taken over: %v, want ErrLeaseLost", err)
			}
		}
		select {
		case <-lease.Done():
		default:
			t.Fatal("lease found lost is not done")
		}
		if !errors.Is(lease.Err(), lock.ErrLeaseLost) || lease.Remaining() != 0 {
			t.Fatalf("lost lease: err %v, remaining %v", lease.Err(), lease.Remaining())
		}
		if err := m1.ReleaseLock(ctx); !errors.Is(err, lock.ErrLeaseLost) {
			t.Fatalf("release of a lease taken over: %v, want ErrLeaseLost", err)
		}
		if h, err := ls[0].Holder(ctx, "job"); err != nil || h.KeeperID != s2.KeeperID() || h.Fence != taker.Fence() {
			t.Fatalf("holder after the old holder's renew and release: %+v %v, want the taker's term", h, err)
		}
	})
	t.Run("expired", func(t *testing.T) {
		t.Parallel()
		const ttl = 600 * time.Millisecond
		dbName := newDB(t)
		client, fault := mongotest.NewProxiedClient(t)
		l, err := lock.New(mongotest.Database(t, client, dbName), lock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		other := onNewClient(t, dbName, lock.WithTTL(ttl))
		s := faultySession(t, l)
		ctx := testCtx(t, time.Minute)
		// Lock, not one attempt: on a loaded machine an answer can come
		// too late to trust a lease this short (ErrNotTrusted), and Lock
		// tries again.
		lease, err := newMutex(t, s, "job").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fault.Cut()
		<-lease.Done()
		// Past the TTL: the lock document has expired by the server's clock.
		time.Sleep(ttl)
		fault.Restore()
		for range 2 {
			if err := lease.Renew(ctx); !errors.Is(err, lock.ErrLeaseLost) {
				t.Fatalf("renew of an expired lease: %v, want ErrLeaseLost", err)
			}
		}
		// The Session answers from what it knows; the store's renewal, as
		// a paused holder would send it, must not revive the lease either.
		if r, err := other.Renew(ctx, s.KeeperID(), "job"); err != nil || len(r.Held) != 0 {
			t.Fatalf("store renewal of an expired lease: %+v %v, want it lost", r, err)
		}
		if h, err := other.Holder(ctx, "job"); !errors.Is(err, lock.ErrNotHeld) {
			t.Fatalf("holder after renewing an expired lease: %+v %v, want it still expired", h, err)
		}
	})
}

// faultySession returns a Session on a Locker whose connection a test
// breaks, closed at cleanup without checking that the release of what it
// holds succeeds: the driver may not have reconnected yet.
func faultySession(t testing.TB, l *lock.Locker, opts ...lock.SessionOption) *lock.Session {
	t.Helper()
	s, err := lock.NewSession(l, append([]lock.SessionOption{lock.WithReleaseTimeout(time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
