package scheduler

import (
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/wirefault"
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

// TestHistoryUpsertRacedSentAgain plays the collision FerretDB 2.x (and
// MongoDB) answer a guarded upsert with when another instance inserts the
// record of the same firing between the upsert's match and its insert:
// the racer's record is written, and the upsert fails with a duplicate
// key. Sent again, a record written only where none is leaves the racer's
// record of the run as it is, and a run's record replaces the racer's
// record of the firing not run.
func TestHistoryUpsertRacedSentAgain(t *testing.T) {
	t.Parallel()
	f := testFiring
	ran := Run{Job: "j", Keeper: "K", Scheduled: f, Start: f, Fence: 1<<32 | 5, Outcome: OutcomeSucceeded}
	notRun := Run{Job: "j", Keeper: "L", Scheduled: f, Fence: 1<<32 | 4, Outcome: OutcomeFailed, Error: "not run: lease lost"}
	for _, tt := range []struct {
		name        string
		racer, mine Run
		once        bool
	}{
		{"written once, raced by the run's record", ran, notRun, true},
		{"the run's record, raced by a record of the firing not run", notRun, ran, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			direct := mongotest.NewDatabase(t)
			runs := direct.Collection(defaultConfig().runsColl)
			var raced atomic.Bool
			race := wirefault.RuleFuncs{OnRequest: func(cmd bson.D) (out, reply bson.D) {
				if len(cmd) == 0 || cmd[0].Key != "update" || cmd[0].Value != runs.Name() || raced.Swap(true) {
					return nil, nil
				}
				set, _ := historyDoc(tt.racer)
				doc := append(bson.D{{Key: fieldID, Value: historyID(tt.racer)}}, set...)
				if _, err := runs.InsertOne(t.Context(), append(doc, bson.E{Key: fieldEnd, Value: f})); err != nil {
					t.Error(err)
				}
				return nil, bson.D{{Key: "ok", Value: 1.0}, {Key: "n", Value: int32(0)}, {Key: "nModified", Value: int32(0)},
					{Key: "writeErrors", Value: bson.A{bson.D{{Key: "index", Value: int32(0)}, {Key: "code", Value: int32(11000)},
						{Key: "errmsg", Value: "E11000 duplicate key error collection: " + runs.Name() + " index: _id_"}}}}}
			}}
			db := mongotest.NewRewrittenClient(t, []wirefault.Rule{race}).Database(direct.Name())
			s, ctx := newTestStore(t, db)
			add := s.addHistory
			if tt.once {
				add = s.addHistoryOnce
			}
			if err := add(ctx, tt.mine); err != nil {
				t.Fatalf("record after a collision: %v", err)
			}
			if !raced.Load() {
				t.Fatal("no race played")
			}
			got, err := s.history(ctx, "j", 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0].Outcome != ran.Outcome || got[0].Keeper != ran.Keeper {
				t.Errorf("history %+v, want the run's record alone", got)
			}
		})
	}
}
