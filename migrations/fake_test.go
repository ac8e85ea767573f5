package migrations

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/lock"
)

// fakeLocker is a lock store for one lock, on a fake clock.
type fakeLocker struct {
	clock *clockwork.FakeClock
	ttl   time.Duration

	mu       sync.Mutex
	holder   string
	fence    uint64
	renewErr error // returned by Renew while set
	lose     bool  // Renew reports the lock lost
	renewals []time.Time
	renewed  chan struct{}
	released int
}

func newFakeLocker(clk *clockwork.FakeClock, ttl time.Duration) *fakeLocker {
	return &fakeLocker{clock: clk, ttl: ttl, renewed: make(chan struct{}, 100)}
}

func (f *fakeLocker) AcquireLock(_ context.Context, lockID, keeperID string) (lock.Lease, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.holder != "" && f.holder != keeperID {
		return lock.Lease{}, false, nil
	}
	f.holder = keeperID
	f.fence++
	return lock.Lease{LockID: lockID, KeeperID: keeperID, Fence: f.fence, Deadline: f.clock.Now().Add(f.ttl)}, true, nil
}

func (f *fakeLocker) Renew(_ context.Context, keeperID string, lockIDs ...string) (lock.Renewal, error) {
	f.mu.Lock()
	defer func() {
		f.mu.Unlock()
		f.renewed <- struct{}{}
	}()
	f.renewals = append(f.renewals, f.clock.Now())
	switch {
	case f.renewErr != nil:
		return lock.Renewal{}, f.renewErr
	case f.lose || f.holder != keeperID:
		return lock.Renewal{Lost: lockIDs}, nil
	}
	return lock.Renewal{Held: lockIDs, Deadline: f.clock.Now().Add(f.ttl)}, nil
}

func (f *fakeLocker) ReleaseLock(_ context.Context, lockID, keeperID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.holder != keeperID {
		return lock.ErrNotHeld
	}
	f.holder = ""
	f.released++
	return nil
}

func (f *fakeLocker) set(fn func(f *fakeLocker)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func fakeMigrator(clk *clockwork.FakeClock, l Locker) *Migrator {
	return &Migrator{locker: l, cfg: config{
		lockID:   DefaultLockID,
		keeperID: "me",
		wait:     10 * time.Second,
		retry:    time.Second,
		log:      zerolog.Nop(),
		clock:    clk,
	}}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func notSettled(context.Context) (bool, error) { return false, nil }

func TestKeepAliveRenewsBeforeEachDeadline(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	clk := clockwork.NewFakeClock()
	fl := newFakeLocker(clk, 10*time.Second)
	m := fakeMigrator(clk, fl)

	var deadlines []time.Time
	_, err := m.guarded(ctx, notSettled, func(runCtx context.Context, fence uint64) error {
		deadline := clk.Now().Add(10 * time.Second)
		for range 5 {
			if err := clk.BlockUntilContext(ctx, 1); err != nil {
				return err
			}
			clk.Advance(5 * time.Second)
			select {
			case <-fl.renewed:
			case <-ctx.Done():
				return fmt.Errorf("no renewal after the clock passed its time: %w", ctx.Err())
			}
			deadlines = append(deadlines, deadline)
			deadline = clk.Now().Add(10 * time.Second)
			if runCtx.Err() != nil {
				return context.Cause(runCtx)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if len(fl.renewals) != 5 {
		t.Fatalf("renewed %d times, want 5", len(fl.renewals))
	}
	for i, r := range fl.renewals {
		if !r.Before(deadlines[i]) {
			t.Errorf("renewal %d at %v, not before the deadline %v", i, r, deadlines[i])
		}
	}
	if fl.released != 1 || fl.holder != "" {
		t.Errorf("released %d times, holder %q; want the lock released once", fl.released, fl.holder)
	}
}

func TestKeepAliveCancelsWhenLost(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	clk := clockwork.NewFakeClock()
	fl := newFakeLocker(clk, 10*time.Second)
	fl.lose = true
	m := fakeMigrator(clk, fl)

	_, err := m.guarded(ctx, notSettled, func(runCtx context.Context, fence uint64) error {
		if err := clk.BlockUntilContext(ctx, 1); err != nil {
			return err
		}
		clk.Advance(5 * time.Second)
		select {
		case <-runCtx.Done():
			return context.Cause(runCtx)
		case <-ctx.Done():
			return errors.New("run context was not cancelled")
		}
	})
	if !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("err = %v, want lock.ErrLeaseLost", err)
	}
}

func TestKeepAliveCancelsAtDeadlineWhenRenewalsFail(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	clk := clockwork.NewFakeClock()
	fl := newFakeLocker(clk, 10*time.Second)
	fl.renewErr = errors.New("network down")
	m := fakeMigrator(clk, fl)

	var cancelledAt time.Time
	start := clk.Now()
	_, err := m.guarded(ctx, notSettled, func(runCtx context.Context, fence uint64) error {
		for {
			// Wait for keepAlive's next timer, or for it to give up.
			bctx, cancel := context.WithCancel(ctx)
			stop := context.AfterFunc(runCtx, cancel)
			err := clk.BlockUntilContext(bctx, 1)
			stop()
			cancel()
			if runCtx.Err() != nil {
				cancelledAt = clk.Now()
				return context.Cause(runCtx)
			}
			if err != nil {
				return err
			}
			clk.Advance(500 * time.Millisecond)
		}
	})
	if !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("err = %v, want lock.ErrLeaseLost", err)
	}
	// Cancelled at the deadline, not before: failed renewals are retried.
	if got := cancelledAt.Sub(start); got < 10*time.Second || got > 11*time.Second {
		t.Errorf("cancelled %v after acquiring, want at the 10s deadline", got)
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if len(fl.renewals) < 3 {
		t.Errorf("renewal attempted %d times, want retries every retry period", len(fl.renewals))
	}
}

func TestGuardedWaitsUntilSettled(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	clk := clockwork.NewFakeClock()
	fl := newFakeLocker(clk, 10*time.Second)
	fl.holder = "other"
	m := fakeMigrator(clk, fl)

	polls := 0
	settled := func(context.Context) (bool, error) {
		polls++
		return polls == 3, nil
	}
	done := make(chan struct{})
	var waited time.Duration
	var err error
	go func() {
		defer close(done)
		waited, err = m.guarded(ctx, settled, func(context.Context, uint64) error {
			return errors.New("work ran although the other migrator did it")
		})
	}()
	for range 2 {
		if err := clk.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
	}
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if waited != 2*time.Second {
		t.Errorf("waited %v, want 2s", waited)
	}
}

func TestGuardedTakesLockWhenFreed(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	clk := clockwork.NewFakeClock()
	fl := newFakeLocker(clk, 10*time.Second)
	fl.holder = "other"
	m := fakeMigrator(clk, fl)

	done := make(chan error)
	ran := false
	go func() {
		_, err := m.guarded(ctx, notSettled, func(context.Context, uint64) error {
			ran = true
			return nil
		})
		done <- err
	}()
	if err := clk.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	fl.set(func(f *fakeLocker) { f.holder = "" })
	clk.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !ran {
		t.Error("work did not run after the lock was freed")
	}
}

func TestGuardedGivesUp(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	clk := clockwork.NewFakeClock()
	fl := newFakeLocker(clk, 10*time.Second)
	fl.holder = "other"
	m := fakeMigrator(clk, fl)
	m.cfg.wait = 2500 * time.Millisecond

	done := make(chan error)
	go func() {
		_, err := m.guarded(ctx, notSettled, func(context.Context, uint64) error { return nil })
		done <- err
	}()
	for _, d := range []time.Duration{time.Second, time.Second, 500 * time.Millisecond} {
		if err := clk.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(d)
	}
	err := <-done
	if !errors.Is(err, ErrWaitTimeout) {
		t.Fatalf("err = %v, want ErrWaitTimeout", err)
	}
}

func TestGuardedSettledError(t *testing.T) {
	t.Parallel()
	clk := clockwork.NewFakeClock()
	fl := newFakeLocker(clk, 10*time.Second)
	fl.holder = "other"
	m := fakeMigrator(clk, fl)
	boom := errors.New("boom")
	_, err := m.guarded(testCtx(t), func(context.Context) (bool, error) { return false, boom },
		func(context.Context, uint64) error { return nil })
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
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
		{"lock ttl", []Migration{LockIndexes("locks", time.Millisecond)}, "shorter than the minimum"},
		{"history retention", []Migration{SchedulerIndexes("runs", time.Millisecond)}, "at least 1s"},
		{"runs collection", []Migration{SchedulerIndexes("", time.Hour)}, "invalid scheduler runs collection"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := prepare(tt.migs)
			if !errors.Is(err, ErrInvalidMigration) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrInvalidMigration containing %q", err, tt.want)
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
	if a, b := LockIndexes("locks", 30*time.Second), LockIndexes("locks", 60*time.Second); a.Checksum() == b.Checksum() {
		t.Error("the lock TTL is not part of the built-in migration's checksum")
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
		name string
		opt  Option
	}{
		{"collection", WithCollection("")},
		{"system collection", WithCollection("system.x")},
		{"lock collection", WithLockCollection("a$")},
		{"lock ttl", WithLockTTL(time.Millisecond)},
		{"lock id", WithLockID("")},
		{"keeper id", WithKeeperID("a\x00b")},
		{"locker", WithLocker(nil)},
		{"wait", WithWait(-time.Second)},
		{"retry", WithRetryPeriod(0)},
		{"clock", WithClock(nil)},
		{"history", WithSchedulerHistory("runs", 10*time.Millisecond)},
		{"runs collection", WithSchedulerHistory("", time.Hour)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c config
			if err := tt.opt(&c); !errors.Is(err, ErrInvalidOption) {
				t.Fatalf("err = %v, want ErrInvalidOption", err)
			}
		})
	}
}
