package cli

import (
	"context"
	"fmt"
	"html"
	"io"
	"maps"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/internal/redact"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/metrics"
	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/scheduler"
	"github.com/mongolock/mongolock/ui"
)

// hostile is a database whose every collection the module reads holds,
// beside good documents, documents no reader can trust: wrong types,
// missing fields, _ids of other types, nested junk, numbers out of range;
// and documents that may read or not but must break nothing: strings
// that are not UTF-8, huge values.
type hostile struct {
	db *mongo.Database
	// bad is, by collection, the _ids (fmt.Sprint) of the documents every
	// reader of it must skip and report; tolerated those it may return or
	// report.
	bad, tolerated map[string][]string
}

// huge is a value of a megabyte.
var huge = strings.Repeat("h", 1<<20)

// hostileURI is a connection string that documents of every collection
// carry, good and bad, in their ids and their text (errors, notes,
// keepers, operators): no page, log line, metric label or CLI output may
// show hostilePw or hostileUser.
const (
	hostileUser = "mallory"
	hostilePw   = "H0stilePw"
	hostileURI  = "mongodb://" + hostileUser + ":" + hostilePw + "@db.internal:27017/?authMechanismProperties=AWS_SESSION_TOKEN:tok" + hostilePw
)

// leaks returns the first credential of hostileURI that text shows, or "".
func leaks(text string) string {
	for _, s := range []string{hostilePw, hostileUser} {
		if strings.Contains(text, s) {
			return s
		}
	}
	return ""
}

func newHostile(t *testing.T, ctx context.Context) hostile {
	t.Helper()
	db, _ := on(t)
	h := hostile{db: db, bad: map[string][]string{}, tolerated: map[string][]string{}}
	now := time.Now().UTC().Truncate(time.Millisecond)
	day := now.Add(-time.Hour)

	// Good documents, written by the module.
	l, err := lock.New(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := acquireAs(ctx, l, "app/good", "keeper-1"); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	m, err := migrations.New(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	insert := func(coll string, docs ...bson.D) {
		t.Helper()
		for _, d := range docs {
			if _, err := db.Collection(coll).InsertOne(ctx, d); err != nil {
				t.Fatalf("seed %s %v: %v", coll, d[0].Value, err)
			}
		}
	}
	insert(scheduler.DefaultJobsCollection, bson.D{{Key: "_id", Value: "good"}, {Key: "last", Value: day}, {Key: "spec", Value: "@hourly"},
		{Key: "by", Value: "keeper-1"}, {Key: "keeper", Value: "keeper-1"}, {Key: "scheduled", Value: day}, {Key: "start", Value: day},
		{Key: "end", Value: day.Add(time.Second)}, {Key: "outcome", Value: "succeeded"}})
	insert(scheduler.DefaultRunsCollection, bson.D{{Key: "_id", Value: "good@1"}, {Key: "job", Value: "good"}, {Key: "keeper", Value: "keeper-1"},
		{Key: "scheduled", Value: day}, {Key: "start", Value: day}, {Key: "end", Value: day.Add(time.Second)}, {Key: "outcome", Value: "succeeded"}})
	insert(runner.DefaultTermsCollection, bson.D{{Key: "_id", Value: "elect#1"}, {Key: "lock", Value: "elect"}, {Key: "fence", Value: int64(1)},
		{Key: "keeper", Value: "keeper-1"}, {Key: "start", Value: day}, {Key: "end", Value: day.Add(time.Minute)}})
	insert(ui.DefaultActionsCollection, bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "kind", Value: "pause"}, {Key: "by", Value: "alice"},
		{Key: "job", Value: "good"}, {Key: "at", Value: day}})
	// Good documents whose text carries a connection string.
	if _, ok, err := acquireAs(ctx, l, "app/keeper-uri", hostileURI); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	if _, ok, err := acquireAs(ctx, l, "app/"+hostileURI, "keeper-1"); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	failedRun := bson.D{{Key: "keeper", Value: hostileURI}, {Key: "scheduled", Value: day}, {Key: "start", Value: day},
		{Key: "end", Value: day.Add(time.Second)}, {Key: "outcome", Value: "failed"}, {Key: "error", Value: "dial " + hostileURI + ": refused"}}
	insert(scheduler.DefaultJobsCollection, append(bson.D{{Key: "_id", Value: "secret"}, {Key: "last", Value: day}, {Key: "spec", Value: "@hourly"},
		{Key: "by", Value: hostileURI}, {Key: "paused", Value: true}, {Key: "pnote", Value: "see " + hostileURI}, {Key: "pby", Value: hostileURI},
		{Key: "regs", Value: bson.D{{Key: "@hourly", Value: bson.D{{Key: "by", Value: hostileURI}}}}}}, failedRun...))
	insert(scheduler.DefaultRunsCollection, append(bson.D{{Key: "_id", Value: "secret@1"}, {Key: "job", Value: "secret"}}, failedRun...),
		append(bson.D{{Key: "_id", Value: "good@secret"}, {Key: "job", Value: "good"}}, failedRun...))
	insert(runner.DefaultTermsCollection, bson.D{{Key: "_id", Value: "elect#2"}, {Key: "lock", Value: "elect"}, {Key: "fence", Value: int64(2)},
		{Key: "keeper", Value: hostileURI}, {Key: "start", Value: day.Add(time.Minute)}, {Key: "end", Value: day.Add(2 * time.Minute)},
		{Key: "reason", Value: "lost: dial " + hostileURI}})
	insert(ui.DefaultActionsCollection, bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "kind", Value: "pause"}, {Key: "by", Value: hostileURI},
		{Key: "job", Value: "secret"}, {Key: "note", Value: hostileURI}, {Key: "at", Value: day}})

	// The bad and the odd.
	nested := bson.D{{Key: "x", Value: bson.A{1, bson.D{{Key: "y", Value: bson.D{{Key: "z", Value: bson.A{}}}}}}}}
	seed := func(coll string, bad bool, docs ...bson.D) {
		t.Helper()
		insert(coll, docs...)
		for _, d := range docs {
			if bad {
				h.bad[coll] = append(h.bad[coll], fmt.Sprint(d[0].Value))
			} else {
				h.tolerated[coll] = append(h.tolerated[coll], fmt.Sprint(d[0].Value))
			}
		}
	}
	lease := func(id any, fields ...bson.E) bson.D {
		d := bson.D{{Key: "_id", Value: id}, {Key: "kid", Value: "k"}, {Key: "ts", Value: now}, {Key: "epoch", Value: int64(1)}, {Key: "seq", Value: int64(1)}}
		for _, f := range fields {
			if i := slices.IndexFunc(d, func(e bson.E) bool { return e.Key == f.Key }); i >= 0 {
				d[i] = f
			} else {
				d = append(d, f)
			}
		}
		return d
	}
	seed(lock.DefaultCollection, true,
		lease("app/kid-int", bson.E{Key: "kid", Value: int32(3)}),
		lease("app/ts-string", bson.E{Key: "ts", Value: "yesterday"}),
		lease("app/no-ts", bson.E{Key: "ts", Value: nil}),
		lease(int32(42)),
		lease("app/nested", bson.E{Key: "kid", Value: nested}),
		lease("app/fence", bson.E{Key: "epoch", Value: int64(-1)}, bson.E{Key: "seq", Value: "1"}),
		lease("app/ttl", bson.E{Key: "ttl", Value: 9e15}),
		lease("app/kid-array", bson.E{Key: "kid", Value: bson.A{"a", "b"}}),
		lease("app/ttl-fraction", bson.E{Key: "ttl", Value: 1500.5}),
		lease("app/seq-fraction", bson.E{Key: "seq", Value: 1.5}),
		lease("app/bad-"+hostileURI, bson.E{Key: "kid", Value: int32(3)}))
	seed(lock.DefaultCollection, false,
		lease("app/utf8-\xff", bson.E{Key: "kid", Value: "k\xfe"}),
		lease("app/huge", bson.E{Key: "kid", Value: huge}))

	seed(scheduler.DefaultJobsCollection, true,
		bson.D{{Key: "_id", Value: "bad-last"}, {Key: "last", Value: "x"}, {Key: "spec", Value: "@daily"}},
		bson.D{{Key: "_id", Value: "bad-outcome"}, {Key: "last", Value: day}, {Key: "scheduled", Value: day}, {Key: "outcome", Value: 7}},
		bson.D{{Key: "_id", Value: "bad-regs"}, {Key: "last", Value: day}, {Key: "regs", Value: bson.A{1, 2}}},
		bson.D{{Key: "_id", Value: "bad-nested"}, {Key: "last", Value: day}, {Key: "regs", Value: bson.D{{Key: "h1", Value: bson.D{{Key: "spec", Value: nested}}}}}},
		bson.D{{Key: "_id", Value: "bad-fails"}, {Key: "last", Value: day}, {Key: "fails", Value: 1e300}},
		bson.D{{Key: "_id", Value: "bad-trig"}, {Key: "last", Value: day}, {Key: "trig", Value: "now"}},
		bson.D{{Key: "_id", Value: int32(7)}, {Key: "last", Value: day}},
		bson.D{{Key: "_id", Value: "bad-" + hostileURI}, {Key: "last", Value: "x"}, {Key: "error", Value: hostileURI}})
	seed(scheduler.DefaultJobsCollection, false,
		bson.D{{Key: "_id", Value: "odd-utf8-\xff"}, {Key: "last", Value: day}, {Key: "spec", Value: "@daily \xfe"}},
		bson.D{{Key: "_id", Value: "odd-huge"}, {Key: "last", Value: day}, {Key: "spec", Value: "@daily"}, {Key: "paused", Value: true},
			{Key: "pnote", Value: huge}})

	run := func(id any, fields ...bson.E) bson.D {
		return append(bson.D{{Key: "_id", Value: id}, {Key: "job", Value: "good"}}, fields...)
	}
	seed(scheduler.DefaultRunsCollection, true,
		run("good@none", bson.E{Key: "outcome", Value: "succeeded"}),
		run("good@x", bson.E{Key: "scheduled", Value: "x"}),
		run("good@outcome", bson.E{Key: "scheduled", Value: day.Add(-time.Minute)}, bson.E{Key: "outcome", Value: 7}),
		run("good@count", bson.E{Key: "scheduled", Value: day.Add(-2 * time.Minute)}, bson.E{Key: "end", Value: now},
			bson.E{Key: "outcome", Value: "failed"}, bson.E{Key: "count", Value: "many"}),
		run("good@nested", bson.E{Key: "scheduled", Value: day.Add(-3 * time.Minute)}, bson.E{Key: "keeper", Value: nested}),
		run("good@"+hostileURI, bson.E{Key: "scheduled", Value: "x"}, bson.E{Key: "error", Value: hostileURI}))
	seed(scheduler.DefaultRunsCollection, false,
		run("good@utf8-\xff", bson.E{Key: "scheduled", Value: day.Add(-4 * time.Minute)}, bson.E{Key: "error", Value: "\xfe\xff"},
			bson.E{Key: "end", Value: now}, bson.E{Key: "outcome", Value: "failed"}),
		run("good@huge", bson.E{Key: "scheduled", Value: day.Add(-5 * time.Minute)}, bson.E{Key: "error", Value: huge},
			bson.E{Key: "end", Value: now}, bson.E{Key: "outcome", Value: "failed"}),
		run(int32(5), bson.E{Key: "scheduled", Value: day.Add(-6 * time.Minute)}))

	seed(runner.DefaultTermsCollection, true,
		bson.D{{Key: "_id", Value: "t-nolock"}, {Key: "keeper", Value: "k"}, {Key: "start", Value: day}},
		bson.D{{Key: "_id", Value: "t-fence"}, {Key: "lock", Value: "elect"}, {Key: "fence", Value: "one"}, {Key: "start", Value: day}},
		bson.D{{Key: "_id", Value: "t-nested"}, {Key: "lock", Value: nested}, {Key: "start", Value: day}},
		bson.D{{Key: "_id", Value: "t-start"}, {Key: "lock", Value: "elect"}, {Key: "start", Value: "then"}},
		bson.D{{Key: "_id", Value: "t-" + hostileURI}, {Key: "lock", Value: "elect"}, {Key: "fence", Value: "one"}, {Key: "keeper", Value: hostileURI}, {Key: "start", Value: day}})
	seed(runner.DefaultTermsCollection, false,
		bson.D{{Key: "_id", Value: "t-utf8"}, {Key: "lock", Value: "elect"}, {Key: "keeper", Value: "\xff"}, {Key: "start", Value: day}},
		bson.D{{Key: "_id", Value: "t-huge"}, {Key: "lock", Value: "elect"}, {Key: "reason", Value: huge}, {Key: "start", Value: day}})

	seed(migrations.DefaultCollection, true,
		bson.D{{Key: "_id", Value: "str"}, {Key: "state", Value: "applied"}},
		bson.D{{Key: "_id", Value: int64(9001)}, {Key: "state", Value: int32(5)}},
		bson.D{{Key: "_id", Value: int64(9002)}, {Key: "state", Value: "applied"}, {Key: "startedAt", Value: nested}},
		bson.D{{Key: "_id", Value: hostileURI}, {Key: "state", Value: "failed"}, {Key: "error", Value: hostileURI}})
	seed(migrations.DefaultCollection, false,
		bson.D{{Key: "_id", Value: int64(9003)}, {Key: "state", Value: "failed"}, {Key: "error", Value: huge + "\xff"}},
		bson.D{{Key: "_id", Value: int64(9004)}, {Key: "state", Value: "failed"}, {Key: "keeper", Value: hostileURI}, {Key: "error", Value: "dial " + hostileURI}})

	seed(ui.DefaultActionsCollection, true,
		bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "kind", Value: int32(5)}, {Key: "job", Value: "good"}, {Key: "at", Value: now}},
		bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "kind", Value: "pause"}, {Key: "job", Value: "good"}, {Key: "at", Value: "yesterday"}},
		bson.D{{Key: "_id", Value: "str"}, {Key: "kind", Value: "release"}, {Key: "lock", Value: "app/good"}, {Key: "at", Value: now}},
		bson.D{{Key: "_id", Value: "act-" + hostileURI}, {Key: "kind", Value: int32(5)}, {Key: "job", Value: "secret"}, {Key: "by", Value: hostileURI},
			{Key: "note", Value: hostileURI}, {Key: "at", Value: now}})
	seed(ui.DefaultActionsCollection, false,
		bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "kind", Value: "pause"}, {Key: "by", Value: "\xff"}, {Key: "job", Value: "good"},
			{Key: "note", Value: huge}, {Key: "at", Value: now}})
	return h
}

// snapshot is every document of every collection of db but the clock
// document ReadClock stamps (a reader's one write, by design), as
// extended JSON, sorted.
func snapshot(t *testing.T, ctx context.Context, db *mongo.Database) map[string][]string {
	t.Helper()
	names, err := db.ListCollectionNames(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, n := range names {
		cur, err := db.Collection(n).Find(ctx, bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		for cur.Next(ctx) {
			if id, err := cur.Current.LookupErr("_id"); err == nil && id.Type == bson.TypeEmbeddedDocument &&
				id.Document().String() == bson.Raw(must(bson.Marshal(mongoutil.ClockDocID))).String() {
				continue
			}
			out[n] = append(out[n], cur.Current.String())
		}
		if err := cur.Err(); err != nil {
			t.Fatal(err)
		}
		slices.Sort(out[n])
	}
	return out
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// checkReported fails t unless bad (what a reader of coll reported) names
// every document of h.bad[coll] and nothing but those of h.bad and
// h.tolerated, each with a field or a problem.
func (h hostile) checkReported(t *testing.T, what, coll string, bad []lock.BadDocument, scope func(id string) bool) {
	t.Helper()
	got := map[string]bool{}
	for _, b := range bad {
		id := fmt.Sprint(b.ID)
		got[id] = true
		if b.Collection != coll || b.Problem == "" {
			t.Errorf("%s: %s: want collection %s and a problem", what, b, coll)
		}
		if !slices.Contains(h.bad[coll], id) && !slices.Contains(h.tolerated[coll], id) {
			t.Errorf("%s: reported a good document: %s", what, b)
		}
	}
	for _, id := range h.bad[coll] {
		if (scope == nil || scope(id)) && !got[id] {
			t.Errorf("%s: bad document %s of %s not reported", what, id, coll)
		}
	}
}

// TestHostileDocuments seeds every collection the module reads (locks,
// jobs, runs, terms, migrations, actions) with bad and odd documents beside
// good ones, and reads them with every reader: the library's (Locks,
// LocksPage, LocksWithPrefix, Holder, LoadRecords, LoadRecordsPage,
// LoadHistory, LoadHistoryPage, LoadTerms, migrations Status), every CLI
// command that lists things, and every dashboard page. Each returns the
// good documents, reports the bad ones (collection, _id, field, problem),
// never panics nor answers 5xx, and writes nothing. Before, one bad term
// failed LoadTerms and the elections and lock pages, one bad migration
// record failed Status, migrate status and the migrations page, and one
// bad action or problem record failed the job and overview pages.
func TestHostileDocuments(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := newHostile(t, ctx)
	db := h.db
	before := snapshot(t, ctx, db)

	t.Run("lock", func(t *testing.T) {
		var bad []lock.BadDocument
		l, err := lock.New(db, lock.WithBadDocuments(func(b lock.BadDocument) { bad = append(bad, b) }))
		if err != nil {
			t.Fatal(err)
		}
		ids := func(hs []lock.Holder) []string {
			var out []string
			for _, h := range hs {
				out = append(out, h.LockID)
			}
			return out
		}
		for what, read := range map[string]func() ([]lock.Holder, error){
			"Locks":           func() ([]lock.Holder, error) { return l.Locks(ctx) },
			"LocksWithPrefix": func() ([]lock.Holder, error) { return l.LocksWithPrefix(ctx, "app/") },
			"LocksPage":       func() ([]lock.Holder, error) { p, err := l.LocksPage(ctx, "", "", 1000); return p, err },
		} {
			bad = nil
			hs, err := read()
			if err != nil || !slices.Contains(ids(hs), "app/good") {
				t.Errorf("%s: %v, %v; want app/good among them", what, ids(hs), err)
			}
			h.checkReported(t, what, lock.DefaultCollection, bad, func(id string) bool { return what != "LocksWithPrefix" || strings.HasPrefix(id, "app/") })
		}
		if hd, err := l.Holder(ctx, "app/good"); err != nil || hd.KeeperID != "keeper-1" {
			t.Errorf("Holder of the good lock: %+v, %v", hd, err)
		}
		for _, id := range []string{"app/kid-int", "app/ts-string", "app/nested"} {
			if _, err := l.Holder(ctx, id); err == nil || !strings.Contains(err.Error(), id) {
				t.Errorf("Holder of %s: %v, want a bad document error naming it", id, err)
			}
		}
	})
	t.Run("scheduler", func(t *testing.T) {
		jobs, runs := db.Collection(scheduler.DefaultJobsCollection), db.Collection(scheduler.DefaultRunsCollection)
		recs, bad, err := scheduler.LoadRecords(ctx, jobs)
		if err != nil || !slices.ContainsFunc(recs, func(r scheduler.Record) bool { return r.Name == "good" }) {
			t.Errorf("LoadRecords: %d records, %v; want good among them", len(recs), err)
		}
		h.checkReported(t, "LoadRecords", scheduler.DefaultJobsCollection, bad, nil)
		p, err := scheduler.LoadRecordsPage(ctx, jobs, scheduler.RecordsQuery{Limit: scheduler.MaxRecordsPage})
		if err != nil || !slices.ContainsFunc(p.Records, func(r scheduler.Record) bool { return r.Name == "good" }) {
			t.Errorf("LoadRecordsPage: %d records, %v; want good among them", len(p.Records), err)
		}
		h.checkReported(t, "LoadRecordsPage", scheduler.DefaultJobsCollection, p.Bad, nil)
		hist, bad, err := scheduler.LoadHistory(ctx, runs, "good", 0)
		if err != nil || !slices.ContainsFunc(hist, func(r scheduler.Run) bool { return r.Keeper == "keeper-1" }) {
			t.Errorf("LoadHistory: %d runs, %v; want the good run among them", len(hist), err)
		}
		h.checkReported(t, "LoadHistory", scheduler.DefaultRunsCollection, bad, nil)
		hp, err := scheduler.LoadHistoryPage(ctx, runs, scheduler.HistoryQuery{Job: "good", Limit: scheduler.MaxHistoryPage})
		if err != nil || !slices.ContainsFunc(hp.Runs, func(r scheduler.Run) bool { return r.Keeper == "keeper-1" }) {
			t.Errorf("LoadHistoryPage: %d runs, %v; want the good run among them", len(hp.Runs), err)
		}
		h.checkReported(t, "LoadHistoryPage", scheduler.DefaultRunsCollection, hp.Bad, nil)
	})
	t.Run("runner", func(t *testing.T) {
		terms, bad, err := runner.LoadTerms(ctx, db.Collection(runner.DefaultTermsCollection), "", 100)
		if err != nil || !slices.ContainsFunc(terms, func(t runner.Term) bool { return t.LockID == "elect" && t.Fence == 1 }) {
			t.Errorf("LoadTerms: %+v, %v; want the good term among them", terms, err)
		}
		h.checkReported(t, "LoadTerms", runner.DefaultTermsCollection, bad, nil)
	})
	t.Run("migrations", func(t *testing.T) {
		m, err := migrations.New(db)
		if err != nil {
			t.Fatal(err)
		}
		es, err := m.Status(ctx)
		if err != nil {
			t.Fatalf("Status: %v", err)
		}
		var bad []lock.BadDocument
		applied := 0
		for _, e := range es {
			if e.Bad != nil {
				bad = append(bad, *e.Bad)
				if e.State != migrations.StateUnreadable {
					t.Errorf("version %d: state %s with a bad record, want %s", e.Version, e.State, migrations.StateUnreadable)
				}
			}
			if e.State == migrations.StateApplied {
				applied++
			}
		}
		if applied == 0 {
			t.Errorf("Status: no built-in migration applied: %+v", es)
		}
		h.checkReported(t, "Status", migrations.DefaultCollection, bad, nil)
		if _, err := m.Up(ctx); err != nil {
			t.Errorf("Up with only unregistered bad records: %v", err)
		}
	})
	t.Run("cli", func(t *testing.T) {
		_, g := on(t)
		g[3] = db.Name()
		for _, c := range []struct {
			args []string
			want string
			bad  []string // collections whose bad documents stderr names
		}{
			{[]string{"jobs"}, "good", []string{scheduler.DefaultJobsCollection}},
			{[]string{"jobs", "--json"}, "good", []string{scheduler.DefaultJobsCollection}},
			{[]string{"jobs", "good", "--history", "50"}, "keeper-1", []string{scheduler.DefaultRunsCollection}},
			{[]string{"jobs", "--json", "--history", "50"}, "keeper-1", []string{scheduler.DefaultJobsCollection}},
			{[]string{"locks"}, "app/good", []string{lock.DefaultCollection}},
			{[]string{"locks", "--json"}, "app/good", []string{lock.DefaultCollection}},
			{[]string{"migrate", "status"}, "unreadable", nil},
			{[]string{"migrate", "status", "--json"}, "unreadable", nil},
			{[]string{"migrate", "plan"}, "", nil},
			{[]string{"jobs", "secret", "--history", "5"}, "mongodb://***@db.internal", nil},
			{[]string{"jobs", "--json", "secret"}, "mongodb://***@db.internal", nil},
			{[]string{"locks", "show", "app/keeper-uri"}, "mongodb://***@db.internal", nil},
			{[]string{"locks", "show", "--json", "app/keeper-uri"}, "mongodb://***@db.internal", nil},
		} {
			r := cli(t, args(g, c.args...)...)
			if s := leaks(r.stdout + r.stderr); s != "" {
				t.Errorf("%v prints %q of a connection string: %.2000s", c.args, s, r)
			}
			if r.code != ExitOK || !strings.Contains(r.stdout, c.want) {
				t.Errorf("%v: want exit 0 and %q in stdout: %.2000s", c.args, c.want, r)
				continue
			}
			for _, coll := range c.bad {
				for _, id := range h.bad[coll] {
					id = redact.URIs(id) // named as shown
					if !strings.Contains(r.stderr, fmt.Sprintf("%q", id)) && !strings.Contains(r.stderr, id) {
						t.Errorf("%v: stderr does not name bad document %s of %s: %.2000s", c.args, id, coll, r.stderr)
					}
				}
			}
		}
	})
	t.Run("ui", func(t *testing.T) {
		var log syncBuffer
		hd, err := ui.New(db, ui.WithLogger(zerolog.New(&log)))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(hd)
		defer srv.Close()
		for _, c := range []struct{ path, want string }{
			{"/", "good"},
			{"/jobs", "good"},
			{"/jobs?prefix=bad", ""},
			{"/jobs/good", "keeper-1"},
			{"/jobs/good?outcome=failed", ""},
			{"/jobs/odd-huge", ""},
			{"/jobs/bad-outcome", "cannot be read"},
			{"/locks", "app/good"},
			{"/locks/app/good", "keeper-1"},
			{"/locks/app/kid-int", ""},
			{"/locks/elect", ""},
			{"/elections", "elect"},
			{"/migrations", "unreadable"},
			{"/jobs/secret", "mongodb://***@db.internal"},
			{"/locks/app/keeper-uri", "mongodb://***@db.internal"},
			{"/locks/elect", ""},
			{"/locks?prefix=app/", "mongodb://***@db.internal"},
		} {
			resp, err := srv.Client().Get(srv.URL + c.path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			page := html.UnescapeString(string(body))
			if resp.StatusCode >= 500 || !strings.Contains(page, c.want) {
				t.Errorf("GET %s: %d, want no 5xx and %q: %.1000s", c.path, resp.StatusCode, c.want, body)
			}
			if s := leaks(page); s != "" {
				i := strings.Index(page, s)
				t.Errorf("GET %s shows %q of a connection string: …%s…", c.path, s, page[max(i-200, 0):min(i+40, len(page))])
			}
		}
		if s := leaks(log.String()); s != "" {
			t.Errorf("the dashboard's log shows %q of a connection string:\n%.3000s", s, log.String())
		}
		if !strings.Contains(log.String(), "skipped a bad document") {
			t.Errorf("the dashboard logged no bad document:\n%.3000s", log.String())
		}
	})
	t.Run("metrics", func(t *testing.T) {
		// Metric labels: what a Session, its scheduler and its Locker's
		// readers meet in the database never becomes one.
		var log syncBuffer
		l, err := lock.New(db, lock.WithTTL(time.Minute), lock.WithLogger(zerolog.New(&log)))
		if err != nil {
			t.Fatal(err)
		}
		sess, err := lock.NewSession(l, lock.WithSessionLogger(zerolog.New(&log)))
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		reg := prometheus.NewRegistry()
		if _, err := metrics.Register(reg, sess); err != nil {
			t.Fatal(err)
		}
		s, err := scheduler.New(db, sess)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range []string{"good", "secret"} {
			if err := s.AddJob(j, "@hourly", func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Jobs(ctx); err != nil {
			t.Errorf("Jobs: %v", err)
		}
		for _, j := range []string{"secret", "good"} {
			if _, err := s.History(ctx, j, 50); err != nil {
				t.Errorf("History of %s: %v", j, err)
			}
		}
		if _, err := l.Locks(ctx); err != nil {
			t.Errorf("Locks: %v", err)
		}
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				for _, lp := range m.GetLabel() {
					if s := leaks(lp.GetValue()); s != "" {
						t.Errorf("metric %s has label %s=%q", f.GetName(), lp.GetName(), lp.GetValue())
					}
				}
			}
		}
		if s := leaks(log.String()); s != "" {
			t.Errorf("the library's log shows %q of a connection string:\n%.3000s", s, log.String())
		}
	})

	if after := snapshot(t, ctx, db); !maps.EqualFunc(before, after, slices.Equal[[]string]) {
		for coll := range after {
			if !slices.Equal(before[coll], after[coll]) {
				t.Errorf("collection %s changed: %d documents before, %d after", coll, len(before[coll]), len(after[coll]))
			}
		}
		for coll := range before {
			if _, ok := after[coll]; !ok {
				t.Errorf("collection %s gone", coll)
			}
		}
	}
}
