package simdb

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func TestRoundTrip(t *testing.T) {
	real := time.Now()
	defer func() { t.Logf("real %v", time.Since(real)) }()
	synctest.Test(t, func(t *testing.T) {
		srv := NewServer(MongoDB, 0)
		l := srv.NewLink("a", func(bson.D) Fate { return Fate{Send: time.Millisecond, Reply: time.Millisecond} })
		c, err := l.Connect(nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		coll := c.Database("db").Collection("c")
		if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "x"}, {Key: "n", Value: 1}}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		n := 2000
		for i := range n {
			var d bson.D
			err := coll.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: "x"}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}},
				options.FindOneAndUpdate().SetReturnDocument(options.After).SetUpsert(true)).Decode(&d)
			if err != nil {
				t.Fatal(i, err)
			}
		}
		t.Logf("%d ops in %v simulated", n, time.Since(start))
		if err := c.Disconnect(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
