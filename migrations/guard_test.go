package migrations

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jonboulle/clockwork"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
)

// Recorder is an Observer that keeps the events and lets a test wait for
// them. It is exported for the tests of package migrations_test.
type Recorder struct {
	mu      sync.Mutex
	events  []lock.Event
	changed chan struct{} // closed at the next event
}

func NewRecorder() *Recorder { return &Recorder{changed: make(chan struct{})} }

func (r *Recorder) Observe(e lock.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	close(r.changed)
	r.changed = make(chan struct{})
}

// Of returns the events of the given kinds, in order.
func (r *Recorder) Of(kinds ...lock.EventKind) []lock.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []lock.Event
	for _, e := range r.events {
		if slices.Contains(kinds, e.Kind) {
			out = append(out, e)
		}
	}
	return out
}

// WaitFor waits until there are n events of the given kinds, and returns
// them.
func (r *Recorder) WaitFor(ctx context.Context, n int, kinds ...lock.EventKind) ([]lock.Event, error) {
	for {
		r.mu.Lock()
		ch := r.changed
		r.mu.Unlock()
		if evs := r.Of(kinds...); len(evs) >= n {
			return evs, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %d events %v: %w", n, kinds, ctx.Err())
		}
	}
}

const fakeTTL = 30 * time.Second // session timings: renew interval 10s, deadline 20s, retry 2s

// newMemStore returns an in-memory lock store of fakeTTL on clk.
func newMemStore(clk clockwork.Clock) *locktest.Store {
	return locktest.New(locktest.WithClock(clk), locktest.WithTTL(fakeTTL))
}

// fakeMigrator returns a Migrator holding its lock through a real Session
// on store, with keeper id "me", a wait of 10s and a retry period of 1s,
// and the recorder of the Session's events.
func fakeMigrator(t *testing.T, store *locktest.Store, opts ...Option) (*Migrator, *lock.Session, *Recorder) {
	t.Helper()
	rec := NewRecorder()
	s, err := lock.NewSession(store, lock.WithKeeperID("me"), lock.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	cfg, err := configure(append([]Option{WithSession(s), WithWait(10 * time.Second), WithRetryPeriod(time.Second)}, opts...))
	if err != nil {
		t.Fatal(err)
	}
	return &Migrator{cfg: cfg}, s, rec
}

// inBubble runs f in a synctest bubble with a fake clock, and a context
// that ends after 20s of the bubble's time. synctest.Wait tells when every
// goroutine (the migrator, the Session's keep-alive) is parked, so the test
// moves the fake clock only then, and timers are armed at the instants the
// code computed.
func inBubble(t *testing.T, f func(t *testing.T, ctx context.Context, clk *clockwork.FakeClock)) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		f(t, ctx, clockwork.NewFakeClock())
	})
}

// advance moves clk by d once every other goroutine is parked, and waits
// until what that set off is done.
func advance(clk *clockwork.FakeClock, d time.Duration) {
	synctest.Wait()
	clk.Advance(d)
	synctest.Wait()
}

func notSettled(context.Context) (bool, error) { return false, nil }

func TestGuardedKeepsLeaseAlive(t *testing.T) {
	inBubble(t, func(t *testing.T, ctx context.Context, clk *clockwork.FakeClock) {
		fs := newMemStore(clk)
		m, s, _ := fakeMigrator(t, fs)
		ti := s.Timings()

		start := clk.Now()
		var deadlines []time.Time
		_, err := m.guarded(ctx, notSettled, func(runCtx context.Context, r run) error {
			lease, ok := lock.LeaseFrom(runCtx)
			if !ok || lease.Fence() != r.fence {
				return errors.New("the work's context does not carry the lease")
			}
			for range 5 {
				deadlines = append(deadlines, lease.Deadline())
				advance(clk, ti.RenewInterval)
				if runCtx.Err() != nil {
					return context.Cause(runCtx)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		renewals := fs.Calls(locktest.OpRenew)
		if len(renewals) != 5 {
			t.Fatalf("renewed %d times, want 5", len(renewals))
		}
		for i, c := range renewals {
			r := c.Start
			if want := start.Add(time.Duration(i+1) * ti.RenewInterval); !r.Equal(want) {
				t.Errorf("renewal %d at %v, want a renew interval after the last one, %v", i, r.Sub(start), want.Sub(start))
			}
			if !r.Before(deadlines[i]) {
				t.Errorf("renewal %d at %v, not before the lease's deadline %v", i, r.Sub(start), deadlines[i].Sub(start))
			}
		}
		if rel := fs.Calls(locktest.OpRelease); len(rel) != 1 || rel[0].Released != 1 || fs.HeldBy(DefaultLockID) != "" {
			t.Errorf("releases %+v, holder %q; want the lock released once", rel, fs.HeldBy(DefaultLockID))
		}
	})
}

func TestGuardedCancelsWhenLost(t *testing.T) {
	inBubble(t, func(t *testing.T, ctx context.Context, clk *clockwork.FakeClock) {
		fs := newMemStore(clk)
		m, s, _ := fakeMigrator(t, fs)

		_, err := m.guarded(ctx, notSettled, func(runCtx context.Context, _ run) error {
			fs.TakeOver(DefaultLockID, "other")
			advance(clk, s.Timings().RenewInterval)
			select {
			case <-runCtx.Done():
				return context.Cause(runCtx)
			default:
				return errors.New("run context was not cancelled when a renewal found the lock lost")
			}
		})
		if !errors.Is(err, lock.ErrLeaseLost) {
			t.Fatalf("err = %v, want lock.ErrLeaseLost", err)
		}
	})
}

// While renewals fail, the work's context is cancelled with cause
// lock.ErrLeaseLost at the renew deadline: a safety margin before the
// lease's deadline, when another migrator could take the lock over.
func TestGuardedCancelsBeforeLeaseDeadline(t *testing.T) {
	inBubble(t, func(t *testing.T, ctx context.Context, clk *clockwork.FakeClock) {
		fs := newMemStore(clk)
		fs.Fail(locktest.OpRenew, locktest.Always, errors.New("network down"))
		m, s, _ := fakeMigrator(t, fs)
		ti := s.Timings()

		start := clk.Now()
		var cancelledAt time.Time
		_, err := m.guarded(ctx, notSettled, func(runCtx context.Context, _ run) error {
			for runCtx.Err() == nil && clk.Since(start) < fakeTTL {
				advance(clk, 100*time.Millisecond)
			}
			cancelledAt = clk.Now()
			return context.Cause(runCtx)
		})
		if !errors.Is(err, lock.ErrLeaseLost) {
			t.Fatalf("err = %v, want lock.ErrLeaseLost", err)
		}
		// The lease expires a TTL after the acquisition was sent at the
		// earliest: nobody else can take the lock before.
		leaseDeadline := fs.Calls(locktest.OpAcquire)[0].Start.Add(fakeTTL)
		switch {
		case cancelledAt.Sub(start) < ti.RenewDeadline:
			t.Errorf("cancelled %v after acquiring, before the renew deadline %v", cancelledAt.Sub(start), ti.RenewDeadline)
		case leaseDeadline.Sub(cancelledAt) < ti.SafetyMargin():
			t.Errorf("cancelled %v before the lease deadline, want at least the safety margin %v",
				leaseDeadline.Sub(cancelledAt), ti.SafetyMargin())
		}
		if n := len(fs.Calls(locktest.OpRenew)); n < 3 {
			t.Errorf("renewal attempted %d times, want retries", n)
		}
	})
}

// guardedAsync runs m.guarded in a goroutine and returns what it returns.
func guardedAsync(ctx context.Context, m *Migrator, settled func(context.Context) (bool, error),
	work func(context.Context, run) error) <-chan result {
	done := make(chan result, 1)
	go func() {
		waited, err := m.guarded(ctx, settled, work)
		done <- result{waited, err}
	}()
	return done
}

type result struct {
	waited time.Duration
	err    error
}

func TestGuardedWaitsUntilSettled(t *testing.T) {
	inBubble(t, func(t *testing.T, ctx context.Context, clk *clockwork.FakeClock) {
		fs := newMemStore(clk)
		fs.TakeOver(DefaultLockID, "other")
		m, _, rec := fakeMigrator(t, fs)

		polls := 0
		settled := func(context.Context) (bool, error) {
			polls++
			return polls == 3, nil
		}
		done := guardedAsync(ctx, m, settled, func(context.Context, run) error {
			return errors.New("work ran although the other migrator did it")
		})
		for range 2 {
			advance(clk, time.Second) // the retry period: the longest pause
		}
		res := <-done
		if res.err != nil {
			t.Fatal(res.err)
		}
		if res.waited != 2*time.Second {
			t.Errorf("waited %v, want 2s", res.waited)
		}
		evs := rec.Of(lock.MigrationWaited)
		if len(evs) != 1 || evs[0].Took != res.waited || evs[0].Reason != "done by another migrator" || evs[0].Err != nil ||
			evs[0].LockID != DefaultLockID || evs[0].KeeperID != "me" {
			t.Errorf("waited events %+v, want one of %v, done by another migrator", evs, res.waited)
		}
		if got := rec.Of(lock.Acquired, lock.MigrationApplied); len(got) != 0 {
			t.Errorf("events %+v, want no lock taken", got)
		}
	})
}

func TestGuardedTakesLockWhenFreed(t *testing.T) {
	inBubble(t, func(t *testing.T, ctx context.Context, clk *clockwork.FakeClock) {
		fs := newMemStore(clk)
		fs.TakeOver(DefaultLockID, "other")
		m, _, rec := fakeMigrator(t, fs)

		ran := false
		done := guardedAsync(ctx, m, notSettled, func(context.Context, run) error {
			ran = true
			return nil
		})
		synctest.Wait()
		fs.ForceRelease(DefaultLockID)
		advance(clk, time.Second)
		if res := <-done; res.err != nil {
			t.Fatal(res.err)
		}
		if !ran {
			t.Error("work did not run after the lock was freed")
		}
		evs := rec.Of(lock.MigrationWaited)
		if len(evs) != 1 || evs[0].Took != time.Second || evs[0].Reason != "lock acquired" || evs[0].Fence != 2 { // other's term had 1
			t.Errorf("waited events %+v, want one of 1s ending with the lock acquired", evs)
		}
	})
}

func TestGuardedGivesUp(t *testing.T) {
	inBubble(t, func(t *testing.T, ctx context.Context, clk *clockwork.FakeClock) {
		fs := newMemStore(clk)
		fs.TakeOver(DefaultLockID, "other")
		m, _, rec := fakeMigrator(t, fs, WithWait(2500*time.Millisecond))

		ran := false
		done := guardedAsync(ctx, m, notSettled, func(context.Context, run) error {
			ran = true
			return nil
		})
		for range 3 {
			advance(clk, time.Second)
		}
		res := <-done
		if !errors.Is(res.err, ErrWaitTimeout) || ran {
			t.Fatalf("err = %v, work ran: %v; want ErrWaitTimeout", res.err, ran)
		}
		evs := rec.Of(lock.MigrationWaited)
		if len(evs) != 1 || !errors.Is(evs[0].Err, ErrWaitTimeout) || evs[0].Took != 3*time.Second {
			t.Errorf("waited events %+v, want one of 3s with ErrWaitTimeout", evs)
		}
	})
}

func TestGuardedSettledError(t *testing.T) {
	inBubble(t, func(t *testing.T, ctx context.Context, clk *clockwork.FakeClock) {
		fs := newMemStore(clk)
		fs.TakeOver(DefaultLockID, "other")
		m, _, _ := fakeMigrator(t, fs)
		boom := errors.New("boom")
		_, err := m.guarded(ctx, func(context.Context) (bool, error) { return false, boom },
			func(context.Context, run) error { return nil })
		if !errors.Is(err, boom) {
			t.Fatalf("err = %v, want boom", err)
		}
	})
}

// timerClock records the duration of every timer made on a fake clock.
type timerClock struct {
	*clockwork.FakeClock
	mu     sync.Mutex
	timers []time.Duration
}

func (c *timerClock) NewTimer(d time.Duration) clockwork.Timer {
	c.mu.Lock()
	c.timers = append(c.timers, d)
	c.mu.Unlock()
	return c.FakeClock.NewTimer(d)
}

// A waiting migrator polls with pauses that start at a sixteenth of the
// retry period and double, with jitter, up to it and no further.
func TestGuardedPollsWithBackoff(t *testing.T) {
	inBubble(t, func(t *testing.T, ctx context.Context, fake *clockwork.FakeClock) {
		clk := &timerClock{FakeClock: fake}
		fs := newMemStore(clk)
		fs.TakeOver(DefaultLockID, "other")
		const retry = 800 * time.Millisecond
		m, _, _ := fakeMigrator(t, fs, WithRetryPeriod(retry), WithWait(time.Hour))

		polls := 0
		settled := func(context.Context) (bool, error) {
			polls++
			return polls == 9, nil
		}
		done := guardedAsync(ctx, m, settled, func(context.Context, run) error { return nil })
		for range 8 {
			advance(fake, retry)
		}
		if res := <-done; res.err != nil {
			t.Fatal(res.err)
		}
		clk.mu.Lock()
		defer clk.mu.Unlock()
		if len(clk.timers) != 8 {
			t.Fatalf("%d pauses %v, want 8", len(clk.timers), clk.timers)
		}
		nominal := retry / 16
		for i, d := range clk.timers {
			if d > nominal || d < nominal*8/10 {
				t.Errorf("pause %d: %v, want from 80%% of %v to %v", i+1, d, nominal, nominal)
			}
			nominal = min(2*nominal, retry)
		}
	})
}

// TestClaimOfMigrationAppliedMeanwhile: a migrator whose read of the
// records is older than the outcome of the migrator before it (whose
// lease lapsed, but whose fenced record still held) finds the migration
// applied when it claims it, and moves on instead of running it again.
// The simulation (internal/sim) saw a migration run twice so.
func TestClaimOfMigrationAppliedMeanwhile(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	ctx := context.Background()
	mig := Migration{Version: 1, Description: "one", Definition: "one", Up: func(context.Context, *mongo.Database) error { return nil }}
	m, err := New(db, WithMigrations(mig))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.claim(ctx, mig, "a", 1, true); err != nil {
		t.Fatal(err)
	}
	if err := m.finish(ctx, mig, 1, time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	if err := m.claim(ctx, mig, "b", 2, true); !errors.Is(err, errAppliedMeanwhile) {
		t.Fatalf("claim of an applied migration: %v, want errAppliedMeanwhile", err)
	}
	if err := m.claim(ctx, mig, "b", 2, false); err != nil {
		t.Fatalf("claim of an applied migration to roll it back: %v", err)
	}
}
