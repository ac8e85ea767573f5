package migrations_test

import (
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
	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/internal/wirefault"
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

// noHiddenIndexes reports whether db's server has no hidden indexes:
// FerretDB, 1.x (the embedded server) or 2.x (given in MONGODB_URI), told
// from MongoDB by its buildInfo as the code tells them apart
// (mongoutil.ReadBuildInfo).
func noHiddenIndexes(t *testing.T, db *mongo.Database) bool {
	t.Helper()
	info, err := mongoutil.ReadBuildInfo(testCtx(t, 10*time.Second), db)
	if err != nil {
		t.Fatal(err)
	}
	return info.FerretDB != 0
}

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

// The lock collection's indexes are the same whatever TTL the lockers use:
// a migrator with another TTL finds nothing to do.
func TestLockIndexesIgnoreTTL(t *testing.T) {
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
	if len(res.Applied) != 0 {
		t.Fatalf("applied %v after a TTL change, want nothing", versions(res.Applied))
	}
	wantRetention(t, db)
}

// wantRetention checks that the lock collection's TTL index removes
// documents lock.Retention after their last renewal (a plain index on
// FerretDB 1.x, which has no TTL indexes).
func wantRetention(t *testing.T, db *mongo.Database) {
	t.Helper()
	ix, ok := indexes(t, db.Collection(lock.DefaultCollection))[lock.TTLIndexName]
	want := int64(lock.TTLSeconds(lock.Retention))
	switch {
	case !ok:
		t.Errorf("no index %s", lock.TTLIndexName)
	case ferret():
		if ix.ExpireAfterSeconds != nil {
			t.Errorf("FerretDB reports expireAfterSeconds %d", *ix.ExpireAfterSeconds)
		}
	case ix.ExpireAfterSeconds == nil || *ix.ExpireAfterSeconds != want:
		t.Errorf("expireAfterSeconds %v, want %d (lock.Retention)", ix.ExpireAfterSeconds, want)
	}
}

// A TTL index an earlier release made to follow the lease TTL is changed in
// place to the retention.
func TestLockIndexesUpgradeLeaseTTLIndex(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	locks := db.Collection(lock.DefaultCollection)
	_, err := locks.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "ts", Value: 1}},
		Options: options.Index().SetName(lock.TTLIndexName).SetExpireAfterSeconds(30)})
	var se mongo.ServerError
	if errors.As(err, &se) && se.HasErrorCode(238) {
		t.Skip("the server has no TTL indexes")
	}
	if err != nil {
		t.Fatal(err)
	}
	m := newMigrator(t, db)
	steps, err := m.Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("set expireAfterSeconds of index %q from 30 to %d", lock.TTLIndexName, lock.TTLSeconds(lock.Retention))
	if len(steps) == 0 || !strings.Contains(strings.Join(steps[0].Actions, "; "), want) {
		t.Fatalf("plan %+v, want %q", steps, want)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	wantRetention(t, db)
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
	if noHiddenIndexes(t, db) {
		if !errors.Is(err, migrations.ErrUnsupported) || !strings.Contains(err.Error(), "version 2") ||
			!strings.Contains(err.Error(), `hide index "a_1" on "c": the server does not support hidden indexes`) {
			t.Fatalf("err = %v, want ErrUnsupported naming version 2 and the step", err)
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

// Leases of any TTL live in the lock collection side by side with the
// built-in migration, whatever lock TTL the migrator has: nothing checks
// them, and the lock stays held.
func TestLockIndexesWhateverTheLeases(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	l, err := lock.New(db, lock.WithTTL(lock.MaxTTL))
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
	for _, s := range steps {
		if s.Err != nil {
			t.Errorf("plan: version %d would fail: %v", s.Version, s.Err)
		}
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	wantRetention(t, db)
	if h, err := l.Holder(ctx, "long"); err != nil || h.KeeperID != "k" {
		t.Errorf("holder %+v, %v; want k", h, err)
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

// A rebuild into a hidden index hides the old one before dropping it: a
// server without hidden indexes fails there, with the index as it was.
func TestEnsureIndexHiddenRebuildChecksFirst(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	plain := migrations.EnsureIndex(1, migrations.Index{Collection: "c", Keys: bson.D{{Key: "a", Value: 1}}})
	if _, err := newMigrator(t, db, migrations.WithMigrations(plain)).Up(ctx); err != nil {
		t.Fatal(err)
	}
	cdb, counter := countingDB(t, db)
	rebuild := migrations.EnsureIndex(2, migrations.Index{Collection: "c", Keys: bson.D{{Key: "a", Value: 1}},
		Unique: true, Hidden: true, AllowRebuild: true})
	m := newMigrator(t, cdb, migrations.WithMigrations(plain, rebuild))
	steps, err := m.Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 1 || len(steps[0].Actions) != 3 || !strings.HasPrefix(steps[0].Actions[0], `collMod "c": set hidden of index "a_1" to true`) {
		t.Fatalf("plan %+v, want the hide, then the drop and the create", steps)
	}
	counter.Reset()
	_, err = m.Up(ctx)
	if noHiddenIndexes(t, db) {
		if !errors.Is(err, migrations.ErrUnsupported) || !strings.Contains(err.Error(), "hidden indexes (collMod index.hidden)") {
			t.Fatalf("err = %v, want ErrUnsupported for hidden indexes", err)
		}
		if counter.Count("dropIndexes") != 0 || counter.Count("createIndexes") != 0 {
			t.Errorf("dropIndexes %d, createIndexes %d after the failed hide; want none", counter.Count("dropIndexes"), counter.Count("createIndexes"))
		}
		if ix, ok := indexes(t, db.Collection("c"))["a_1"]; !ok || ix.Unique {
			t.Errorf("index a_1 %+v (exists: %t), want it as it was", ix, ok)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if ix := indexes(t, db.Collection("c"))["a_1"]; !ix.Unique || !ix.Hidden {
		t.Errorf("index a_1 %+v, want unique and hidden", ix)
	}
}

// Creating a hidden index on a server without them fails with
// ErrUnsupported and creates nothing.
func TestEnsureIndexCreateHidden(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	hidden := migrations.EnsureIndex(1, migrations.Index{Collection: "c", Keys: bson.D{{Key: "a", Value: 1}}, Hidden: true})
	_, err := newMigrator(t, db, migrations.WithMigrations(hidden)).Up(ctx)
	ix, ok := indexes(t, db.Collection("c"))["a_1"]
	if noHiddenIndexes(t, db) {
		if !errors.Is(err, migrations.ErrUnsupported) ||
			!strings.Contains(err.Error(), `create index "a_1" on "c": the server does not support hidden indexes (createIndexes hidden)`) {
			t.Fatalf("err = %v, want ErrUnsupported for hidden indexes", err)
		}
		var ce mongo.CommandError
		if !errors.As(err, &ce) {
			t.Errorf("err = %v does not wrap the server's", err)
		}
		if ok {
			t.Errorf("index a_1 created: %+v", ix)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if !ix.Hidden {
		t.Errorf("index a_1 %+v, want hidden", ix)
	}
}

// A change of both hidden and expireAfterSeconds sets hidden first: a
// server without hidden indexes fails before the TTL changed.
func TestEnsureIndexHiddenBeforeTTL(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	var log logged
	ctx = zerolog.New(&log).WithContext(ctx)
	ix := migrations.Index{Collection: "c", Keys: bson.D{{Key: "seen", Value: 1}}, ExpireAfterSeconds: migrations.TTL(time.Hour)}
	if _, err := newMigrator(t, db, migrations.WithMigrations(migrations.EnsureIndex(1, ix))).Up(ctx); err != nil {
		t.Fatal(err)
	}
	ix.ExpireAfterSeconds, ix.Hidden = migrations.TTL(2*time.Hour), true
	cdb, counter := countingDB(t, db)
	m := newMigrator(t, cdb, migrations.WithMigrations(migrations.EnsureIndex(2, ix)))
	steps, err := m.Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var acts []string
	for _, s := range steps {
		if s.Version == 2 {
			acts = s.Actions
		}
	}
	if len(acts) != 2 || !strings.Contains(acts[0], "set hidden") || !strings.Contains(acts[1], "set expireAfterSeconds") {
		t.Fatalf("actions %q, want hidden, then expireAfterSeconds", acts)
	}
	counter.Reset()
	_, err = m.Up(ctx)
	if noHiddenIndexes(t, db) {
		if !errors.Is(err, migrations.ErrUnsupported) {
			t.Fatalf("err = %v, want ErrUnsupported", err)
		}
		if counter.Count("collMod") != 1 || log.contains("does not implement changing expireAfterSeconds") {
			t.Errorf("%d collMod, want only the hidden one, before any TTL change", counter.Count("collMod"))
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	got := indexes(t, db.Collection("c"))["seen_1"]
	if !got.Hidden || got.ExpireAfterSeconds == nil || *got.ExpireAfterSeconds != 7200 {
		t.Errorf("index %+v, want hidden with expireAfterSeconds 7200", got)
	}
}

// sentCommands counts the commands of a client by name, as a rule of the
// wire fault layer sees them.
type sentCommands struct {
	mu     sync.Mutex
	counts map[string]int
}

func (s *sentCommands) Request(cmd bson.D) (out, reply bson.D) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts == nil {
		s.counts = map[string]int{}
	}
	s.counts[cmd[0].Key]++
	return nil, nil
}

func (s *sentCommands) Reply(cmd, reply bson.D) bson.D { return nil }

func (s *sentCommands) count(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[name]
}

func (s *sentCommands) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.counts)
}

// TestEnsureIndexPlainToTTLOnMongoDB50: MongoDB 4.4 and 5.0 (and FerretDB
// 2.x) cannot give a plain index an expireAfterSeconds with collMod. The
// migration says so before it changes anything, naming the server and what
// to do; allowed to rebuild, it drops the index and creates it as a TTL
// index. A server whose buildInfo does not tell is asked with collMod,
// whose refusal says the same.
func TestEnsureIndexPlainToTTLOnMongoDB50(t *testing.T) {
	t.Parallel()
	noBuildInfo := wirefault.Fail("buildInfo", nil, bson.D{{Key: "ok", Value: 0.0}, {Key: "code", Value: int32(323)},
		{Key: "codeName", Value: "APIStrictError"}, {Key: "errmsg", Value: "Provided apiStrict:true, but the command buildInfo is not in API Version 1"}})
	for _, tc := range []struct {
		name   string
		rules  []wirefault.Rule
		server string // as the error names it
	}{
		{"MongoDB 5.0", []wirefault.Rule{wirefault.MongoDBVersion("5.0.26"), wirefault.NoTTLConversion()}, "MongoDB 5.0.26"},
		{"FerretDB 2.x", []wirefault.Rule{wirefault.FerretDB2Version("v2.5.0"), wirefault.NoTTLConversion()}, "FerretDB v2.5.0"},
		{"no buildInfo", []wirefault.Rule{noBuildInfo, wirefault.NoTTLConversion()}, "this server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t, 60*time.Second)
			var log logged
			ctx = zerolog.New(&log).WithContext(ctx)
			db := mongotest.NewDatabase(t)
			var sent sentCommands
			client := mongotest.NewRewrittenClient(t, append([]wirefault.Rule{&sent}, tc.rules...))
			mdb := mongotest.Database(t, client, db.Name())
			ix := migrations.Index{Collection: "sessions", Name: "expiry", Keys: bson.D{{Key: "seen", Value: 1}}}
			plain := migrations.EnsureIndex(1, ix)
			if _, err := newMigrator(t, mdb, migrations.WithMigrations(plain)).Up(ctx); err != nil {
				t.Fatal(err)
			}
			ix.ExpireAfterSeconds = migrations.TTL(time.Hour)
			told := tc.server != "this server"

			m := newMigrator(t, mdb, migrations.WithMigrations(plain, migrations.EnsureIndex(2, ix)))
			steps, err := m.Plan(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(steps) != 1 {
				t.Fatalf("plan %+v, want one step", steps)
			}
			if told && (!errors.Is(steps[0].Err, migrations.ErrIndexConflict) || !strings.Contains(steps[0].Err.Error(), tc.server)) {
				t.Errorf("plan %+v, want ErrIndexConflict naming %s", steps, tc.server)
			}
			if !told && !strings.Contains(strings.Join(steps[0].Actions, "; "), "MongoDB 5.1") {
				t.Errorf("plan %+v, want it to say that the change needs MongoDB 5.1", steps)
			}
			sent.reset()
			_, err = m.Up(ctx)
			if !errors.Is(err, migrations.ErrIndexConflict) || !strings.Contains(err.Error(), tc.server+" cannot do in place") ||
				!strings.Contains(err.Error(), "AllowRebuild") {
				t.Fatalf("err = %v, want ErrIndexConflict naming %s and what to do", err, tc.server)
			}
			var ce mongo.CommandError
			if !told && (!errors.As(err, &ce) || ce.Code != 72) {
				t.Errorf("err = %v does not wrap the server's refusal", err)
			}
			if n := sent.count("dropIndexes") + sent.count("createIndexes"); n != 0 {
				t.Errorf("sent %d dropIndexes/createIndexes", n)
			}
			if n := sent.count("collMod"); told && n != 0 {
				t.Errorf("sent %d collMod to a server that said it cannot", n)
			}
			if got, ok := indexes(t, db.Collection("sessions"))["expiry"]; !ok || got.ExpireAfterSeconds != nil {
				t.Errorf("index %+v (exists: %t), want it plain as it was", got, ok)
			}

			ix.AllowRebuild = true
			m = newMigrator(t, mdb, migrations.WithMigrations(plain, migrations.EnsureIndex(2, ix)))
			if steps, err := m.Plan(ctx); err != nil || len(steps) != 1 || steps[0].Err != nil ||
				told && !strings.Contains(strings.Join(steps[0].Actions, "; "), `drop index "expiry"`) {
				t.Errorf("plan %+v, %v; want the rebuild", steps, err)
			}
			sent.reset()
			if _, err := m.Up(ctx); err != nil {
				t.Fatal(err)
			}
			if sent.count("dropIndexes") != 1 || sent.count("createIndexes") == 0 {
				t.Errorf("dropIndexes %d, createIndexes %d; want the index rebuilt", sent.count("dropIndexes"), sent.count("createIndexes"))
			}
			got, ok := indexes(t, db.Collection("sessions"))["expiry"]
			switch {
			case !ok:
				t.Error("index expiry is gone")
			case ferret():
				// The embedded server has no TTL indexes: a plain one, and a warning.
				if !log.contains("does not implement TTL indexes") {
					t.Error("no warning that the TTL index became a plain one")
				}
			case got.ExpireAfterSeconds == nil || *got.ExpireAfterSeconds != 3600:
				t.Errorf("index %+v, want expireAfterSeconds 3600", got)
			}
		})
	}
}
