package runner_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/wirefault"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
)

// TestTermLog checks that the term log records two terms of one election,
// a lease lost and a release, with their gap, in two writes a term; and
// that no upsert the runner, its lock or the term log sends has a filter
// of its _id alone (mongotest.Upserts: FerretDB 2.x would let a racing
// insert replace the document).
func TestTermLog(t *testing.T) {
	t.Parallel()
	ups := mongotest.NewUpserts()
	db := mongotest.Database(t, mongotest.NewClient(t, options.Client().SetMonitor(ups.Monitor())), mongotest.NewDatabase(t).Name())
	ctx := context.Background()
	if err := runner.EnsureTermIndexes(ctx, db.Collection(runner.DefaultTermsCollection), time.Hour, func(string) {}); err != nil {
		t.Fatal(err)
	}
	terms, err := runner.NewTermLog(db)
	if err != nil {
		t.Fatal(err)
	}
	locker, err := lock.New(db, lock.WithTTL(dbTTL))
	if err != nil {
		t.Fatal(err)
	}
	session, err := lock.NewSession(locker, lock.WithObserver(terms))
	if err != nil {
		t.Fatal(err)
	}
	r, err := runner.New(session, "elect")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if ran, err := r.RunTaskOnLeader(ctx, func(context.Context) error { return nil }); err != nil || !ran {
			t.Fatalf("ran %v, err %v", ran, err)
		}
		if err := r.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := session.Close(); err != nil {
		t.Fatal(err)
	}
	if err := terms.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got, _, err := runner.LoadTerms(ctx, db.Collection(runner.DefaultTermsCollection), "elect", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d terms recorded, want 2: %+v", len(got), got)
	}
	for _, tm := range got {
		if tm.KeeperID != session.KeeperID() || tm.Start.IsZero() || tm.End.Before(tm.Start) || tm.Lost || tm.Reason == "" {
			t.Errorf("term %+v", tm)
		}
	}
	if got[0].Fence <= got[1].Fence {
		t.Errorf("terms not newest first: fences %d, %d", got[0].Fence, got[1].Fence)
	}
	if terms.Dropped() != 0 {
		t.Errorf("%d events dropped", terms.Dropped())
	}
	if ups.Count(runner.DefaultTermsCollection) == 0 || ups.Count(lock.DefaultCollection) == 0 {
		t.Errorf("upserts seen: %d into the term log, %d into the locks: the test no longer covers them",
			ups.Count(runner.DefaultTermsCollection), ups.Count(lock.DefaultCollection))
	}
	for _, u := range ups.IDOnly() {
		t.Errorf("%s: its filter is the _id alone", u)
	}
	// Observe after Close drops nothing and writes nothing.
	terms.Observe(lock.Event{Kind: lock.TermStarted, LockID: "elect", Fence: 1})
	if _, _, err := runner.LoadTerms(ctx, db.Collection(runner.DefaultTermsCollection), "", 0); !errors.Is(err, runner.ErrInvalidOption) {
		t.Errorf("limit 0: %v", err)
	}
}

// TestTermLogUpsertRacedSentAgain plays a term's end written while another
// term log given the same events inserts the term's document (its start):
// the guarded upsert collides with a duplicate key, is sent again, and
// finds the document, so the term has its start and its end and no write
// is dropped.
func TestTermLogUpsertRacedSentAgain(t *testing.T) {
	t.Parallel()
	direct := mongotest.NewDatabase(t)
	terms := direct.Collection(runner.DefaultTermsCollection)
	start := time.Now().UTC().Truncate(time.Millisecond)
	var raced atomic.Bool
	race := wirefault.RuleFuncs{OnRequest: func(cmd bson.D) (out, reply bson.D) {
		if len(cmd) == 0 || cmd[0].Key != "update" || cmd[0].Value != terms.Name() || raced.Swap(true) {
			return nil, nil
		}
		if _, err := terms.InsertOne(t.Context(), bson.D{{Key: "_id", Value: "elect#5"}, {Key: "lock", Value: "elect"},
			{Key: "fence", Value: int64(5)}, {Key: "keeper", Value: "K"}, {Key: "start", Value: start}}); err != nil {
			t.Error(err)
		}
		return nil, bson.D{{Key: "ok", Value: 1.0}, {Key: "n", Value: int32(0)}, {Key: "nModified", Value: int32(0)},
			{Key: "writeErrors", Value: bson.A{bson.D{{Key: "index", Value: int32(0)}, {Key: "code", Value: int32(11000)},
				{Key: "errmsg", Value: "E11000 duplicate key error collection: " + terms.Name() + " index: _id_"}}}}}
	}}
	db := mongotest.NewRewrittenClient(t, []wirefault.Rule{race}).Database(direct.Name())
	log, err := runner.NewTermLog(db)
	if err != nil {
		t.Fatal(err)
	}
	log.Observe(lock.Event{Kind: lock.TermEnded, LockID: "elect", Fence: 5, KeeperID: "K", Reason: "released"})
	if err := log.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !raced.Load() {
		t.Fatal("no race played")
	}
	got, _, err := runner.LoadTerms(t.Context(), direct.Collection(runner.DefaultTermsCollection), "elect", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got[0].Start.Equal(start) || got[0].End.IsZero() || log.Dropped() != 0 {
		t.Errorf("terms %+v, %d writes dropped; want one with its start and end", got, log.Dropped())
	}
}
