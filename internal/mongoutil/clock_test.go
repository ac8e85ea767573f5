package mongoutil_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/mongoutil"
)

// TestReadClockUpsertGuarded: ReadClock's upsert has a condition besides
// the _id (FerretDB 2.x would run an _id-only one as an insert replacing a
// racer's document), it reads the clock into a new collection and into
// one whose document is there, and a clock document without a time (not
// one ReadClock writes) is an error naming it, not a time.
func TestReadClockUpsertGuarded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ups := mongotest.NewUpserts()
	client := mongotest.NewClient(t, options.Client().SetMonitor(ups.Monitor()))
	db := mongotest.Database(t, client, mongotest.NewDatabase(t).Name())
	coll := db.Collection("c")
	var last time.Time
	for range 2 {
		now, err := mongoutil.ReadClock(ctx, coll)
		if err != nil || now.Before(last) {
			t.Fatalf("clock %v after %v: %v", now, last, err)
		}
		last = now
	}
	if ups.Count("c") != 2 {
		t.Errorf("%d upserts seen, want 2", ups.Count("c"))
	}
	for _, u := range ups.IDOnly() {
		t.Errorf("%s: its filter is the _id alone", u)
	}

	bad := db.Collection("bad")
	if _, err := bad.InsertOne(ctx, bson.D{{Key: "_id", Value: mongoutil.ClockDocID}, {Key: "x", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	now, err := mongoutil.ReadClock(ctx, bad)
	if err == nil || !mongoutil.IsDuplicateKey(err) || !strings.Contains(err.Error(), `has no "now" field`) {
		t.Errorf("clock document without a time: %v, %v; want an error saying so", now, err)
	}
}
