package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/migrations"
)

const (
	testTTL   = 2 * time.Second
	testRetry = 50 * time.Millisecond
)

func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newMigrator(t *testing.T, db *mongo.Database, opts ...migrations.Option) *migrations.Migrator {
	t.Helper()
	base := []migrations.Option{
		migrations.WithLockTTL(testTTL),
		migrations.WithRetryPeriod(testRetry),
		migrations.WithWait(30 * time.Second),
	}
	m, err := migrations.New(db, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// newSession returns a Session on a Locker of db with the given TTL,
// closed at the end of the test.
func newSession(t *testing.T, db *mongo.Database, ttl time.Duration, opts ...lock.SessionOption) *lock.Session {
	t.Helper()
	l, err := lock.New(db, lock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	s, err := lock.NewSession(l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// newSessionMigrator is newMigrator taking its lock through s.
func newSessionMigrator(t *testing.T, db *mongo.Database, s *lock.Session, opts ...migrations.Option) *migrations.Migrator {
	t.Helper()
	base := []migrations.Option{
		migrations.WithSession(s),
		migrations.WithRetryPeriod(testRetry),
		migrations.WithWait(30 * time.Second),
	}
	m, err := migrations.New(db, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// counted is a migration whose Up counts its runs in the collection
// "effects" and appends its version to the list "order".
func counted(v int64, def string) migrations.Migration {
	return migrations.Migration{
		Version:     v,
		Description: fmt.Sprintf("count %d", v),
		Definition:  def,
		Up: func(ctx context.Context, db *mongo.Database) error {
			return bump(ctx, db, v)
		},
	}
}

func bump(ctx context.Context, db *mongo.Database, v int64) error {
	up := options.UpdateOne().SetUpsert(true)
	if _, err := db.Collection("effects").UpdateOne(ctx, bson.D{{Key: "_id", Value: v}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}, up); err != nil {
		return err
	}
	_, err := db.Collection("effects").UpdateOne(ctx, bson.D{{Key: "_id", Value: "order"}},
		bson.D{{Key: "$push", Value: bson.D{{Key: "order", Value: v}}}}, up)
	return err
}

func runs(t *testing.T, db *mongo.Database, v int64) int {
	t.Helper()
	var doc struct {
		N int `bson:"n"`
	}
	err := db.Collection("effects").FindOne(testCtx(t, 10*time.Second), bson.D{{Key: "_id", Value: v}}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return doc.N
}

func order(t *testing.T, db *mongo.Database) []int64 {
	t.Helper()
	var doc struct {
		Order []int64 `bson:"order"`
	}
	err := db.Collection("effects").FindOne(testCtx(t, 10*time.Second), bson.D{{Key: "_id", Value: "order"}}).Decode(&doc)
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		t.Fatal(err)
	}
	return doc.Order
}

func versions(applied []migrations.Applied) []int64 {
	var out []int64
	for _, a := range applied {
		out = append(out, a.Version)
	}
	return out
}

func states(t *testing.T, m *migrations.Migrator) map[int64]migrations.Entry {
	t.Helper()
	entries, err := m.Status(testCtx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[int64]migrations.Entry, len(entries))
	for _, e := range entries {
		out[e.Version] = e
	}
	return out
}

func TestUpAppliesInOrderAndRecords(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	s := newSession(t, db, testTTL, lock.WithKeeperID("deployer"))
	m := newSessionMigrator(t, db, s,
		migrations.WithMigrations(counted(3, "c"), counted(1, "a")),
		migrations.WithMigrations(counted(2, "b")))

	res, err := m.Up(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{migrations.LockIndexesVersion, migrations.SchedulerIndexesVersion, migrations.TermLogIndexesVersion, 1, 2, 3}
	if got := versions(res.Applied); !slices.Equal(got, want) {
		t.Fatalf("applied %v, want %v", got, want)
	}
	if got := order(t, db); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("Up functions ran in order %v, want [1 2 3]", got)
	}
	st := states(t, m)
	for _, v := range want {
		e := st[v]
		if e.State != migrations.StateApplied || e.Record == nil {
			t.Fatalf("version %d: state %q, record %+v; want applied", v, e.State, e.Record)
		}
		r := e.Record
		if r.Keeper != "deployer" || r.Checksum != e.Checksum || r.AppliedAt.IsZero() || r.StartedAt.IsZero() ||
			r.AppliedAt.Before(r.StartedAt) || r.Fence == 0 || r.Error != "" {
			t.Errorf("version %d: record %+v", v, *r)
		}
	}
	// The built-in migration made the lock collection's indexes.
	names := indexNames(t, db.Collection(lock.DefaultCollection))
	if !slices.Contains(names, lock.TTLIndexName) || !slices.Contains(names, lock.KeeperIndexName) {
		t.Errorf("lock collection indexes %v, want %s and %s", names, lock.TTLIndexName, lock.KeeperIndexName)
	}
	// The lock is released.
	l, err := lock.New(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Holder(ctx, migrations.DefaultLockID); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("migrations lock after Up: %v, want ErrNotHeld", err)
	}
}

func TestUpTwiceAppliesNothing(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	m := newMigrator(t, db, migrations.WithMigrations(counted(1, "a"), counted(2, "b")))
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	before := states(t, m)

	// A new migrator, as in the next deploy.
	res, err := newMigrator(t, db, migrations.WithMigrations(counted(1, "a"), counted(2, "b"))).Up(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) != 0 {
		t.Fatalf("second Up applied %v", versions(res.Applied))
	}
	for _, v := range []int64{1, 2} {
		if n := runs(t, db, v); n != 1 {
			t.Errorf("version %d ran %d times", v, n)
		}
	}
	after := states(t, m)
	for v, e := range before {
		if !e.Record.AppliedAt.Equal(after[v].Record.AppliedAt) {
			t.Errorf("version %d: record rewritten by the second Up", v)
		}
	}
	steps, err := m.Plan(ctx)
	if err != nil || len(steps) != 0 {
		t.Errorf("Plan after Up = %+v, %v; want nothing to do", steps, err)
	}
}

// slowCounted are counted migrations 1 to n whose Up takes long enough
// for every concurrent Up to find the lock taken.
func slowCounted(n int64) []migrations.Migration {
	var out []migrations.Migration
	for v := int64(1); v <= n; v++ {
		mig := counted(v, fmt.Sprint(v))
		inner := mig.Up
		mig.Up = func(ctx context.Context, db *mongo.Database) error {
			if err := inner(ctx, db); err != nil {
				return err
			}
			select {
			case <-time.After(100 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		out = append(out, mig)
	}
	return out
}

// upAll runs up(i) for i in [0, n) at once and checks that every migration
// up to version last ran and was reported applied exactly once, in order.
func upAll(t *testing.T, db *mongo.Database, n int, last int64, up func(i int) (migrations.Result, error)) {
	t.Helper()
	var wg sync.WaitGroup
	results := make([]migrations.Result, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = up(i)
		})
	}
	close(start)
	wg.Wait()

	appliedBy := map[int64][]int{}
	for i := range n {
		if errs[i] != nil {
			t.Errorf("Up %d: %v", i, errs[i])
		}
		for _, a := range results[i].Applied {
			appliedBy[a.Version] = append(appliedBy[a.Version], i)
		}
	}
	for _, v := range []int64{migrations.LockIndexesVersion, migrations.SchedulerIndexesVersion, migrations.TermLogIndexesVersion} {
		if len(appliedBy[v]) != 1 {
			t.Errorf("version %d reported applied by Ups %v, want exactly one", v, appliedBy[v])
		}
	}
	var want []int64
	for v := int64(1); v <= last; v++ {
		want = append(want, v)
		if n := runs(t, db, v); n != 1 {
			t.Errorf("version %d: Up ran %d times, want once", v, n)
		}
		if len(appliedBy[v]) != 1 {
			t.Errorf("version %d reported applied by Ups %v, want exactly one", v, appliedBy[v])
		}
	}
	if got := order(t, db); !slices.Equal(got, want) {
		t.Errorf("Up functions ran in order %v, want %v", got, want)
	}
}

func TestConcurrentUpAppliesEachOnce(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 80*time.Second)
	db := mongotest.NewDatabase(t)
	const instances = 10
	ms := make([]*migrations.Migrator, instances)
	for i := range ms {
		// Separate clients, as separate processes would have.
		idb := mongotest.Database(t, mongotest.NewClient(t), db.Name())
		ms[i] = newMigrator(t, idb, migrations.WithMigrations(slowCounted(3)...))
	}
	upAll(t, db, instances, 3, func(i int) (migrations.Result, error) { return ms[i].Up(ctx) })
}

// Concurrent Up calls on one Migrator exclude each other as Up calls of
// separate processes do: with a Session per call, and on one Session.
func TestConcurrentUpOnOneMigratorAppliesEachOnce(t *testing.T) {
	t.Parallel()
	const calls = 3
	t.Run("own sessions", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t, 60*time.Second)
		db := mongotest.NewDatabase(t)
		m := newMigrator(t, db, migrations.WithMigrations(slowCounted(2)...))
		upAll(t, db, calls, 2, func(int) (migrations.Result, error) { return m.Up(ctx) })
	})
	t.Run("one session", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t, 60*time.Second)
		db := mongotest.NewDatabase(t)
		m := newSessionMigrator(t, db, newSession(t, db, testTTL), migrations.WithMigrations(slowCounted(2)...))
		upAll(t, db, calls, 2, func(int) (migrations.Result, error) { return m.Up(ctx) })
	})
}

func TestFailureIsRecordedAndStopsTheRun(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	failing := migrations.Migration{Version: 2, Description: "fails", Definition: "b",
		Up: func(ctx context.Context, db *mongo.Database) error {
			if err := bump(ctx, db, 2); err != nil {
				return err
			}
			return errors.New("boom")
		}}
	m := newMigrator(t, db, migrations.WithMigrations(counted(1, "a"), failing, counted(3, "c")))
	res, err := m.Up(ctx)
	if !errors.Is(err, migrations.ErrFailed) || !strings.Contains(err.Error(), "version 2") || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("err = %v, want ErrFailed naming version 2 and the cause", err)
	}
	if got := versions(res.Applied); !slices.Equal(got, []int64{migrations.LockIndexesVersion, migrations.SchedulerIndexesVersion, migrations.TermLogIndexesVersion, 1}) {
		t.Errorf("applied %v before the failure", got)
	}
	st := states(t, m)
	if st[1].State != migrations.StateApplied {
		t.Errorf("version 1: %q, want applied", st[1].State)
	}
	if e := st[2]; e.State != migrations.StateFailed || e.Record.Error != "boom" || e.Record.FailedAt.IsZero() || !e.Record.AppliedAt.IsZero() {
		t.Errorf("version 2: %q %+v, want failed with the error", e.State, e.Record)
	}
	if e := st[3]; e.State != migrations.StatePending || e.Record != nil || runs(t, db, 3) != 0 {
		t.Errorf("version 3: %q, ran %d times; want pending, never run", e.State, runs(t, db, 3))
	}
	l, err := lock.New(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Holder(ctx, migrations.DefaultLockID); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("lock after a failed run: %v, want released", err)
	}

	// A fixed release retries the failed one and goes on.
	res, err = newMigrator(t, db, migrations.WithMigrations(counted(1, "a"), counted(2, "b"), counted(3, "c"))).Up(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := versions(res.Applied); !slices.Equal(got, []int64{2, 3}) {
		t.Errorf("after the fix applied %v, want [2 3]", got)
	}
	if e := states(t, m)[2]; e.State != migrations.StateApplied || e.Record.Error != "" || !e.Record.FailedAt.IsZero() {
		t.Errorf("version 2 after the fix: %q %+v", e.State, e.Record)
	}
}

func TestPanicIsRecordedAsFailure(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	m := newMigrator(t, db, migrations.WithMigrations(migrations.Migration{Version: 1, Definition: "p",
		Up: func(context.Context, *mongo.Database) error { panic("oops") }}))
	_, err := m.Up(ctx)
	if !errors.Is(err, migrations.ErrFailed) || !strings.Contains(err.Error(), "panic: oops") {
		t.Fatalf("err = %v, want ErrFailed with the panic", err)
	}
	if e := states(t, m)[1]; e.State != migrations.StateFailed {
		t.Errorf("state %q, want failed", e.State)
	}
}

func TestChangedDefinitionStopsUp(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	if _, err := newMigrator(t, db, migrations.WithMigrations(counted(1, "a"))).Up(ctx); err != nil {
		t.Fatal(err)
	}
	m := newMigrator(t, db, migrations.WithMigrations(counted(1, "a, edited"), counted(2, "b")))
	_, err := m.Up(ctx)
	if !errors.Is(err, migrations.ErrChanged) || !strings.Contains(err.Error(), "version 1") {
		t.Fatalf("err = %v, want ErrChanged naming version 1", err)
	}
	if n := runs(t, db, 1); n != 1 {
		t.Errorf("changed migration ran %d times, want 1 (not re-run)", n)
	}
	if n := runs(t, db, 2); n != 0 {
		t.Errorf("migration after the changed one ran %d times, want 0", n)
	}
	st := states(t, m)
	if e := st[1]; e.State != migrations.StateChanged || e.Record.Checksum == e.Checksum {
		t.Errorf("version 1: %q, want changed", e.State)
	}
	if st[2].State != migrations.StatePending {
		t.Errorf("version 2: %q, want pending", st[2].State)
	}
	if _, err := m.Plan(ctx); !errors.Is(err, migrations.ErrChanged) {
		t.Errorf("Plan: %v, want ErrChanged", err)
	}
}

func TestRecordedButUnknownIsLeftAlone(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	// A newer release applied 1 and 2; this one knows only 1.
	if _, err := newMigrator(t, db, migrations.WithMigrations(counted(1, "a"), counted(2, "b"))).Up(ctx); err != nil {
		t.Fatal(err)
	}
	m := newMigrator(t, db, migrations.WithMigrations(counted(1, "a")))
	if res, err := m.Up(ctx); err != nil || len(res.Applied) != 0 {
		t.Fatalf("Up = %v, %v", versions(res.Applied), err)
	}
	if e := states(t, m)[2]; e.State != migrations.StateUnknown || e.Record == nil {
		t.Errorf("version 2: %q, want unknown", e.State)
	}
}

func TestCrashedMigratorIsContinued(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	// A migrator took the lock, started version 1 and died.
	dead, err := lock.New(db, lock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	a, err := dead.AcquireLocks(ctx, "dead", migrations.DefaultLockID) // and never renewed
	if err != nil || len(a.Granted) != 1 {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	lease := a.Granted[0]
	_, err = db.Collection(migrations.DefaultCollection).InsertOne(ctx, bson.D{
		{Key: "_id", Value: int64(1)}, {Key: "state", Value: "running"}, {Key: "keeper", Value: "dead"},
		{Key: "checksum", Value: counted(1, "a").Checksum()}, {Key: "fence", Value: fmt.Sprintf("%016x", lease.Fence)},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := newSessionMigrator(t, db, newSession(t, db, time.Second, lock.WithKeeperID("next")),
		migrations.WithMigrations(counted(1, "a")))
	if e := states(t, m)[1]; e.State != migrations.StateRunning {
		t.Fatalf("state %q before, want running", e.State)
	}
	res, err := m.Up(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Waited <= 0 || !slices.Contains(versions(res.Applied), 1) {
		t.Errorf("waited %v, applied %v: want a wait for the lease to expire, then version 1", res.Waited, versions(res.Applied))
	}
	e := states(t, m)[1]
	if e.State != migrations.StateApplied || e.Record.Keeper != "next" || e.Record.Fence <= lease.Fence {
		t.Errorf("record %+v, want applied by next with a larger fence than %d", e.Record, lease.Fence)
	}
}

func TestWaiterReportsOtherMigratorsFailure(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	rec := migrations.NewRecorder()
	m := newMigrator(t, db, migrations.WithObserver(rec), migrations.WithMigrations(counted(1, "a")))
	if _, err := m.Up(ctx); err != nil { // the built-in, so that only 1 is left
		t.Fatal(err)
	}
	// Another migrator holds the lock and is running version 1.
	other, err := lock.New(db, lock.WithTTL(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	a, err := other.AcquireLocks(ctx, "other", migrations.DefaultLockID)
	if err != nil || len(a.Granted) != 1 {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	lease := a.Granted[0]
	records := db.Collection(migrations.DefaultCollection)
	fence := fmt.Sprintf("%016x", lease.Fence)
	_, err = records.UpdateOne(ctx, bson.D{{Key: "_id", Value: int64(1)}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "state", Value: "running"}, {Key: "keeper", Value: "other"}, {Key: "fence", Value: fence}}}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := m.Up(ctx)
		done <- err
	}()
	// The other migrator fails version 1 while m waits, and keeps the lock.
	// Only a failure recorded after m started waiting is the other's.
	waitForRefusal(ctx, t, rec, done)
	_, err = records.UpdateOne(ctx, bson.D{{Key: "_id", Value: int64(1)}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "state", Value: "failed"}, {Key: "error", Value: "disk full"}}}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, migrations.ErrFailed) || !strings.Contains(err.Error(), "disk full") || !strings.Contains(err.Error(), "other") {
			t.Fatalf("err = %v, want ErrFailed with the other migrator's error", err)
		}
	case <-ctx.Done():
		t.Fatal("Up did not return")
	}
	if n := runs(t, db, 1); n != 1 { // once, by the first Up
		t.Errorf("version 1 ran %d times; the waiter repeated the other's failed migration", n)
	}
}

// waitForRefusal waits until rec saw the migrations lock refused, failing
// the test if the Up that reports to done returns first.
func waitForRefusal(ctx context.Context, t *testing.T, rec *migrations.Recorder, done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	refused := make(chan error, 1)
	go func() {
		_, err := rec.WaitFor(ctx, 1, lock.Refused)
		refused <- err
	}()
	select {
	case err := <-refused:
		if err != nil {
			t.Fatalf("Up did not start waiting: %v", err)
		}
	case err := <-done:
		t.Fatalf("Up returned before waiting: %v", err)
	}
}

func TestWaitTimesOut(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	other, err := lock.New(db, lock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if a, err := other.AcquireLocks(ctx, "other", migrations.DefaultLockID); err != nil || len(a.Granted) != 1 {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	m := newMigrator(t, db, migrations.WithLockTTL(time.Minute), migrations.WithWait(300*time.Millisecond),
		migrations.WithMigrations(counted(1, "a")))
	_, err = m.Up(ctx)
	if !errors.Is(err, migrations.ErrWaitTimeout) {
		t.Fatalf("err = %v, want ErrWaitTimeout", err)
	}
	if runs(t, db, 1) != 0 {
		t.Error("ran without the lock")
	}
}

func TestPlanChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	m := newMigrator(t, db, migrations.WithMigrations(
		migrations.EnsureIndex(1, migrations.Index{Collection: "users", Keys: bson.D{{Key: "email", Value: 1}}, Unique: true}),
		counted(2, "b"),
	))
	steps, err := m.Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 5 || steps[0].Version != migrations.LockIndexesVersion || steps[1].Version != migrations.SchedulerIndexesVersion ||
		steps[2].Version != migrations.TermLogIndexesVersion || steps[3].Version != 1 || steps[4].Version != 2 {
		t.Fatalf("steps %+v", steps)
	}
	if a := strings.Join(steps[3].Actions, "; "); !strings.Contains(a, `create index "email_1" on "users" {"email":1} unique`) {
		t.Errorf("step 1 actions %q", a)
	}
	if a := strings.Join(steps[0].Actions, "; "); !strings.Contains(a, `create index "ts_ttl"`) || !strings.Contains(a, `create index "kid"`) {
		t.Errorf("lock index actions %q", a)
	}
	if a := strings.Join(steps[1].Actions, "; "); !strings.Contains(a, `create index "job_scheduled"`) || !strings.Contains(a, `create index "end_ttl"`) {
		t.Errorf("scheduler index actions %q", a)
	}
	if a := strings.Join(steps[2].Actions, "; "); !strings.Contains(a, `create index "lock_start"`) || !strings.Contains(a, `create index "start_ttl"`) {
		t.Errorf("term log index actions %q", a)
	}
	if steps[4].Actions != nil || steps[4].Reason != "not applied" {
		t.Errorf("step 2: %+v", steps[4])
	}
	names, err := db.ListCollectionNames(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 0 {
		t.Errorf("Plan created collections %v", names)
	}
}

func TestDownRollsBack(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	withDown := counted(2, "b")
	withDown.Down = func(ctx context.Context, db *mongo.Database) error {
		_, err := db.Collection("effects").DeleteOne(ctx, bson.D{{Key: "_id", Value: int64(2)}})
		return err
	}
	m := newMigrator(t, db, migrations.WithMigrations(
		migrations.EnsureIndex(1, migrations.Index{Collection: "users", Keys: bson.D{{Key: "email", Value: 1}}}),
		withDown))
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	// The built-in one has no Down: nothing happens.
	if _, err := m.Down(ctx, migrations.LockIndexesVersion-1); !errors.Is(err, migrations.ErrIrreversible) {
		t.Fatalf("Down below the built-ins: %v, want ErrIrreversible", err)
	}
	if runs(t, db, 2) != 1 {
		t.Fatal("a refused Down changed something")
	}
	res, err := m.Down(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := versions(res.Applied); !slices.Equal(got, []int64{2, 1}) {
		t.Errorf("rolled back %v, want [2 1]", got)
	}
	if runs(t, db, 2) != 0 || slices.Contains(indexNames(t, db.Collection("users")), "email_1") {
		t.Error("Down functions did not run")
	}
	st := states(t, m)
	if st[1].State != migrations.StatePending || st[2].State != migrations.StatePending || st[migrations.LockIndexesVersion].State != migrations.StateApplied || st[migrations.SchedulerIndexesVersion].State != migrations.StateApplied {
		t.Errorf("states after Down: %q %q %q", st[1].State, st[2].State, st[migrations.LockIndexesVersion].State)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	invalid := func(name string, err error, want string) {
		t.Helper()
		if !errors.Is(err, migrations.ErrInvalidOption) || !errors.Is(err, lock.ErrInvalidOption) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want ErrInvalidOption (and lock's) containing %q", name, err, want)
		}
	}
	_, err := migrations.New(nil)
	invalid("nil db", err, "nil database")
	_, err = migrations.New(db, nil)
	invalid("nil option", err, "nil option")
	_, err = migrations.New(db, migrations.WithLockTTL(time.Second), migrations.WithRetryPeriod(time.Second))
	invalid("retry >= ttl", err, "WithRetryPeriod")
	// Too short for a Session's safety margin, though not for a Locker.
	_, err = migrations.New(db, migrations.WithLockTTL(200*time.Millisecond))
	invalid("short TTL", err, "WithLockTTL")
	// Left unset, the retry period fits a short TTL.
	if _, err := migrations.New(db, migrations.WithLockTTL(time.Second)); err != nil {
		t.Errorf("1s lock TTL with the default retry period: %v", err)
	}
	if _, err := migrations.New(db, migrations.WithMigrations(counted(migrations.LockIndexesVersion, "x"))); !errors.Is(err, migrations.ErrInvalidMigration) {
		t.Errorf("version of a built-in: %v", err)
	}
	s := newSession(t, db, testTTL)
	_, err = migrations.New(db, migrations.WithSession(s), migrations.WithLockTTL(time.Minute))
	invalid("session and TTL", err, "WithSession cannot be combined with WithLockTTL")
	other := mongotest.NewDatabase(t)
	_, err = migrations.New(other, migrations.WithSession(s))
	invalid("session on another database", err, db.Name())
}

// The migration events fire exactly once per migration applied, rolled
// back or failed, and per wait, with the fence and keeper of the records.
func TestMigrationEvents(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	failing := migrations.Migration{Version: 2, Description: "fails", Definition: "b",
		Up:   func(context.Context, *mongo.Database) error { return errors.New("boom") },
		Down: func(context.Context, *mongo.Database) error { return nil }}
	withDown := counted(1, "a")
	withDown.Down = func(context.Context, *mongo.Database) error { return nil }
	rec := migrations.NewRecorder()
	m := newMigrator(t, db, migrations.WithObserver(rec), migrations.WithMigrations(withDown, failing, counted(3, "c")))

	// Another holder has the lock when Up starts.
	mu, err := newSession(t, db, testTTL).Mutex(migrations.DefaultLockID)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := mu.AcquireLock(ctx); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	type result struct {
		res migrations.Result
		err error
	}
	done := make(chan error, 1)
	var up result
	go func() {
		up.res, up.err = m.Up(ctx)
		done <- up.err
	}()
	waitForRefusal(ctx, t, rec, done)
	if err := mu.ReleaseLock(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	if !errors.Is(up.err, migrations.ErrFailed) {
		t.Fatalf("Up: %v, want ErrFailed", up.err)
	}

	st := states(t, m)
	rec1 := st[1].Record
	check := func(e lock.Event, kind lock.EventKind, migration string, took time.Duration) {
		t.Helper()
		if e.Kind != kind || e.Migration != migration || e.LockID != migrations.DefaultLockID ||
			e.Fence != rec1.Fence || e.KeeperID != rec1.Keeper || e.At.IsZero() || (took >= 0 && e.Took != took) {
			t.Errorf("event %+v, want %v of %q under fence %d of %s, took %v", e, kind, migration, rec1.Fence, rec1.Keeper, took)
		}
	}
	waited := rec.Of(lock.MigrationWaited)
	if len(waited) != 1 {
		t.Fatalf("waited events %+v, want one", waited)
	}
	check(waited[0], lock.MigrationWaited, "", up.res.Waited)
	if waited[0].Took <= 0 || waited[0].Reason != "lock acquired" || waited[0].Err != nil {
		t.Errorf("waited event %+v, want the wait until the lock was acquired", waited[0])
	}
	applied := rec.Of(lock.MigrationApplied)
	wantApplied := []string{
		fmt.Sprintf("%d indexes of lock collection %q", migrations.LockIndexesVersion, lock.DefaultCollection),
		fmt.Sprintf("%d indexes of scheduler history %q", migrations.SchedulerIndexesVersion, "mongolock_runs"),
		fmt.Sprintf("%d indexes of term log %q", migrations.TermLogIndexesVersion, "mongolock_terms"),
		"1 count 1",
	}
	if len(applied) != len(wantApplied) || len(up.res.Applied) != len(wantApplied) {
		t.Fatalf("applied events %+v, result %+v; want %q", applied, up.res.Applied, wantApplied)
	}
	for i, e := range applied {
		check(e, lock.MigrationApplied, wantApplied[i], up.res.Applied[i].Duration)
		if e.Reason != "" || e.Err != nil {
			t.Errorf("applied event %+v", e)
		}
	}
	failed := rec.Of(lock.MigrationFailed)
	if len(failed) != 1 {
		t.Fatalf("failed events %+v, want one", failed)
	}
	check(failed[0], lock.MigrationFailed, "2 fails", -1)
	if !errors.Is(failed[0].Err, migrations.ErrFailed) || !strings.Contains(failed[0].Err.Error(), "boom") {
		t.Errorf("failed event error %v, want the run's", failed[0].Err)
	}

	// Rolling back: one applied event per migration, Reason "down".
	rec2 := migrations.NewRecorder()
	m2 := newMigrator(t, db, migrations.WithObserver(rec2), migrations.WithMigrations(withDown, failing, counted(3, "c")))
	res, err := m2.Down(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	down := rec2.Of(lock.MigrationApplied, lock.MigrationFailed, lock.MigrationWaited)
	if len(down) != 2 || len(res.Applied) != 2 {
		t.Fatalf("events of Down %+v, result %+v; want two rollbacks", down, res.Applied)
	}
	for i, name := range []string{"2 fails", "1 count 1"} {
		e := down[i]
		if e.Kind != lock.MigrationApplied || e.Migration != name || e.Reason != "down" || e.Took != res.Applied[i].Duration ||
			e.Fence == 0 || e.Fence == rec1.Fence {
			t.Errorf("Down event %d: %+v, want %q rolled back under a new fence", i, e, name)
		}
	}
}

// WithLogger logs the events of the Sessions the migrator makes.
func TestLoggerLogsEvents(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	var log logged
	if _, err := newMigrator(t, db, migrations.WithLogger(zerolog.New(&log)), migrations.WithMigrations(counted(1, "a"))).Up(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"migration":"1 count 1","message":"migration applied"`, `"lock":"mongolock.migrations"`, `"message":"released"`} {
		if !log.contains(want) {
			t.Errorf("log %q, want %s", log.msgs, want)
		}
	}
}

// logged collects log messages.
type logged struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logged) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, string(p))
	return len(p), nil
}

func (l *logged) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.msgs {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}
