package migrations_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/wirefault"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/scheduler"
)

// TestConcurrentUpOnFerretDB2: FerretDB 2.x answers a findAndModify upsert
// that collides on _id with an InternalError, not E11000; concurrent
// deployers must still apply every migration once, none failing.
func TestConcurrentUpOnFerretDB2(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 80*time.Second)
	db := mongotest.NewDatabase(t)
	const instances = 5
	ms := make([]*migrations.Migrator, instances)
	for i := range ms {
		c := mongotest.NewRewrittenClient(t, []wirefault.Rule{wirefault.DuplicateKeyAsInternalError()})
		ms[i] = newMigrator(t, mongotest.Database(t, c, db.Name()), migrations.WithMigrations(slowCounted(3)...))
	}
	upAll(t, db, instances, 3, func(i int) (migrations.Result, error) { return ms[i].Up(ctx) })
}

// readPrefs records the read preference of every command a client sends.
type readPrefs struct {
	mu   sync.Mutex
	seen []sentRead
}

type sentRead struct {
	name, coll, mode string // mode "" when none was sent: primary
}

func (r *readPrefs) started(_ context.Context, e *event.CommandStartedEvent) {
	coll, _ := e.Command.Lookup(e.CommandName).StringValueOK()
	mode := ""
	if rp, ok := e.Command.Lookup("$readPreference").DocumentOK(); ok {
		mode, _ = rp.Lookup("mode").StringValueOK()
	}
	r.mu.Lock()
	r.seen = append(r.seen, sentRead{e.CommandName, coll, mode})
	r.mu.Unlock()
}

// reads returns the reads sent on coll that did not ask for the primary.
func (r *readPrefs) notPrimary(colls ...string) []sentRead {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sentRead
	for _, s := range r.seen {
		switch s.name {
		case "find", "aggregate", "count", "distinct", "listIndexes":
		default:
			continue
		}
		for _, c := range colls {
			if s.coll == c && s.mode != "" && s.mode != "primary" {
				out = append(out, s)
			}
		}
	}
	return out
}

// TestDecidingReadsGoToThePrimary: with a client that prefers secondaries,
// a lagging secondary would show an applied migration as pending (and it
// would run twice), a lock as free, or a job as not yet run. Every read
// that decides something asks for the primary. The server plays a mongos,
// to which the driver passes the read preference of each command, so the
// command monitor sees it.
func TestDecidingReadsGoToThePrimary(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	rec := &readPrefs{}
	client := mongotest.NewRewrittenClient(t, []wirefault.Rule{wirefault.Mongos()},
		options.Client().SetReadPreference(readpref.SecondaryPreferred()).SetMonitor(&event.CommandMonitor{Started: rec.started}))
	db := mongotest.Database(t, client, mongotest.NewDatabase(t).Name())

	// The rules and the monitor see what a secondary read looks like.
	if err := db.Collection("mine").FindOne(ctx, bson.D{}).Err(); err != nil && !strings.Contains(err.Error(), "no documents") {
		t.Fatal(err)
	}
	if got := rec.notPrimary("mine"); len(got) != 1 || got[0].mode != "secondaryPreferred" {
		t.Fatalf("a read with the client's preference: %+v, want one secondaryPreferred find", got)
	}

	// Locks: acquire, refuse, renew, read holders, release.
	l, err := lock.New(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := lock.NewSession(l)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	taken, err := s.AcquireLocks(ctx, "a", "b")
	if err != nil || len(taken.Leases) != 2 {
		t.Fatalf("acquire: %+v %v", taken, err)
	}
	if _, err := l.AcquireLocks(ctx, "someone-else", "a", "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AcquireLocks(ctx, "someone-else", "a"); err != nil {
		t.Fatal(err)
	}
	if err := taken.Leases[0].Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Holder(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Locks(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseLocks(ctx, taken.Leases...); err != nil {
		t.Fatal(err)
	}

	// Migrations: plan, apply, status, apply again (nothing to do).
	mg := newSessionMigrator(t, db, s, migrations.WithMigrations(counted(1, "1"),
		migrations.EnsureIndex(2, migrations.Index{Collection: "things", Name: "n_1", Keys: bson.D{{Key: "n", Value: 1}}})))
	if _, err := mg.Plan(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := mg.Up(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := mg.Status(ctx); err != nil {
		t.Fatal(err)
	}

	// The scheduler: one job run once, its records and history read.
	sc, err := scheduler.New(db, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}, 1)
	if err := sc.AddJob("tick", "@every 1s", func(context.Context) error {
		select {
		case ran <- struct{}{}:
		default:
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := sc.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ran:
	case <-ctx.Done():
		t.Fatal("the job never ran")
	}
	if err := sc.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Jobs(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.History(ctx, "tick", 10); err != nil {
		t.Fatal(err)
	}

	ours := []string{lock.DefaultCollection, migrations.DefaultCollection, scheduler.DefaultJobsCollection, scheduler.DefaultRunsCollection, "things"}
	if got := rec.notPrimary(ours...); len(got) != 0 {
		t.Fatalf("reads that did not ask for the primary: %+v", got)
	}
	n := 0
	for _, c := range ours {
		for _, r := range rec.seen {
			if r.coll == c {
				n++
			}
		}
	}
	if n == 0 {
		t.Fatal("no command on our collections was seen")
	}
}

// TestHiddenIndexesRefusedAsOnFerretDB2: a server without hidden indexes
// refuses them with its own code: FerretDB 2.x with an InternalError (as
// wirefault.HiddenIndexUnsupported plays it), another with BadValue. The
// migration fails with ErrUnsupported and changes nothing, on any backend.
func TestHiddenIndexesRefusedAsOnFerretDB2(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	refusal := bson.D{{Key: "ok", Value: 0.0}, {Key: "code", Value: int32(2)}, {Key: "codeName", Value: "BadValue"},
		{Key: "errmsg", Value: "unsupported index option: hidden"}}
	hasHidden := func(cmd bson.D) bool { return strings.Contains(bson.Raw(mustMarshal(t, cmd)).String(), `"hidden"`) }
	for _, rules := range [][]wirefault.Rule{
		{wirefault.FerretDB2Version("v2.5.0"), wirefault.HiddenIndexUnsupported()},
		{wirefault.Fail("collMod", hasHidden, refusal), wirefault.Fail("createIndexes", hasHidden, refusal)},
	} {
		db := mongotest.NewDatabase(t)
		client := mongotest.NewRewrittenClient(t, rules)
		fdb := mongotest.Database(t, client, db.Name())
		plain := migrations.EnsureIndex(1, migrations.Index{Collection: "c", Keys: bson.D{{Key: "a", Value: 1}}})
		if _, err := newMigrator(t, fdb, migrations.WithMigrations(plain)).Up(ctx); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			what string
			mig  migrations.Migration
		}{
			{"hide an index", migrations.EnsureIndex(2, migrations.Index{Collection: "c", Keys: bson.D{{Key: "a", Value: 1}}, Hidden: true})},
			{"create a hidden index", migrations.EnsureIndex(2, migrations.Index{Collection: "c", Keys: bson.D{{Key: "b", Value: 1}}, Hidden: true})},
		} {
			_, err := newMigrator(t, fdb, migrations.WithMigrations(plain, c.mig)).Up(ctx)
			if !errors.Is(err, migrations.ErrUnsupported) || !strings.Contains(err.Error(), "hidden indexes") {
				t.Fatalf("%s: %v, want ErrUnsupported naming hidden indexes", c.what, err)
			}
			got := indexes(t, db.Collection("c"))
			if _, ok := got["b_1"]; ok || got["a_1"].Hidden || len(got) != 2 {
				t.Fatalf("%s: indexes %+v, want _id and a_1 as they were", c.what, got)
			}
		}
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := bson.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
