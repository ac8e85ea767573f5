package wirefault_test

import (
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/wirefault"
)

// buildInfo runs buildInfo on db's client.
func buildInfo(t *testing.T, db *mongo.Database) bson.M {
	t.Helper()
	var info bson.M
	if err := db.Client().Database("admin").RunCommand(ctx(t), bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info); err != nil {
		t.Fatal(err)
	}
	return info
}

func TestBuildInfo(t *testing.T) {
	t.Parallel()
	through, _ := rewritten(t, []wirefault.Rule{wirefault.MongoDBVersion("5.0.26")})
	info := buildInfo(t, through)
	if info["version"] != "5.0.26" || info["ferretdbVersion"] != nil || info["ferretdb"] != nil {
		t.Errorf("MongoDB 5.0.26: buildInfo %v", info)
	}
	if va, _ := info["versionArray"].(bson.A); len(va) != 4 || va[0] != int32(5) || va[1] != int32(0) || va[2] != int32(26) || va[3] != int32(0) {
		t.Errorf("MongoDB 5.0.26: versionArray %v", info["versionArray"])
	}

	through, _ = rewritten(t, []wirefault.Rule{wirefault.FerretDB2Version("v2.5.0")})
	info = buildInfo(t, through)
	fd, _ := info["ferretdb"].(bson.D)
	if info["ferretdbVersion"] != nil || info["ferretdbFeatures"] != nil || len(fd) == 0 || fd[0] != (bson.E{Key: "version", Value: "v2.5.0"}) {
		t.Errorf("FerretDB v2.5.0: buildInfo %v", info)
	}
}

func TestDeadlock(t *testing.T) {
	t.Parallel()
	var after spy
	through, _ := rewritten(t, []wirefault.Rule{wirefault.Deadlock("update", nil), &after})
	coll := through.Collection("c")
	_, err := coll.UpdateOne(ctx(t), bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}},
		options.UpdateOne().SetUpsert(true))
	var ce mongo.CommandError
	if !errors.As(err, &ce) || ce.Code != 16908292 || ce.Message != "deadlock detected" {
		t.Fatalf("update: %#v, want FerretDB 2's deadlock", err)
	}
	if n := after.count("update"); n != 0 {
		t.Errorf("%d updates reached the server", n)
	}
	if _, err := coll.InsertOne(ctx(t), bson.D{{Key: "_id", Value: 2}}); err != nil {
		t.Errorf("insert: %v, want it untouched", err)
	}
}

// TestNoTTLConversion: collMod may change the expireAfterSeconds of a TTL
// index but not give a plain index one, as the rule learns from the
// listings it passes.
func TestNoTTLConversion(t *testing.T) {
	t.Parallel()
	var after spy
	// ttlListed makes the server list index t_1 as a TTL index.
	ttlListed := wirefault.RuleFuncs{OnReply: func(cmd, reply bson.D) bson.D {
		if cmd[0].Key != "listIndexes" {
			return nil
		}
		var r struct {
			Cursor struct {
				FirstBatch []bson.D `bson:"firstBatch"`
				NS         string   `bson:"ns"`
				ID         int64    `bson:"id"`
			} `bson:"cursor"`
		}
		raw, _ := bson.Marshal(reply)
		if err := bson.Unmarshal(raw, &r); err != nil {
			t.Error(err)
			return nil
		}
		batch := bson.A{}
		for _, ix := range r.Cursor.FirstBatch {
			for _, e := range ix {
				if e.Key == "name" && e.Value == "t_1" {
					ix = append(ix, bson.E{Key: "expireAfterSeconds", Value: int32(60)})
				}
			}
			batch = append(batch, ix)
		}
		return bson.D{{Key: "cursor", Value: bson.D{{Key: "firstBatch", Value: batch}, {Key: "id", Value: r.Cursor.ID}, {Key: "ns", Value: r.Cursor.NS}}}, {Key: "ok", Value: 1.0}}
	}}
	through, _ := rewritten(t, []wirefault.Rule{wirefault.NoTTLConversion(), &after, ttlListed})
	coll := through.Collection("c")
	for _, k := range []string{"a", "t", "u"} {
		if _, err := coll.Indexes().CreateOne(ctx(t), mongo.IndexModel{Keys: bson.D{{Key: k, Value: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	collMod := func(name string) error {
		return through.RunCommand(ctx(t), bson.D{{Key: "collMod", Value: "c"},
			{Key: "index", Value: bson.D{{Key: "name", Value: name}, {Key: "expireAfterSeconds", Value: int32(10)}}}}).Err()
	}
	// Before any listing the rule knows nothing: the command goes on.
	_ = collMod("a_1")
	if n := after.count("collMod"); n != 1 {
		t.Fatalf("%d collMod reached the server, want 1", n)
	}
	if _, err := coll.Indexes().List(ctx(t)); err != nil {
		t.Fatal(err)
	}
	err := collMod("a_1")
	var ce mongo.CommandError
	if !errors.As(err, &ce) || ce.Code != 72 || ce.Name != "InvalidOptions" || ce.Message != "no expireAfterSeconds field to update" {
		t.Errorf("collMod of plain index a_1: %v, want InvalidOptions", err)
	}
	// The same index in another database is another index.
	if err := through.Client().Database(through.Name()+"_other").RunCommand(ctx(t), bson.D{{Key: "collMod", Value: "c"},
		{Key: "index", Value: bson.D{{Key: "name", Value: "a_1"}, {Key: "expireAfterSeconds", Value: int32(10)}}}}).Err(); errors.As(err, &ce) && ce.Code == 72 {
		t.Errorf("collMod in another database: %v", err)
	}
	// A TTL index, and a change of hidden only, go on.
	_ = collMod("t_1")
	_ = through.RunCommand(ctx(t), bson.D{{Key: "collMod", Value: "c"},
		{Key: "index", Value: bson.D{{Key: "name", Value: "u_1"}, {Key: "hidden", Value: true}}}}).Err()
	if n := after.count("collMod"); n != 4 {
		t.Errorf("%d collMod reached the server, want 4: all but the plain index's", n)
	}
}
