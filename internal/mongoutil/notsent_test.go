package mongoutil_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/mongoutil"
)

// staleContext is the context of a command made just before the process
// was stopped (SIGSTOP), seen right after it was resumed: its deadline is
// past and its timer has not fired yet.
type staleContext struct{ context.Context }

func (staleContext) Deadline() (time.Time, bool) { return time.Now().Add(-time.Second), true }

// TestNotSentStaleDeadline: a write given a context whose deadline passed
// while the process was stopped is refused by the driver before it is
// sent, and NotSent says so (TestLeaderOnlyLeaderKilled lost a count so:
// "calculated server-side timeout (0 ms) is less than or equal to 0").
func TestNotSentStaleDeadline(t *testing.T) {
	counter := mongotest.NewCounter()
	client := mongotest.NewClient(t, options.Client().SetMonitor(counter.Monitor()).SetRetryWrites(false))
	coll := mongotest.Database(t, client, mongotest.NewDatabase(t).Name()).Collection("c")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}}); err != nil { // a connection in the pool
		t.Fatal(err)
	}
	counter.Reset()
	_, err := coll.UpdateOne(staleContext{ctx}, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}})
	if err == nil {
		t.Fatal("a write with a past deadline succeeded")
	}
	if !mongoutil.NotSent(err) {
		t.Errorf("mongoutil.NotSent(%v) = false, want true", err)
	}
	if n := counter.Total(); n != 0 {
		t.Errorf("%d command(s) sent, want none: %v", n, err)
	}
}
