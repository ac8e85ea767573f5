package migrations

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/lock"
)

// fakeStore is a lock.Store for one lock, on a fake clock. A lease it
// grants lasts the TTL from the acquisition or the last renewal.
type fakeStore struct {
	clock clockwork.Clock
	ttl   time.Duration

	mu       sync.Mutex
	holder   string
	fence    uint64
	renewErr error // returned by Renew while set
	lose     bool  // Renew reports the lock lost
	grants   []lock.Grant
	renewals []time.Time
	released int
}

var _ lock.Store = (*fakeStore)(nil)

func newFakeStore(clk clockwork.Clock, ttl time.Duration) *fakeStore {
	return &fakeStore{clock: clk, ttl: ttl}
}

func (f *fakeStore) AcquireLocks(_ context.Context, keeperID string, lockIDs ...string) (lock.Acquisition, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	var a lock.Acquisition
	for _, id := range lockIDs {
		if f.holder != "" && f.holder != keeperID {
			a.Refused = append(a.Refused, id)
			continue
		}
		f.holder = keeperID
		f.fence++
		g := lock.Grant{LockID: id, KeeperID: keeperID, Fence: f.fence, AcquiredAt: now, Deadline: now.Add(f.ttl), Sent: now}
		f.grants = append(f.grants, g)
		a.Granted = append(a.Granted, g)
	}
	return a, nil
}

func (f *fakeStore) Renew(_ context.Context, keeperID string, lockIDs ...string) (lock.Renewal, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	f.renewals = append(f.renewals, now)
	switch {
	case f.renewErr != nil:
		return lock.Renewal{}, f.renewErr
	case f.lose || f.holder != keeperID:
		return lock.Renewal{Lost: lockIDs}, nil
	}
	return lock.Renewal{Held: lockIDs, Deadline: now.Add(f.ttl)}, nil
}

func (f *fakeStore) ReleaseTerms(_ context.Context, keeperID string, terms ...lock.Term) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.holder != keeperID || len(terms) == 0 || terms[0].Fence != 0 && terms[0].Fence != f.fence {
		return 0, nil
	}
	f.holder = ""
	f.released++
	return 1, nil
}

func (f *fakeStore) Holder(_ context.Context, lockID string) (lock.Holder, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.holder == "" {
		return lock.Holder{}, fmt.Errorf("holder of %q: %w", lockID, lock.ErrNotHeld)
	}
	return lock.Holder{LockID: lockID, KeeperID: f.holder, Fence: f.fence}, nil
}

func (f *fakeStore) TTL() time.Duration     { return f.ttl }
func (f *fakeStore) Clock() clockwork.Clock { return f.clock }

func (f *fakeStore) set(fn func(f *fakeStore)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

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

// fakeMigrator returns a Migrator holding its lock through a real Session
// on store, with keeper id "me", a wait of 10s and a retry period of 1s,
// and the recorder of the Session's events.
func fakeMigrator(t *testing.T, store *fakeStore, opts ...Option) (*Migrator, *lock.Session, *Recorder) {
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
		fs := newFakeStore(clk, fakeTTL)
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
		fs.mu.Lock()
		defer fs.mu.Unlock()
		if len(fs.renewals) != 5 {
			t.Fatalf("renewed %d times, want 5", len(fs.renewals))
		}
		for i, r := range fs.renewals {
			if want := start.Add(time.Duration(i+1) * ti.RenewInterval); !r.Equal(want) {
				t.Errorf("renewal %d at %v, want a renew interval after the last one, %v", i, r.Sub(start), want.Sub(start))
			}
			if !r.Before(deadlines[i]) {
				t.Errorf("renewal %d at %v, not before the lease's deadline %v", i, r.Sub(start), deadlines[i].Sub(start))
			}
		}
		if fs.released != 1 || fs.holder != "" {
			t.Errorf("released %d times, holder %q; want the lock released once", fs.released, fs.holder)
		}
	})
}

func TestGuardedCancelsWhenLost(t *testing.T) {
	inBubble(t, func(t *testing.T, ctx context.Context, clk *clockwork.FakeClock) {
		fs := newFakeStore(clk, fakeTTL)
		fs.lose = true
		m, s, _ := fakeMigrator(t, fs)

		_, err := m.guarded(ctx, notSettled, func(runCtx context.Context, _ run) error {
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
		fs := newFakeStore(clk, fakeTTL)
		fs.renewErr = errors.New("network down")
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
		fs.mu.Lock()
		defer fs.mu.Unlock()
		leaseDeadline := fs.grants[0].Deadline // nobody else can take the lock before
		switch {
		case cancelledAt.Sub(start) < ti.RenewDeadline:
			t.Errorf("cancelled %v after acquiring, before the renew deadline %v", cancelledAt.Sub(start), ti.RenewDeadline)
		case leaseDeadline.Sub(cancelledAt) < ti.SafetyMargin():
			t.Errorf("cancelled %v before the lease deadline, want at least the safety margin %v",
				leaseDeadline.Sub(cancelledAt), ti.SafetyMargin())
		}
		if len(fs.renewals) < 3 {
			t.Errorf("renewal attempted %d times, want retries", len(fs.renewals))
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
		fs := newFakeStore(clk, fakeTTL)
		fs.holder = "other"
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
		fs := newFakeStore(clk, fakeTTL)
		fs.holder = "other"
		m, _, rec := fakeMigrator(t, fs)

		ran := false
		done := guardedAsync(ctx, m, notSettled, func(context.Context, run) error {
			ran = true
			return nil
		})
		synctest.Wait()
		fs.set(func(f *fakeStore) { f.holder = "" })
		advance(clk, time.Second)
		if res := <-done; res.err != nil {
			t.Fatal(res.err)
		}
		if !ran {
			t.Error("work did not run after the lock was freed")
		}
		evs := rec.Of(lock.MigrationWaited)
		if len(evs) != 1 || evs[0].Took != time.Second || evs[0].Reason != "lock acquired" || evs[0].Fence != 1 {
			t.Errorf("waited events %+v, want one of 1s ending with the lock acquired", evs)
		}
	})
}

func TestGuardedGivesUp(t *testing.T) {
	inBubble(t, func(t *testing.T, ctx context.Context, clk *clockwork.FakeClock) {
		fs := newFakeStore(clk, fakeTTL)
		fs.holder = "other"
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
		fs := newFakeStore(clk, fakeTTL)
		fs.holder = "other"
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
		fs := newFakeStore(clk, fakeTTL)
		fs.holder = "other"
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

func TestPrepareRejects(t *testing.T) {
	t.Parallel()
	up := func(context.Context, *mongo.Database) error { return nil }
	tests := []struct {
		name string
		migs []Migration
		want string
	}{
		{"no version", []Migration{{Definition: "x", Up: up}}, "no version"},
		{"duplicate", []Migration{{Version: 1, Definition: "x", Up: up}, {Version: 1, Definition: "y", Up: up}}, "version 1 is used"},
		{"no up", []Migration{{Version: 1, Definition: "x"}}, "has no Up"},
		{"no definition", []Migration{{Version: 1, Up: up}}, "no Definition"},
		{"no keys", []Migration{EnsureIndex(1, Index{Collection: "c"})}, "no keys"},
		{"bad collection", []Migration{EnsureIndex(1, Index{Collection: "a$b", Keys: bson.D{{Key: "a", Value: 1}}})}, "invalid collection"},
		{"bad key value", []Migration{EnsureIndex(1, Index{Collection: "c", Keys: bson.D{{Key: "a", Value: 2}}})}, "not 1 or -1"},
		{"text key", []Migration{EnsureIndex(1, Index{Collection: "c", Keys: bson.D{{Key: "a", Value: "text"}}})}, "not supported"},
		{"repeated key", []Migration{EnsureIndex(1, Index{Collection: "c", Keys: bson.D{{Key: "a", Value: 1}, {Key: "a", Value: -1}}})}, "twice"},
		{"negative ttl", []Migration{EnsureIndex(1, Index{Collection: "c", Keys: bson.D{{Key: "a", Value: 1}}, ExpireAfterSeconds: TTL(-time.Second)})}, "negative"},
		{"reserved name", []Migration{EnsureIndex(1, Index{Collection: "c", Name: "_id_", Keys: bson.D{{Key: "a", Value: 1}}})}, "reserved"},
		{"drop all", []Migration{DropIndex(1, "c", "*")}, "invalid index name"},
		{"lock collection", []Migration{LockIndexes("a$b")}, "invalid lock collection name"},
		{"history retention", []Migration{SchedulerIndexes("runs", time.Millisecond)}, "at least 1s"},
		{"runs collection", []Migration{SchedulerIndexes("", time.Hour)}, "invalid scheduler runs collection"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := prepare(tt.migs)
			if !errors.Is(err, ErrInvalidMigration) || !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrInvalidMigration (and lock.ErrInvalidArgument) containing %q", err, tt.want)
			}
		})
	}
}

func TestPrepareSorts(t *testing.T) {
	t.Parallel()
	up := func(context.Context, *mongo.Database) error { return nil }
	got, err := prepare([]Migration{{Version: 3, Definition: "c", Up: up}, {Version: -1, Definition: "a", Up: up}, {Version: 2, Definition: "b", Up: up}})
	if err != nil {
		t.Fatal(err)
	}
	var vs []int64
	for _, m := range got {
		vs = append(vs, m.Version)
	}
	if !slices.Equal(vs, []int64{-1, 2, 3}) {
		t.Fatalf("order %v, want [-1 2 3]", vs)
	}
}

func TestIndexChecksum(t *testing.T) {
	t.Parallel()
	base := Index{Collection: "c", Keys: bson.D{{Key: "a", Value: 1}, {Key: "b", Value: -1}}}
	sum := EnsureIndex(1, base).Checksum()

	same := base
	same.Keys = bson.D{{Key: "a", Value: int64(1)}, {Key: "b", Value: -1.0}}
	same.Name = "a_1_b_-1"
	same.AllowRebuild = true
	if got := EnsureIndex(1, same).Checksum(); got != sum {
		t.Errorf("numeric types, default name or AllowRebuild changed the checksum")
	}
	for name, mod := range map[string]func(*Index){
		"unique":     func(ix *Index) { ix.Unique = true },
		"sparse":     func(ix *Index) { ix.Sparse = true },
		"ttl":        func(ix *Index) { ix.ExpireAfterSeconds = TTL(time.Hour) },
		"hidden":     func(ix *Index) { ix.Hidden = true },
		"partial":    func(ix *Index) { ix.PartialFilter = bson.D{{Key: "a", Value: bson.D{{Key: "$gt", Value: 1}}}} },
		"key order":  func(ix *Index) { ix.Keys = bson.D{{Key: "b", Value: -1}, {Key: "a", Value: 1}} },
		"direction":  func(ix *Index) { ix.Keys = bson.D{{Key: "a", Value: 1}, {Key: "b", Value: 1}} },
		"name":       func(ix *Index) { ix.Name = "other" },
		"collection": func(ix *Index) { ix.Collection = "d" },
	} {
		ix := base
		mod(&ix)
		if EnsureIndex(1, ix).Checksum() == sum {
			t.Errorf("changing %s did not change the checksum", name)
		}
	}
	if a, b := LockIndexes("locks"), LockIndexes("other"); a.Checksum() == b.Checksum() {
		t.Error("the lock collection is not part of the built-in migration's checksum")
	}
	if a, b := SchedulerIndexes("runs", time.Hour), SchedulerIndexes("runs", 2*time.Hour); a.Checksum() == b.Checksum() {
		t.Error("the history retention is not part of the built-in migration's checksum")
	}
}

func i64(n int64) *int64 { return &n }

func TestIndexDecide(t *testing.T) {
	t.Parallel()
	spec := func(ix Index) indexSpec {
		ix.Collection = "c"
		if ix.Keys == nil {
			ix.Keys = bson.D{{Key: "a", Value: 1}}
		}
		s, err := ix.check()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	keysA := []keyPart{{Field: "a", Num: 1}}
	keysB := []keyPart{{Field: "b", Num: 1}}
	tests := []struct {
		name     string
		want     Index
		existing []existingIndex
		kind     actionKind
		ttl      *int32
		hidden   *bool
		errText  string
	}{
		{name: "absent", want: Index{}, kind: actCreate},
		{name: "same", want: Index{}, existing: []existingIndex{{Name: "a_1", Keys: keysA}}, kind: actNone},
		{name: "ttl changed", want: Index{ExpireAfterSeconds: TTL(time.Minute)}, existing: []existingIndex{{Name: "a_1", Keys: keysA, TTL: i64(30)}}, kind: actModify, ttl: TTL(time.Minute)},
		{name: "ttl added", want: Index{ExpireAfterSeconds: TTL(time.Minute)}, existing: []existingIndex{{Name: "a_1", Keys: keysA}}, kind: actModify, ttl: TTL(time.Minute)},
		{name: "ttl removed", want: Index{}, existing: []existingIndex{{Name: "a_1", Keys: keysA, TTL: i64(30)}}, kind: actConflict, errText: "expireAfterSeconds 30 -> none"},
		{name: "hidden", want: Index{Hidden: true}, existing: []existingIndex{{Name: "a_1", Keys: keysA}}, kind: actModify, hidden: new(true)},
		{name: "unhidden", want: Index{}, existing: []existingIndex{{Name: "a_1", Keys: keysA, Hidden: true}}, kind: actModify, hidden: new(false)},
		{name: "unique", want: Index{Unique: true}, existing: []existingIndex{{Name: "a_1", Keys: keysA}}, kind: actConflict, errText: "unique false -> true"},
		{name: "unique rebuild", want: Index{Unique: true, AllowRebuild: true}, existing: []existingIndex{{Name: "a_1", Keys: keysA}}, kind: actRebuild},
		{name: "keys", want: Index{Name: "a_1"}, existing: []existingIndex{{Name: "a_1", Keys: keysB}}, kind: actConflict, errText: `keys {"b":1} -> {"a":1}`},
		{name: "foreign option", want: Index{}, existing: []existingIndex{{Name: "a_1", Keys: keysA, Other: []string{`collation={"locale": "fr"}`}}}, kind: actConflict, errText: "collation"},
		{name: "same keys other name", want: Index{Name: "mine"}, existing: []existingIndex{{Name: "theirs", Keys: keysA}}, kind: actConflict, errText: `"theirs"`},
		{name: "same keys other partial", want: Index{Name: "mine"}, existing: []existingIndex{{Name: "theirs", Keys: keysA, PartialFilter: `{"a":1}`}}, kind: actCreate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			existing := map[string]existingIndex{}
			for _, e := range tt.existing {
				existing[e.Name] = e
			}
			s := spec(tt.want)
			a := s.decide(existing)
			if a.kind != tt.kind {
				t.Fatalf("kind %d, want %d (%+v)", a.kind, tt.kind, a)
			}
			if (a.ttl == nil) != (tt.ttl == nil) || a.ttl != nil && *a.ttl != *tt.ttl {
				t.Errorf("ttl %v, want %v", a.ttl, tt.ttl)
			}
			if (a.hidden == nil) != (tt.hidden == nil) || a.hidden != nil && *a.hidden != *tt.hidden {
				t.Errorf("hidden %v, want %v", a.hidden, tt.hidden)
			}
			if tt.kind == actConflict {
				if !errors.Is(a.err, ErrIndexConflict) || !strings.Contains(a.err.Error(), tt.errText) {
					t.Errorf("err = %v, want ErrIndexConflict containing %q", a.err, tt.errText)
				}
			}
			if len(a.describe(s)) == 0 {
				t.Error("no description")
			}
		})
	}
}

func TestOptionsRejected(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		opt   Option
		names string // the option, in the message
		badID bool   // also lock.ErrInvalidArgument
	}{
		{"collection", WithCollection(""), "WithCollection", false},
		{"system collection", WithCollection("system.x"), "WithCollection", false},
		{"lock collection", WithLockCollection("a$"), "WithLockCollection", false},
		{"lock ttl", WithLockTTL(time.Millisecond), "WithLockTTL", false},
		{"long lock ttl", WithLockTTL(lock.MaxTTL + time.Second), "WithLockTTL", false},
		{"lock id", WithLockID(""), "WithLockID", true},
		{"lock id nul", WithLockID("a\x00b"), "WithLockID", true},
		{"session", WithSession(nil), "WithSession", false},
		{"observer", WithObserver(nil), "WithObserver", false},
		{"wait", WithWait(-time.Second), "WithWait", false},
		{"retry", WithRetryPeriod(0), "WithRetryPeriod", false},
		{"history", WithSchedulerHistory("runs", 10*time.Millisecond), "WithSchedulerHistory", false},
		{"runs collection", WithSchedulerHistory("", time.Hour), "WithSchedulerHistory", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c config
			err := tt.opt(&c)
			if !errors.Is(err, ErrInvalidOption) || !errors.Is(err, lock.ErrInvalidOption) {
				t.Fatalf("err = %v, want ErrInvalidOption and lock.ErrInvalidOption", err)
			}
			if tt.badID && !errors.Is(err, lock.ErrInvalidArgument) {
				t.Errorf("err = %v, want lock.ErrInvalidArgument too", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.names) || strings.Count(msg, "migrations:") != 1 || strings.Count(msg, "invalid option") != 1 {
				t.Errorf("err = %q, want it to name %s, with one prefix", msg, tt.names)
			}
		})
	}
}

func TestSessionExcludesOptions(t *testing.T) {
	t.Parallel()
	s, err := lock.NewSession(newFakeStore(clockwork.NewFakeClock(), fakeTTL))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tt := range []struct {
		opts  []Option
		names string
	}{
		{[]Option{WithLockCollection("mine")}, "WithLockCollection"},
		{[]Option{WithLockTTL(time.Minute)}, "WithLockTTL"},
		{[]Option{WithLogger(zerolog.Nop())}, "WithLogger"},
		{[]Option{WithObserver(NewRecorder()), WithLockTTL(time.Minute), WithObserver(NewRecorder())}, "WithObserver, WithLockTTL:"},
	} {
		for _, first := range []bool{true, false} {
			opts := append([]Option{WithSession(s)}, tt.opts...)
			if !first {
				opts = append(tt.opts, WithSession(s))
			}
			_, err := configure(opts)
			if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "WithSession cannot be combined with "+tt.names) {
				t.Errorf("WithSession and %s: err = %v, want ErrInvalidOption naming them", tt.names, err)
			}
		}
	}
	cfg, err := configure([]Option{WithSession(s), WithLockID("mine"), WithWait(time.Second), WithRetryPeriod(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.lockTTL != fakeTTL || cfg.lockID != "mine" {
		t.Errorf("lock TTL %v, id %q; want the session's TTL %v and the id given", cfg.lockTTL, cfg.lockID, fakeTTL)
	}
	if _, err := configure([]Option{WithSession(s), WithRetryPeriod(fakeTTL)}); !errors.Is(err, ErrInvalidOption) ||
		!strings.Contains(err.Error(), "WithRetryPeriod") {
		t.Errorf("retry period of the session's TTL: %v, want ErrInvalidOption naming WithRetryPeriod", err)
	}
}

// The lock collection's indexes do not depend on the lease TTL: lockers
// with different TTLs share the collection, and a migrator run with another
// TTL than the one before finds the built-in migration unchanged.
func TestLockIndexesIgnoreLockTTL(t *testing.T) {
	t.Parallel()
	// New does no I/O: nothing listens on this address.
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database("unused")
	lockIndexes := func(t *testing.T, opts ...Option) Migration {
		t.Helper()
		m, err := New(db, opts...)
		if err != nil {
			t.Fatal(err)
		}
		for _, mig := range m.Migrations() {
			if mig.Version == LockIndexesVersion {
				return mig
			}
		}
		t.Fatal("no built-in lock index migration")
		return Migration{}
	}
	base := lockIndexes(t)
	want := fmt.Sprintf("expireAfterSeconds=%d", lock.TTLSeconds(lock.Retention))
	if !strings.Contains(base.Definition, want) {
		t.Errorf("definition %q, want the fixed %s of lock.Retention", base.Definition, want)
	}
	if base.Definition != LockIndexes(lock.DefaultCollection).Definition {
		t.Errorf("New registers %q, LockIndexes describes %q", base.Definition, LockIndexes(lock.DefaultCollection).Definition)
	}
	for _, ttl := range []time.Duration{time.Second, 6 * time.Second, time.Hour, lock.MaxTTL} {
		got := lockIndexes(t, WithLockTTL(ttl))
		if got.Definition != base.Definition || got.Checksum() != base.Checksum() {
			t.Errorf("WithLockTTL(%v): definition %q, want %q as with the default TTL", ttl, got.Definition, base.Definition)
		}
	}
	s, err := lock.NewSession(newFakeStore(clockwork.NewFakeClock(), 7*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := lockIndexes(t, WithSession(s)); got.Definition != base.Definition {
		t.Errorf("WithSession of a 7s store: definition %q, want %q", got.Definition, base.Definition)
	}
}

func TestUnsupported(t *testing.T) {
	t.Parallel()
	live := context.Background()
	ended, cancel := context.WithCancel(live)
	cancel()
	refusal := mongo.CommandError{Code: 72, Name: "InvalidOptions", Message: "unknown option hidden"}
	tests := []struct {
		name        string
		ctx         context.Context
		err         error
		ttl, hidden bool // for a TTL change (only 238, 115), for hidden (also a refusal naming it)
	}{
		{"nil", live, nil, false, false},
		{"not implemented", live, mongo.CommandError{Code: 238, Name: "NotImplemented"}, true, true},
		{"wrapped", live, fmt.Errorf("collMod: %w", mongo.CommandError{Code: 238}), true, true},
		{"refusal", live, refusal, false, true},
		{"FerretDB 2.x internal error", live, mongo.CommandError{Code: 1, Message: "index option hidden is not supported"}, false, true},
		{"ctx ended", ended, mongo.CommandError{Code: 238}, false, false},
		{"network", live, mongo.CommandError{Code: 72, Labels: []string{"NetworkError"}}, false, false},
		{"retryable", live, mongo.CommandError{Code: 72, Labels: []string{"RetryableWriteError"}}, false, false},
		{"not primary", live, mongo.CommandError{Code: 10107, Name: "NotWritablePrimary"}, false, false},
		{"index gone", live, mongo.CommandError{Code: 27, Name: "IndexNotFound"}, false, false},
		{"duplicate key", live, mongo.CommandError{Code: 11000, Message: "E11000 duplicate key error"}, false, false},
		{"FerretDB 2.x duplicate key", live, mongo.CommandError{Code: 1,
			Message: `duplicate key value violates unique constraint "collection_pk_12"`}, false, false},
		{"timeout", live, mongo.CommandError{Code: 50, Name: "MaxTimeMSExpired"}, false, false},
		{"command not supported", live, mongo.CommandError{Code: 115, Name: "CommandNotSupported"}, true, true},
		{"refusal not naming hidden", live, mongo.CommandError{Code: 2, Name: "BadValue", Message: "bad partial filter"}, false, false},
		{"index catalog full", live, mongo.CommandError{Code: 67, Name: "CannotCreateIndex", Message: "add index fails, too many indexes (hidden ones count)"}, false, false},
		{"not a server error", live, errors.New("boom"), false, false},
		{"context error", live, context.DeadlineExceeded, false, false},
	}
	for _, tt := range tests {
		if got := unsupported(tt.ctx, tt.err, ""); got != tt.ttl {
			t.Errorf("%s: unsupported(no option) = %t, want %t", tt.name, got, tt.ttl)
		}
		if got := unsupported(tt.ctx, tt.err, "hidden"); got != tt.hidden {
			t.Errorf("%s: unsupported(hidden) = %t, want %t", tt.name, got, tt.hidden)
		}
	}
	err := &unsupportedError{what: `hide index "x" on "c"`, feature: "hidden indexes (collMod index.hidden)", err: refusal}
	if !errors.Is(err, ErrUnsupported) || !errors.As(err, new(mongo.CommandError)) {
		t.Errorf("%v matches ErrUnsupported %t; want it and the server's error", err, errors.Is(err, ErrUnsupported))
	}
	if want := `hide index "x" on "c": the server does not support hidden indexes (collMod index.hidden): `; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("message %q, want it to begin %q", err.Error(), want)
	}
}
