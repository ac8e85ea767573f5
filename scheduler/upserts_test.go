package scheduler

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
)

// TestStoreUpsertsNotIDOnly: every upsert the store sends (registration,
// claims, history records, written once or replacing) has a condition
// besides its _id. FerretDB 2.x runs an _id-only upsert as an insert that
// replaces the document it collides with, so two racers would both report
// an insert and the last one's document would win: a registration whose
// $setOnInsert set the job's last claim back, a record of a firing not run
// replacing the record of its run. With a condition every document the
// store writes meets, a colliding insert fails with a duplicate key, and
// the write is sent again and matches (docs/deployments.md).
func TestStoreUpsertsNotIDOnly(t *testing.T) {
	t.Parallel()
	ups := mongotest.NewUpserts()
	client := mongotest.NewClient(t, options.Client().SetMonitor(ups.Monitor()))
	db := mongotest.Database(t, client, mongotest.NewDatabase(t).Name())
	s, ctx := newTestStore(t, db)
	f := testFiring
	if err := s.register(ctx, []regReq{{claimReq: claimReq{"j", "@every 1s"}, reg: regDoc{By: "K"}},
		{claimReq: claimReq{"k", "@every 1s"}}}, f); err != nil {
		t.Fatal(err)
	}
	// Registered again: the documents are there.
	if err := s.register(ctx, []regReq{{claimReq: claimReq{"j", "@every 1s"}, reg: regDoc{By: "L"}}}, f); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, ctx, s, "j", "@every 1s", f, "K")
	mustClaim(t, ctx, s, "new", "@every 1s", f, "K")
	ran := Run{Job: "j", Keeper: "K", Scheduled: f, Start: f, Fence: 1<<32 | 5, Outcome: OutcomeSucceeded}
	notRun := Run{Job: "j", Keeper: "K", Scheduled: f.Add(time.Second), Outcome: OutcomeSkipped, Reason: "why"}
	for _, add := range []func() error{
		func() error { return s.addHistory(ctx, ran) },
		func() error { return s.addHistoryOnce(ctx, ran) }, // there already
		func() error { return s.addHistoryOnce(ctx, notRun) },
		func() error { return s.addHistory(ctx, notRun) }, // replaces it
	} {
		if err := add(); err != nil {
			t.Fatal(err)
		}
	}
	for _, coll := range []string{s.jobs.Name(), s.runs.Name()} {
		if ups.Count(coll) == 0 {
			t.Errorf("no upsert into %q seen: the exercise no longer covers it", coll)
		}
	}
	for _, u := range ups.IDOnly() {
		t.Errorf("%s: its filter is the _id alone", u)
	}
}
