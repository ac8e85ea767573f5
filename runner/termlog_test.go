package runner_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
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
	got, err := runner.LoadTerms(ctx, db.Collection(runner.DefaultTermsCollection), "elect", 10)
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
	if _, err := runner.LoadTerms(ctx, db.Collection(runner.DefaultTermsCollection), "", 0); !errors.Is(err, runner.ErrInvalidOption) {
		t.Errorf("limit 0: %v", err)
	}
}
