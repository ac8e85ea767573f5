package scheduler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
)

// hostileDB is a database whose jobs and runs collections hold, beside
// good documents, documents no reader can read, and the fields each
// reader must name: by collection, _id to field.
func hostileDB(t *testing.T) (db *mongo.Database, good []Run, bad map[string]map[string]string) {
	t.Helper()
	ctx := context.Background()
	db = mongotest.NewDatabase(t)
	base := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	runs, jobs := db.Collection(DefaultRunsCollection), db.Collection(DefaultJobsCollection)
	good = seedHistory(t, runs, "j", base, 8)
	at := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
	if _, err := runs.InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "j@none"}, {Key: "job", Value: "j"}, {Key: "keeper", Value: "k"}, {Key: "outcome", Value: "succeeded"}},
		bson.D{{Key: "_id", Value: "j@outcome"}, {Key: "job", Value: "j"}, {Key: "scheduled", Value: at(3)}, {Key: "outcome", Value: 7}},
		bson.D{{Key: "_id", Value: "j@x"}, {Key: "job", Value: "j"}, {Key: "scheduled", Value: "x"}, {Key: "outcome", Value: "failed"}},
		bson.D{{Key: "_id", Value: "j@attempt"}, {Key: "job", Value: "j"}, {Key: "scheduled", Value: at(30)}, {Key: "attempt", Value: "two"}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "a"}, {Key: "last", Value: at(1)}, {Key: "spec", Value: "@daily"}, {Key: "scheduled", Value: at(1)}, {Key: "outcome", Value: "succeeded"}},
		bson.D{{Key: "_id", Value: "j"}, {Key: "last", Value: "x"}},
		bson.D{{Key: "_id", Value: "m"}, {Key: "scheduled", Value: at(2)}, {Key: "outcome", Value: 7}},
		bson.D{{Key: "_id", Value: "n"}, {Key: "regs", Value: bson.A{1, 2}}},
		bson.D{{Key: "_id", Value: "o"}, {Key: "regs", Value: bson.D{{Key: "h1", Value: bson.D{{Key: "spec", Value: 5}}}}}},
		bson.D{{Key: "_id", Value: "z"}, {Key: "last", Value: at(2)}, {Key: "spec", Value: "@hourly"}},
	}); err != nil {
		t.Fatal(err)
	}
	bad = map[string]map[string]string{
		DefaultRunsCollection: {"j@none": "scheduled", "j@outcome": "outcome", "j@x": "scheduled", "j@attempt": "attempt"},
		DefaultJobsCollection: {"j": "last", "m": "outcome", "n": "regs", "o": "regs.h1.spec"},
	}
	return db, good, bad
}

// checkBad fails t unless got names exactly the documents of want (_id to
// field), each of coll, with an error wrapping ErrBadDocument.
func checkBad(t *testing.T, what, coll string, got []lock.BadDocument, want map[string]string) {
	t.Helper()
	names := map[string]string{}
	for _, b := range got {
		if b.Collection != coll || !errors.Is(b, lock.ErrBadDocument) || b.Problem == "" {
			t.Errorf("%s: %s: want collection %s and ErrBadDocument", what, b, coll)
		}
		id := fmt.Sprint(b.ID)
		if _, twice := names[id]; twice {
			t.Errorf("%s: %s reported twice", what, b)
		}
		names[id] = b.Field
	}
	if !maps.Equal(names, want) {
		t.Errorf("%s: bad documents %v, want %v (_id: field)", what, names, want)
	}
}

func runIDs(runs []Run) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = historyID(r)
	}
	return out
}

// TestHostileDocuments: every reader answers with the good documents and
// names the bad ones (collection, _id, field), and neither panics nor
// fails: a run record without its firing panicked LoadHistory,
// LoadHistoryPage and Scheduler.History, and a wrong-typed field failed
// the whole listing.
func TestHostileDocuments(t *testing.T) {
	t.Parallel()
	db, good, bad := hostileDB(t)
	ctx := context.Background()
	runs, jobs := db.Collection(DefaultRunsCollection), db.Collection(DefaultJobsCollection)
	slices.SortStableFunc(good, func(a, b Run) int {
		if c := b.Scheduled.Compare(a.Scheduled); c != 0 {
			return c
		}
		return b.Attempt - a.Attempt
	})
	wantRuns := runIDs(good)

	t.Run("LoadHistory", func(t *testing.T) {
		got, b, err := LoadHistory(ctx, runs, "j", 0)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(runIDs(got), wantRuns) {
			t.Errorf("runs %v, want %v", runIDs(got), wantRuns)
		}
		checkBad(t, "LoadHistory", DefaultRunsCollection, b, bad[DefaultRunsCollection])
	})
	t.Run("LoadHistoryPage", func(t *testing.T) {
		p, err := LoadHistoryPage(ctx, runs, HistoryQuery{Job: "j", Limit: MaxHistoryPage})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(runIDs(p.Runs), wantRuns) || p.Older != nil {
			t.Errorf("one page: runs %v, older %v; want %v and no older page", runIDs(p.Runs), p.Older, wantRuns)
		}
		checkBad(t, "one page", DefaultRunsCollection, p.Bad, bad[DefaultRunsCollection])
		// Pages of 3: every good record once, in order; the bad ones whose
		// firing is a time are named where they fall (those without one
		// sort after every time, where a cursor's query does not go).
		var seen []Run
		var seenBad []lock.BadDocument
		var cur *HistoryCursor
		for range 20 {
			p, err := LoadHistoryPage(ctx, runs, HistoryQuery{Job: "j", Limit: 3, Cursor: cur})
			if err != nil {
				t.Fatal(err)
			}
			seen, seenBad = append(seen, p.Runs...), append(seenBad, p.Bad...)
			if cur = p.Older; cur == nil {
				break
			}
		}
		if !slices.Equal(runIDs(seen), wantRuns) {
			t.Errorf("pages of 3: runs %v, want %v", runIDs(seen), wantRuns)
		}
		checkBad(t, "pages of 3", DefaultRunsCollection, seenBad, map[string]string{"j@outcome": "outcome", "j@attempt": "attempt"})
	})
	t.Run("LoadRecords", func(t *testing.T) {
		recs, b, err := LoadRecords(ctx, jobs)
		if err != nil {
			t.Fatal(err)
		}
		if names := recordNames(recs); !slices.Equal(names, []string{"a", "z"}) {
			t.Errorf("records %v, want [a z]", names)
		}
		if len(recs) > 0 && (recs[0].LastRun == nil || recs[0].LastRun.Outcome != OutcomeSucceeded) {
			t.Errorf("a: last run %+v", recs[0].LastRun)
		}
		checkBad(t, "LoadRecords", DefaultJobsCollection, b, bad[DefaultJobsCollection])
		recs, b, err = LoadRecords(ctx, jobs, "j", "z")
		if err != nil || !slices.Equal(recordNames(recs), []string{"z"}) {
			t.Errorf("j and z: %v, %v; want z", recordNames(recs), err)
		}
		checkBad(t, "LoadRecords j z", DefaultJobsCollection, b, map[string]string{"j": "last"})
	})
	t.Run("LoadRecordsPage", func(t *testing.T) {
		var names []string
		var seenBad []lock.BadDocument
		after := ""
		for range 10 {
			p, err := LoadRecordsPage(ctx, jobs, RecordsQuery{After: after, Limit: 2})
			if err != nil {
				t.Fatal(err)
			}
			names, seenBad = append(names, recordNames(p.Records)...), append(seenBad, p.Bad...)
			if after = p.Next; after == "" {
				break
			}
		}
		if !slices.Equal(names, []string{"a", "z"}) {
			t.Errorf("records %v, want [a z]", names)
		}
		checkBad(t, "pages of 2", DefaultJobsCollection, seenBad, bad[DefaultJobsCollection])
	})
	t.Run("Scheduler", func(t *testing.T) {
		l, err := lock.New(db)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var events []lock.Event
		session, err := lock.NewSession(l, lock.WithKeeperID("k"), lock.WithObserver(lock.ObserverFunc(func(e lock.Event) {
			if e.Kind == lock.DocumentUnreadable {
				mu.Lock()
				events = append(events, e)
				mu.Unlock()
			}
		})))
		if err != nil {
			t.Fatal(err)
		}
		defer session.Close()
		s, err := New(db, session)
		if err != nil {
			t.Fatal(err)
		}
		noop := func(context.Context) error { return nil }
		for _, name := range []string{"a", "j", "m", "z"} {
			if err := s.AddJob(name, "@daily", noop); err != nil {
				t.Fatal(err)
			}
		}
		infos, err := s.Jobs(ctx)
		if err != nil || len(infos) != 4 {
			t.Fatalf("Jobs: %d, %v; want the four jobs", len(infos), err)
		}
		if infos[0].LastRun == nil || !infos[1].LastClaimed.IsZero() {
			t.Errorf("Jobs: a %+v, j %+v; want a's record and j's none", infos[0].Record, infos[1].Record)
		}
		hist, err := s.History(ctx, "j", 0)
		if err != nil || !slices.Equal(runIDs(hist), wantRuns) {
			t.Errorf("History: %v, %v; want %v", runIDs(hist), err, wantRuns)
		}
		mu.Lock()
		defer mu.Unlock()
		got := map[string]string{}
		for _, e := range events {
			b, ok := errors.AsType[lock.BadDocument](e.Err)
			if !ok || e.Reason != b.String() {
				t.Errorf("event %+v: want a lock.BadDocument naming the document", e)
				continue
			}
			got[fmt.Sprintf("%s document %v, field %q", b.Collection, b.ID, b.Field)] = e.Job
		}
		want := map[string]string{
			`mongolock_jobs document j, field "last"`: "j", `mongolock_jobs document m, field "outcome"`: "m",
			`mongolock_runs document j@none, field "scheduled"`: "", `mongolock_runs document j@outcome, field "outcome"`: "",
			`mongolock_runs document j@x, field "scheduled"`: "", `mongolock_runs document j@attempt, field "attempt"`: "",
		}
		if !maps.Equal(got, want) {
			t.Errorf("events (reason: job) %v, want %v", got, want)
		}
	})
}

func recordNames(recs []Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Name
	}
	return out
}

// TestBadClaimFieldsSettled: a pending claim whose own field is spoiled
// (last: "x") can be started by nobody, its claimant included: the next
// read of the document (a poll) settles it, its firing not run, and the
// next firing is claimed as usual. A claim is never lost for good, and no
// firing runs twice.
func TestBadClaimFieldsSettled(t *testing.T) {
	t.Parallel()
	s, ctx := newTestStore(t, mongotest.NewDatabase(t))
	var reported []lock.BadDocument
	s.bad = func(b lock.BadDocument) { reported = append(reported, b) }
	f := testFiring
	w := mustClaim(t, ctx, s, "j", "@every 1s", f, "K")
	if _, err := s.jobs.UpdateOne(ctx, bson.D{{Key: "_id", Value: "j"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "last", Value: "x"}}}}); err != nil {
		t.Fatal(err)
	}
	if w2, err := s.claim(ctx, "j", "@every 1s", f.Add(time.Second), "L", false); err != nil || w2 != nil {
		t.Fatalf("claim while the spoiled claim is pending: %v %v, want lost", w2, err)
	}
	docs, err := s.poll(ctx, []claimReq{{"j", "@every 1s"}})
	if err != nil || len(docs) != 1 || docs[0].Pending {
		t.Fatalf("poll: %+v %v, want the document, settled", docs, err)
	}
	if len(reported) != 1 || reported[0].Field != "last" || reported[0].ID != "j" || !strings.HasSuffix(reported[0].Problem, "repaired") {
		t.Errorf("reported %v, want j's last, repaired", reported)
	}
	if _, ok, err := s.start(ctx, Run{Job: "j", Keeper: "K", Scheduled: f, Fence: 1}, w, time.Time{}); err != nil || ok {
		t.Errorf("start of the spoiled claim: %v %v, want refused", ok, err)
	}
	w3 := mustClaim(t, ctx, s, "j", "@every 1s", f.Add(2*time.Second), "L")
	if !w3.last.Equal(f.Add(2*time.Second)) || !w3.done.IsZero() {
		t.Errorf("the next claim: last %v done %v, want its own firing alone", w3.last, w3.done)
	}
	if recs, bad, err := LoadRecords(ctx, s.jobs); err != nil || len(bad) > 0 || len(recs) != 1 || !recs[0].Pending {
		t.Errorf("records %+v, bad %v, %v; want j readable, claimed", recs, bad, err)
	}
}
