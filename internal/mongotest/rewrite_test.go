package mongotest_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/wirefault"
)

func TestNewRewrittenClient(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	client := mongotest.NewRewrittenClient(t, []wirefault.Rule{wirefault.OrphanMatches(1, nil)})
	coll := mongotest.Database(t, client, db.Name()).Collection("docs")
	if _, err := coll.InsertOne(ctx(t, 5*time.Second), bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	res, err := coll.UpdateMany(ctx(t, 5*time.Second), bson.D{}, bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.MatchedCount != 2 || res.ModifiedCount != 1 {
		t.Errorf("matched %d, modified %d; want the rule's 2 and the server's 1", res.MatchedCount, res.ModifiedCount)
	}
	// The database is shared with other clients.
	if n, err := db.Collection("docs").CountDocuments(ctx(t, 5*time.Second), bson.D{{Key: "x", Value: 1}}); err != nil || n != 1 {
		t.Errorf("count = %d, %v; want 1", n, err)
	}
}
