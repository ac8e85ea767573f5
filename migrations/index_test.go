package migrations_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/migrations"
)

type indexInfo struct {
	Name               string `bson:"name"`
	Key                bson.D `bson:"key"`
	Unique             bool   `bson:"unique"`
	Hidden             bool   `bson:"hidden"`
	ExpireAfterSeconds *int64 `bson:"expireAfterSeconds"`
}

func indexes(t *testing.T, coll *mongo.Collection) map[string]indexInfo {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	cur, err := coll.Indexes().List(ctx)
	if err != nil {
		var se mongo.ServerError
		if errors.As(err, &se) && se.HasErrorCode(26) {
			return nil
		}
		t.Fatal(err)
	}
	var all []indexInfo
	if err := cur.All(ctx, &all); err != nil {
		t.Fatal(err)
	}
	out := map[string]indexInfo{}
	for _, ix := range all {
		out[ix.Name] = ix
	}
	return out
}

func indexNames(t *testing.T, coll *mongo.Collection) []string {
	t.Helper()
	var out []string
	for name := range indexes(t, coll) {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// countingDB is db on a client whose commands are counted.
func countingDB(t *testing.T, db *mongo.Database) (*mongo.Database, *mongotest.Counter) {
	t.Helper()
	client, counter := mongotest.CountingClient(t)
	return mongotest.Database(t, client, db.Name()), counter
}

func ferret() bool { return mongotest.Backend() == mongotest.BackendFerretDB }

func TestEnsureIndexChangesTTLWithCollMod(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	ttlIndex := func(d time.Duration) migrations.Migration {
		m := migrations.EnsureIndex(1, migrations.Index{Collection: "sessions", Name: "expiry",
			Keys: bson.D{{Key: "seen", Value: 1}}, ExpireAfterSeconds: migrations.TTL(d)})
		m.Repeatable = true // follows configuration
		return m
	}
	// Migrations log to the logger of their context.
	var log logged
	ctx = zerolog.New(&log).WithContext(ctx)
	if _, err := newMigrator(t, db, migrations.WithMigrations(ttlIndex(time.Hour))).Up(ctx); err != nil {
		t.Fatal(err)
	}
	if ferret() && !log.contains("does not implement TTL indexes") {
		t.Error("no warning that the TTL index became a plain one")
	}

	cdb, counter := countingDB(t, db)
	m := newMigrator(t, cdb, migrations.WithMigrations(ttlIndex(2*time.Hour)))
	steps, err := m.Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 1 || steps[0].Reason != "definition changed" || !strings.Contains(strings.Join(steps[0].Actions, ";"), "set expireAfterSeconds of index \"expiry\" to 7200") {
		t.Fatalf("plan %+v", steps)
	}
	counter.Reset()
	res, err := m.Up(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := versions(res.Applied); !slices.Equal(got, []int64{1}) {
		t.Fatalf("applied %v, want the changed repeatable migration", got)
	}
	if counter.Count("collMod") != 1 || counter.Count("dropIndexes") != 0 || counter.Count("createIndexes") != 0 {
		t.Errorf("commands: collMod %d, dropIndexes %d, createIndexes %d; want one collMod only",
			counter.Count("collMod"), counter.Count("dropIndexes"), counter.Count("createIndexes"))
	}
	ix := indexes(t, db.Collection("sessions"))["expiry"]
	if ferret() {
		// FerretDB does not implement collMod: warned, index left alone.
		if !log.contains("does not implement changing expireAfterSeconds") {
			t.Error("no warning about collMod")
		}
		return
	}
	if ix.ExpireAfterSeconds == nil || *ix.ExpireAfterSeconds != 7200 {
		t.Errorf("expireAfterSeconds %v, want 7200", ix.ExpireAfterSeconds)
	}
}

func TestLockIndexesFollowTTL(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	if _, err := newMigrator(t, db, migrations.WithLockTTL(30*time.Second)).Up(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := newMigrator(t, db, migrations.WithLockTTL(time.Minute)).Up(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := versions(res.Applied); !slices.Equal(got, []int64{migrations.LockIndexesVersion}) {
		t.Fatalf("applied %v after a TTL change, want the built-in again", got)
	}
	ix := indexes(t, db.Collection(lock.DefaultCollection))[lock.TTLIndexName]
	switch {
	case ferret():
		if ix.ExpireAfterSeconds != nil {
			t.Errorf("FerretDB reports expireAfterSeconds %d", *ix.ExpireAfterSeconds)
		}
	case ix.ExpireAfterSeconds == nil || *ix.ExpireAfterSeconds != 60:
		t.Errorf("expireAfterSeconds %v, want 60", ix.ExpireAfterSeconds)
	}
}

func TestEnsureIndexHiddenWithCollMod(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	plain := migrations.EnsureIndex(1, migrations.Index{Collection: "c", Keys: bson.D{{Key: "a", Value: 1}}})
	if _, err := newMigrator(t, db, migrations.WithMigrations(plain)).Up(ctx); err != nil {
		t.Fatal(err)
	}
	cdb, counter := countingDB(t, db)
	hide := migrations.EnsureIndex(2, migrations.Index{Collection: "c", Keys: bson.D{{Key: "a", Value: 1}}, Hidden: true})
	m := newMigrator(t, cdb, migrations.WithMigrations(plain, hide))
	counter.Reset()
	_, err := m.Up(ctx)
	if counter.Count("collMod") != 1 || counter.Count("dropIndexes") != 0 || counter.Count("createIndexes") != 0 {
		t.Errorf("commands: collMod %d, dropIndexes %d, createIndexes %d; want one collMod only",
			counter.Count("collMod"), counter.Count("dropIndexes"), counter.Count("createIndexes"))
	}
	if ferret() {
		if !errors.Is(err, migrations.ErrNotSupported) || !strings.Contains(err.Error(), "version 2") {
			t.Fatalf("err = %v, want ErrNotSupported naming version 2", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if !indexes(t, db.Collection("c"))["a_1"].Hidden {
		t.Error("index not hidden")
	}
}

func TestEnsureIndexRefusesSilentRebuild(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	plain := migrations.EnsureIndex(1, migrations.Index{Collection: "users", Name: "by_email", Keys: bson.D{{Key: "email", Value: 1}}})
	if _, err := newMigrator(t, db, migrations.WithMigrations(plain)).Up(ctx); err != nil {
		t.Fatal(err)
	}
	unique := migrations.Index{Collection: "users", Name: "by_email", Keys: bson.D{{Key: "email", Value: 1}}, Unique: true}

	cdb, counter := countingDB(t, db)
	m := newMigrator(t, cdb, migrations.WithMigrations(plain, migrations.EnsureIndex(2, unique)))
	steps, err := m.Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 1 || !errors.Is(steps[0].Err, migrations.ErrIndexConflict) {
		t.Fatalf("plan %+v, want the conflict", steps)
	}
	counter.Reset()
	_, err = m.Up(ctx)
	if !errors.Is(err, migrations.ErrFailed) || !errors.Is(err, migrations.ErrIndexConflict) ||
		!strings.Contains(err.Error(), "unique false -> true") || !strings.Contains(err.Error(), "AllowRebuild") {
		t.Fatalf("err = %v, want ErrIndexConflict explaining the difference", err)
	}
	if n := counter.Count("dropIndexes") + counter.Count("createIndexes"); n != 0 {
		t.Errorf("sent %d dropIndexes/createIndexes", n)
	}
	if ix := indexes(t, db.Collection("users"))["by_email"]; ix.Unique {
		t.Error("index was changed")
	}

	// Allowed: dropped and re-created.
	unique.AllowRebuild = true
	if _, err := newMigrator(t, db, migrations.WithMigrations(plain, migrations.EnsureIndex(2, unique))).Up(ctx); err != nil {
		t.Fatal(err)
	}
	if ix := indexes(t, db.Collection("users"))["by_email"]; !ix.Unique {
		t.Error("index not rebuilt as unique")
	}
}

func TestEnsureIndexNeverDropsUnnamedIndex(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	if _, err := db.Collection("users").Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "email", Value: 1}}}); err != nil {
		t.Fatal(err)
	}
	cdb, counter := countingDB(t, db)
	m := newMigrator(t, cdb, migrations.WithMigrations(migrations.EnsureIndex(1, migrations.Index{
		Collection: "users", Name: "email_unique", Keys: bson.D{{Key: "email", Value: 1}}, AllowRebuild: true})))
	counter.Reset()
	_, err := m.Up(ctx)
	if !errors.Is(err, migrations.ErrIndexConflict) || !strings.Contains(err.Error(), `"email_1"`) {
		t.Fatalf("err = %v, want ErrIndexConflict naming email_1", err)
	}
	if counter.Count("dropIndexes") != 0 {
		t.Error("dropped an index the migration does not name")
	}
	if got := indexNames(t, db.Collection("users")); !slices.Equal(got, []string{"_id_", "email_1"}) {
		t.Errorf("indexes %v", got)
	}
}

func TestEnsureIndexAdoptsIdenticalIndex(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	if _, err := db.Collection("users").Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "email", Value: 1}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := newMigrator(t, db).Up(ctx); err != nil { // the built-in lock indexes
		t.Fatal(err)
	}
	cdb, counter := countingDB(t, db)
	m := newMigrator(t, cdb, migrations.WithMigrations(migrations.EnsureIndex(1, migrations.Index{
		Collection: "users", Keys: bson.D{{Key: "email", Value: 1.0}}})))
	counter.Reset()
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if n := counter.Count("dropIndexes") + counter.Count("createIndexes") + counter.Count("collMod"); n != 0 {
		t.Errorf("sent %d index commands for an index that exists as described", n)
	}
}

func TestDropIndexDropsOnlyItsIndex(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	for _, k := range []string{"a", "b"} {
		if _, err := db.Collection("c").Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: k, Value: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	m := newMigrator(t, db, migrations.WithMigrations(migrations.DropIndex(1, "c", "a_1"), migrations.DropIndex(2, "c", "gone")))
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if got := indexNames(t, db.Collection("c")); !slices.Equal(got, []string{"_id_", "b_1"}) {
		t.Errorf("indexes %v, want _id_ and b_1", got)
	}
}

func TestEnsureIndexUniqueEnforced(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	m := newMigrator(t, db, migrations.WithMigrations(migrations.EnsureIndex(1, migrations.Index{
		Collection: "users", Keys: bson.D{{Key: "email", Value: 1}}, Unique: true})))
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	coll := db.Collection("users")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "email", Value: "a@example.com"}}); err != nil {
		t.Fatal(err)
	}
	_, err := coll.InsertOne(ctx, bson.D{{Key: "email", Value: "a@example.com"}})
	if !mongo.IsDuplicateKeyError(err) {
		t.Errorf("second insert: %v, want a duplicate key error", err)
	}
}

func TestLockIndexesRefuseShorterThanALease(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	l, err := lock.New(db, lock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if a, err := l.AcquireLocks(ctx, "k", "long"); err != nil || len(a.Granted) != 1 {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	m := newMigrator(t, db) // lock TTL 2s
	steps, err := m.Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(steps[0].Err, migrations.ErrIndexConflict) {
		t.Errorf("plan: %+v, want the conflict", steps[0])
	}
	_, err = m.Up(ctx)
	if !errors.Is(err, migrations.ErrIndexConflict) || !strings.Contains(err.Error(), `lock "long"`) || !strings.Contains(err.Error(), "version -1000") {
		t.Fatalf("err = %v, want ErrIndexConflict naming the lock", err)
	}
	if names := indexNames(t, db.Collection(lock.DefaultCollection)); slices.Contains(names, lock.TTLIndexName) {
		t.Errorf("TTL index created: %v", names)
	}
	// With the lockers' TTL it goes through.
	if _, err := newMigrator(t, db, migrations.WithLockTTL(time.Minute)).Up(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestSchedulerIndexesFollowRetention(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	if _, err := newMigrator(t, db).Up(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := newMigrator(t, db, migrations.WithSchedulerHistory("mongolock_runs", time.Hour)).Up(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := versions(res.Applied); !slices.Equal(got, []int64{migrations.SchedulerIndexesVersion}) {
		t.Fatalf("applied %v after a retention change, want the scheduler's built-in again", got)
	}
	ix := indexes(t, db.Collection("mongolock_runs"))
	if _, ok := ix["job_scheduled"]; !ok {
		t.Errorf("indexes %v", ix)
	}
	if ttl := ix["end_ttl"].ExpireAfterSeconds; !ferret() && (ttl == nil || *ttl != 3600) {
		t.Errorf("end_ttl expireAfterSeconds %v, want 3600", ttl)
	}
}

func TestUpWithNothingToDoIsOneRead(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	migs := migrations.WithMigrations(counted(1, "a"))
	if _, err := newMigrator(t, db, migs).Up(ctx); err != nil {
		t.Fatal(err)
	}
	cdb, counter := countingDB(t, db)
	m := newMigrator(t, cdb, migs)
	counter.Reset()
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	// Every instance of a deploy runs Up: when all is applied it reads the
	// records once and takes no lock.
	if counter.Total() != 1 || counter.Count("find") != 1 {
		t.Errorf("%d commands (%d find), want one find", counter.Total(), counter.Count("find"))
	}
}
