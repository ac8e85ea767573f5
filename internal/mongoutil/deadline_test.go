package mongoutil_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/internal/wirefault"
)

// TestDeadlines: a write under a deadline applies before it and not
// after, by the server's clock, in each command the scheduler sends one
// in (findAndModify, update, a bulk update), and ProbeDeadlines says the
// server evaluates them: MongoDB and FerretDB 2 do, and the embedded
// server's proxy does for FerretDB 1.24.
func TestDeadlines(t *testing.T) {
	db := mongotest.NewDatabase(t)
	ctx := context.Background()
	c := db.Collection("deadlines")
	if _, err := c.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: "x"}}, bson.D{{Key: "_id", Value: "y"}}}); err != nil {
		t.Fatal(err)
	}
	// A probe the server could not answer in time (MaxTimeMSExpired, a
	// server error the driver calls a timeout) says nothing of what it
	// evaluates: an error, not false (seed 498).
	timedOut := mongotest.NewRewrittenClient(t, []wirefault.Rule{wirefault.Fail("find", nil, bson.D{
		{Key: "ok", Value: 0.0}, {Key: "errmsg", Value: "operation exceeded time limit"},
		{Key: "code", Value: int32(50)}, {Key: "codeName", Value: "MaxTimeMSExpired"},
	})})
	if ok, err := mongoutil.ProbeDeadlines(ctx, mongotest.Database(t, timedOut, db.Name()).Collection("deadlines"), "x"); err == nil {
		t.Fatalf("probe timed out on the server: %v, no error; want the error, not an answer", ok)
	}
	if ok, err := mongoutil.ProbeDeadlines(ctx, c, "x"); err != nil || !ok {
		t.Fatalf("probe: %v %v, want deadlines evaluated", ok, err)
	}
	set := bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}
	for _, tc := range []struct {
		in    time.Duration
		apply bool
	}{{time.Hour, true}, {-time.Hour, false}} {
		filter := func(id string) bson.D {
			return bson.D{{Key: "_id", Value: id}, mongoutil.Deadline(time.Now().Add(tc.in))}
		}
		err := c.FindOneAndUpdate(ctx, filter("x"), set).Err()
		if applied := err == nil; applied != tc.apply || err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
			t.Errorf("findAndModify, deadline in %v: %v, want applied %v", tc.in, err, tc.apply)
		}
		res, err := c.UpdateOne(ctx, filter("x"), set)
		if err != nil || (res.MatchedCount == 1) != tc.apply {
			t.Errorf("update, deadline in %v: %+v %v, want applied %v", tc.in, res, err, tc.apply)
		}
		bulk, err := c.BulkWrite(ctx, []mongo.WriteModel{
			mongo.NewUpdateOneModel().SetFilter(filter("x")).SetUpdate(set),
			mongo.NewUpdateOneModel().SetFilter(filter("y")).SetUpdate(set),
		})
		if want := map[bool]int64{true: 2, false: 0}[tc.apply]; err != nil || bulk.MatchedCount != want {
			t.Errorf("bulk update, deadline in %v: %+v %v, want %d matched", tc.in, bulk, err, want)
		}
	}
}

// TestResolveDeadlines: a deadline element is dropped before its
// deadline and matches nothing from it on; other elements stay.
func TestResolveDeadlines(t *testing.T) {
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	filter := bson.D{{Key: "_id", Value: "x"}, mongoutil.Deadline(at), {Key: "a", Value: 1}}
	if got, ok := mongoutil.ResolveDeadlines(filter, at.Add(-time.Nanosecond)); !ok ||
		len(got) != 2 || got[0].Key != "_id" || got[1].Key != "a" {
		t.Errorf("before: %v %v", got, ok)
	}
	if got, ok := mongoutil.ResolveDeadlines(filter, at); !ok || len(got) != 3 || got[1].Key != "_id" {
		t.Errorf("at: %v %v", got, ok)
	}
	plain := bson.D{{Key: "_id", Value: "x"}, {Key: "$expr", Value: bson.D{{Key: "$eq", Value: bson.A{"$a", 1}}}}}
	if got, ok := mongoutil.ResolveDeadlines(plain, at); ok || len(got) != 2 {
		t.Errorf("no deadline: %v %v", got, ok)
	}
}
