package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jonboulle/clockwork"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
)

// TestCloseReleasesEverythingInOneRoundTrip: Close deletes every lock the
// Session holds with one command, although every context of the calls
// that took them has ended; it ends their leases with ErrSessionClosed,
// and every later call returns ErrSessionClosed.
func TestCloseReleasesEverythingInOneRoundTrip(t *testing.T) {
	t.Parallel()
	client, counter := mongotest.CountingClient(t)
	l, err := lock.New(mongotest.Database(t, client, newDB(t)), lock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s, err := lock.NewSession(l)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := newMutex(t, s, "a")
	ma := mustLock(t, ctx, m)
	taken, err := s.AcquireLocks(ctx, "b", "c", "d")
	if err != nil || len(taken.Leases) != 3 {
		t.Fatalf("%+v %v", taken, err)
	}
	done := make(chan error, 1)
	go func() {
		done <- s.Do(ctx, "e", func(ctx context.Context) error {
			<-ctx.Done()
			return nil
		})
	}()
	awaitHeld(t, l, "e")
	cancel()
	<-done
	leases := append(taken.Leases, ma)

	counter.Reset()
	if err := s.Close(); err != nil {
		t.Fatalf("Close after the callers' contexts ended: %v", err)
	}
	if n, d := counter.Total(), counter.Count("update"); n != 1 || d != 1 {
		t.Fatalf("Close sent %d commands (%d updates), want one update", n, d)
	}
	check := testCtx(t, 10*time.Second)
	n, err := l.Collection().CountDocuments(check, bson.D{{Key: "kid", Value: bson.D{{Key: "$exists", Value: true}}}})
	if err != nil || n != 0 {
		t.Fatalf("%d locks left after Close (%v)", n, err)
	}
	for _, lease := range leases {
		select {
		case <-lease.Done():
		default:
			t.Errorf("lease %s not done after Close", lease.LockID())
		}
		if err := lease.Err(); !errors.Is(err, lock.ErrSessionClosed) {
			t.Errorf("lease %s: %v, want ErrSessionClosed", lease.LockID(), err)
		}
	}
	select {
	case <-s.Done():
	default:
		t.Error("Session.Done not closed")
	}

	counter.Reset()
	later := map[string]func() error{
		"Close again": s.Close,
		"AcquireLock": func() error { _, _, err := newMutex(t, s, "f").AcquireLock(check); return err },
		"AcquireLock through a Mutex that held a lock": func() error { _, _, err := m.AcquireLock(check); return err },
		"Lock":          func() error { _, err := newMutex(t, s, "f").Lock(check); return err },
		"AcquireLocks":  func() error { _, err := s.AcquireLocks(check, "f", "g"); return err },
		"Do":            func() error { return s.Do(check, "f", func(context.Context) error { return nil }) },
		"Lease.Renew":   func() error { return ma.Renew(check) },
		"ReleaseLock":   func() error { return m.ReleaseLock(check) },
		"ReleaseLocks":  func() error { return s.ReleaseLocks(check, taken.Leases...) },
		"Holder (read)": func() error { _, err := s.Holder(check, "a"); return err },
	}
	for name, call := range later {
		err := call()
		switch name {
		case "Close again", "ReleaseLocks":
			if err != nil {
				t.Errorf("%s: %v, want nil", name, err)
			}
		case "Holder (read)":
			if !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("%s: %v, want ErrNotHeld", name, err)
			}
		default:
			if !errors.Is(err, lock.ErrSessionClosed) {
				t.Errorf("%s after Close: %v, want ErrSessionClosed", name, err)
			}
		}
	}
	if n := counter.Total() - counter.Count("find") - counter.Count("hello"); n != 0 {
		t.Errorf("%d commands other than Holder's after Close", n)
	}
}

// awaitHeld polls until some keeper holds id.
func awaitHeld(t testing.TB, l *lock.Locker, id string) {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	for {
		if _, err := l.Holder(ctx, id); err == nil {
			return
		}
		if err := lock.Sleep(ctx, clockwork.NewRealClock(), 5*time.Millisecond); err != nil {
			t.Fatalf("%s never held: %v", id, err)
		}
	}
}

// TestCloseStopsEveryGoroutine: Close returns only once the keep-alive and
// any renewal it has in flight are gone. The bubble fails the test if a
// goroutine outlives it; no round trip is sent for a Session holding
// nothing.
func TestCloseStopsEveryGoroutine(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newMemStore(3 * time.Second)
		s, err := lock.NewSession(f)
		if err != nil {
			t.Fatal(err)
		}
		mustLock(t, context.Background(), newMutex(t, s, "a"))
		f.Pause(locktest.OpRenew)
		time.Sleep(s.Timings().RenewInterval + time.Millisecond) // a renewal hangs
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if f.HeldBy("a") != "" {
			t.Fatal("lock held after Close")
		}
		empty, err := lock.NewSession(f)
		if err != nil {
			t.Fatal(err)
		}
		calls := len(f.Calls())
		if err := empty.Close(); err != nil || len(f.Calls()) != calls {
			t.Fatalf("Close of an empty Session: %v, %d calls", err, len(f.Calls())-calls)
		}
	})
}

// TestCloseIsBounded: a Session whose server is gone closes within its
// release timeout, reporting the failure and saying what bounded it.
func TestCloseIsBounded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newMemStore(3 * time.Second)
		s, err := lock.NewSession(f, lock.WithReleaseTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		mustLock(t, context.Background(), newMutex(t, s, "a"))
		f.Pause(locktest.OpRelease)
		start := time.Now()
		err = s.Close()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close with the server gone: %v, want a deadline error", err)
		}
		if !strings.Contains(err.Error(), "not released within the release timeout (1s); they expire with their leases") {
			t.Errorf("Close's error does not say what bounded it: %v", err)
		}
		if took := time.Since(start); took != time.Second {
			t.Fatalf("Close took %v, want the release timeout", took)
		}
	})
}

func TestSessionDefaults(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ttl  time.Duration
		want lock.Timings
	}{
		{lock.DefaultTTL, lock.Timings{TTL: lock.DefaultTTL, RenewInterval: lock.DefaultRenewInterval,
			RenewDeadline: lock.DefaultRenewDeadline, RetryPeriod: lock.DefaultRetryPeriod}},
		{3 * time.Second, lock.Timings{TTL: 3 * time.Second, RenewInterval: time.Second,
			RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}},
	} {
		s := newSession(t, newMemStore(c.ttl))
		if got := s.Timings(); got != c.want {
			t.Errorf("TTL %v: timings %+v, want %+v", c.ttl, got, c.want)
		}
		if s.ReleaseTimeout() != lock.DefaultReleaseTimeout || s.KeeperID() == "" || s.Clock() == nil {
			t.Errorf("release timeout %v, keeper %q, clock %v", s.ReleaseTimeout(), s.KeeperID(), s.Clock())
		}
	}
	s := newSession(t, newMemStore(3*time.Second), lock.WithKeeperID("me"), lock.WithRetryPeriod(time.Second),
		lock.WithRenewInterval(500*time.Millisecond), lock.WithRenewDeadline(2700*time.Millisecond))
	want := lock.Timings{TTL: 3 * time.Second, RenewInterval: 500 * time.Millisecond, RenewDeadline: 2700 * time.Millisecond, RetryPeriod: time.Second}
	if s.KeeperID() != "me" || s.Timings() != want || s.Timings().SafetyMargin() != 300*time.Millisecond {
		t.Errorf("keeper %q, timings %+v", s.KeeperID(), s.Timings())
	}
	if a, b := newSession(t, newMemStore(time.Second)), newSession(t, newMemStore(time.Second)); a.KeeperID() == b.KeeperID() {
		t.Error("two Sessions got one keeper id")
	}
}

// TestNewSessionRejectsBadOptions: each bad option gives an error that
// wraps ErrInvalidOption and names the option; no Session is made.
func TestNewSessionRejectsBadOptions(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second // defaults: renew interval 1s, deadline 2s
	cases := []struct {
		name string
		opts []lock.SessionOption
		want string
	}{
		{"empty keeper id", []lock.SessionOption{lock.WithKeeperID("")}, "WithKeeperID"},
		{"long keeper id", []lock.SessionOption{lock.WithKeeperID(strings.Repeat("k", lock.MaxIDLength+1))}, "WithKeeperID"},
		{"invalid utf8 keeper id", []lock.SessionOption{lock.WithKeeperID("k\xff")}, "WithKeeperID"},
		{"nul keeper id", []lock.SessionOption{lock.WithKeeperID("k\x00")}, "WithKeeperID"},
		{"zero renew interval", []lock.SessionOption{lock.WithRenewInterval(0)}, "WithRenewInterval"},
		{"negative renew interval", []lock.SessionOption{lock.WithRenewInterval(-time.Second)}, "WithRenewInterval"},
		{"zero renew deadline", []lock.SessionOption{lock.WithRenewDeadline(0)}, "WithRenewDeadline"},
		{"zero retry period", []lock.SessionOption{lock.WithRetryPeriod(0)}, "WithRetryPeriod"},
		{"negative retry period", []lock.SessionOption{lock.WithRetryPeriod(-1)}, "WithRetryPeriod"},
		{"zero release timeout", []lock.SessionOption{lock.WithReleaseTimeout(0)}, "WithReleaseTimeout"},
		{"zero grace period", []lock.SessionOption{lock.WithGracePeriod(0)}, "WithGracePeriod"},
		{"nil observer", []lock.SessionOption{lock.WithObserver(nil)}, "WithObserver"},
		{"nil option", []lock.SessionOption{nil}, "nil option"},
		{"renew interval = deadline", []lock.SessionOption{lock.WithRenewInterval(2 * time.Second)}, "WithRenewInterval"},
		{"renew interval > deadline", []lock.SessionOption{lock.WithRenewInterval(1500 * time.Millisecond),
			lock.WithRenewDeadline(1200 * time.Millisecond)}, "WithRenewInterval"},
		{"margin under a tenth of the TTL", []lock.SessionOption{lock.WithRenewDeadline(2701 * time.Millisecond)}, "WithRenewDeadline"},
		{"deadline = TTL", []lock.SessionOption{lock.WithRenewDeadline(ttl)}, "WithRenewDeadline"},
		{"deadline past the TTL", []lock.SessionOption{lock.WithRenewDeadline(2 * ttl)}, "WithRenewDeadline"},
		{"no retry before the deadline", []lock.SessionOption{lock.WithRetryPeriod(time.Second)}, "WithRetryPeriod"},
	}
	for _, c := range cases {
		s, err := lock.NewSession(newMemStore(ttl), c.opts...)
		if s != nil || !errors.Is(err, lock.ErrInvalidOption) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalidOption naming %s", c.name, err, c.want)
		}
		if strings.Contains(c.name, "keeper id") && !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("%s: %v, want it to wrap ErrInvalidArgument too", c.name, err)
		}
	}
	// The margin must be at least MinSafetyMargin even where a tenth of
	// the TTL is less.
	if _, err := lock.NewSession(newMemStore(500*time.Millisecond), lock.WithRenewDeadline(401*time.Millisecond),
		lock.WithRenewInterval(100*time.Millisecond)); !errors.Is(err, lock.ErrInvalidOption) || !strings.Contains(err.Error(), "WithRenewDeadline") {
		t.Errorf("margin under MinSafetyMargin: %v", err)
	}
	// At exactly the smallest margin it is fine.
	newSession(t, newMemStore(ttl), lock.WithRenewDeadline(2700*time.Millisecond))
	newSession(t, newMemStore(500*time.Millisecond), lock.WithRenewDeadline(400*time.Millisecond), lock.WithRenewInterval(100*time.Millisecond))

	// Bad stores.
	var nilLocker *lock.Locker
	for name, store := range map[string]lock.Store{
		"nil store":           nil,
		"nil *Locker":         nilLocker,
		"store without TTL":   noTTL{newMemStore(ttl)},
		"store without clock": noClock{newMemStore(ttl)},
	} {
		if s, err := lock.NewSession(store); s != nil || !errors.Is(err, lock.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
}

// TestSessionRejectsBadArguments: bad lock ids and a nil function are
// rejected with an error naming the argument, without a round trip.
func TestSessionRejectsBadArguments(t *testing.T) {
	t.Parallel()
	client, counter := mongotest.CountingClient(t)
	l, err := lock.New(mongotest.Database(t, client, newDB(t)))
	if err != nil {
		t.Fatal(err)
	}
	s := newSession(t, l)
	ctx := testCtx(t, 30*time.Second)
	bad := map[string]string{
		"empty":        "",
		"too long":     strings.Repeat("x", lock.MaxIDLength+1),
		"invalid utf8": "a\xffb",
		"nul byte":     "a\x00b",
	}
	noop := func(context.Context) error { return nil }
	ops := map[string]struct {
		call func(id string) error
		arg  string
	}{
		"Mutex":        {func(id string) error { _, err := s.Mutex(id); return err }, "lockID"},
		"Do":           {func(id string) error { return s.Do(ctx, id, noop) }, "lockID"},
		"AcquireLocks": {func(id string) error { _, err := s.AcquireLocks(ctx, "ok", id); return err }, "lockIDs[1]"},
		"Holder":       {func(id string) error { _, err := s.Holder(ctx, id); return err }, "lockID"},
	}
	counter.Reset()
	for opName, op := range ops {
		for what, id := range bad {
			err := op.call(id)
			if !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), op.arg) {
				t.Errorf("%s with %s id: %v, want ErrInvalidArgument naming %s", opName, what, err, op.arg)
			}
		}
	}
	if err := s.Do(ctx, "ok", nil); !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil function") {
		t.Errorf("Do with a nil function: %v, want ErrInvalidArgument", err)
	}
	if taken, err := s.AcquireLocks(ctx); err != nil || len(taken.Leases)+len(taken.Refused)+len(taken.Untrusted) != 0 {
		t.Errorf("AcquireLocks of nothing: %+v %v", taken, err)
	}
	if err := s.ReleaseLocks(ctx, nil); err != nil {
		t.Errorf("ReleaseLocks of a nil lease: %v", err)
	}
	expired, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	if _, err := newMutex(t, s, "w").Lock(expired); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock with a deadline in the past: %v, want context.DeadlineExceeded", err)
	}
	if n := counter.Total(); n != 0 {
		t.Errorf("bad arguments sent %d commands", n)
	}
}

// noTTL and noClock are stores NewSession must refuse.
type (
	noTTL   struct{ *locktest.Store }
	noClock struct{ *locktest.Store }
)

func (noTTL) TTL() time.Duration       { return 0 }
func (noClock) Clock() clockwork.Clock { return nil }

// TestReleasingLockTakenAgain: a lock whose release this Session is still
// sending (a lost reply, retried until the release timeout) is no longer
// held here: the Session takes it again at once, in a new term, and the
// release still on its way frees only the old term (sim seed 1253: the
// scheduler took its own release for a run still going, and recorded the
// next two firings of the job as not run).
func TestReleasingLockTakenAgain(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newMemStore(3 * time.Second)
		s := newSession(t, f, lock.WithReleaseTimeout(2*time.Second))
		take := func() (*lock.Lease, error) {
			got, err := s.AcquireLocks(context.Background(), "a")
			if err != nil || len(got.Leases) == 0 {
				return nil, err
			}
			return got.Leases[0], nil
		}
		old, err := take()
		if err != nil || old == nil {
			t.Fatalf("acquire: %v", err)
		}
		f.FailAfter(locktest.OpRelease, -1, nil) // each release applies, its reply is lost
		released := make(chan error, 1)
		go func() { released <- s.ReleaseLocks(context.Background(), old) }()
		synctest.Wait() // the release is being retried
		select {
		case err := <-released:
			t.Fatalf("the release ended at once: %v", err)
		default:
		}
		l, err := take()
		if err != nil || l == nil {
			<-released
			t.Fatalf("acquire while the release of the last term is retried: %v, want it taken", err)
		}
		if l.Fence() <= old.Fence() {
			t.Errorf("fence %d after %d", l.Fence(), old.Fence())
		}
		if err := <-released; err == nil {
			t.Error("the release whose replies were all lost reported success")
		}
		f.Restore()
		if got := f.HeldBy("a"); got != s.KeeperID() || l.Err() != nil {
			t.Fatalf("after the old term's release ended: held by %q (lease err %v), want this Session's new term", got, l.Err())
		}
		// The slot is the new lease's: the same Session refuses it, and
		// frees it on its release.
		if again, _ := take(); again != nil {
			t.Error("a lock held in this Session taken twice")
		}
		if err := s.ReleaseLocks(context.Background(), l); err != nil {
			t.Fatal(err)
		}
		if again, err := take(); again == nil {
			t.Errorf("not taken after its release: %v", err)
		}
	})
}
