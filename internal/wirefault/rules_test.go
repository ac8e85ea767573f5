package wirefault_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/internal/wirefault"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// rewritten returns a fresh database seen through rules, and the same
// database seen directly.
func rewritten(t *testing.T, rules []wirefault.Rule, opts ...*options.ClientOptions) (through, direct *mongo.Database) {
	t.Helper()
	direct = mongotest.NewDatabase(t)
	client := mongotest.NewRewrittenClient(t, rules, opts...)
	return client.Database(direct.Name()), direct
}

// localTime runs hello on db's client.
func localTime(t *testing.T, db *mongo.Database) time.Time {
	t.Helper()
	var hello struct {
		LocalTime time.Time `bson:"localTime"`
	}
	if err := db.Client().Database("admin").RunCommand(ctx(t), bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		t.Fatal(err)
	}
	if hello.LocalTime.IsZero() {
		t.Fatal("hello has no localTime")
	}
	return hello.LocalTime
}

func TestClockOffset(t *testing.T) {
	t.Parallel()
	const offset = time.Hour
	through, direct := rewritten(t, []wirefault.Rule{wirefault.ClockOffset(offset)})
	before := localTime(t, direct)
	got := localTime(t, through)
	if ahead := got.Sub(before); ahead < offset || ahead > offset+5*time.Second {
		t.Errorf("localTime through the proxy is %v ahead of the server's, want %v", ahead, offset)
	}
}

func TestMongos(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var finds []bson.Raw
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "find" {
			mu.Lock()
			finds = append(finds, e.Command)
			mu.Unlock()
		}
	}}
	through, _ := rewritten(t, []wirefault.Rule{wirefault.Mongos()},
		options.Client().SetMonitor(mon).SetReadPreference(readpref.SecondaryPreferred()))

	var hello bson.M
	if err := through.Client().Database("admin").RunCommand(ctx(t), bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		t.Fatal(err)
	}
	if hello["msg"] != "isdbgrid" || hello["setName"] != nil || hello["logicalSessionTimeoutMinutes"] == nil {
		t.Errorf("hello = %v, want a mongos with sessions", hello)
	}

	coll := through.Collection("c")
	if _, err := coll.InsertOne(ctx(t), bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		ID int `bson:"_id"`
	}
	if err := coll.FindOne(ctx(t), bson.D{}).Decode(&doc); err != nil || doc.ID != 1 {
		t.Fatalf("find = %v, %v; want _id 1", doc, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(finds) != 1 {
		t.Fatalf("%d finds, want 1", len(finds))
	}
	mode, err := finds[0].LookupErr("$readPreference", "mode")
	if err != nil || mode.StringValue() != "secondaryPreferred" {
		t.Errorf("find = %s, want $readPreference secondaryPreferred", finds[0])
	}
}

func TestOrphanMatches(t *testing.T) {
	t.Parallel()
	onlyC := func(cmd bson.D) bool { return cmd[0].Value == "c" }
	through, _ := rewritten(t, []wirefault.Rule{wirefault.OrphanMatches(2, onlyC)})
	inc := bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}
	for _, name := range []string{"c", "other"} {
		docs := []any{bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 2}}, bson.D{{Key: "_id", Value: 3}}}
		if _, err := through.Collection(name).InsertMany(ctx(t), docs); err != nil {
			t.Fatal(err)
		}
	}

	tests := []struct {
		coll                  string
		many                  bool
		wantMatched, wantMods int64
	}{
		{"c", true, 3 + 2, 3},
		{"c", false, 1, 1},    // not multi
		{"other", true, 3, 3}, // match says no
	}
	for _, tt := range tests {
		coll := through.Collection(tt.coll)
		var res *mongo.UpdateResult
		var err error
		if tt.many {
			res, err = coll.UpdateMany(ctx(t), bson.D{}, inc)
		} else {
			res, err = coll.UpdateOne(ctx(t), bson.D{}, inc)
		}
		if err != nil {
			t.Fatal(err)
		}
		if res.MatchedCount != tt.wantMatched || res.ModifiedCount != tt.wantMods {
			t.Errorf("%s many=%v: matched %d, modified %d; want %d, %d",
				tt.coll, tt.many, res.MatchedCount, res.ModifiedCount, tt.wantMatched, tt.wantMods)
		}
	}
}

// TestDuplicateKeyAsInternalError: a colliding findAndModify upsert seen
// through the rule fails as FerretDB 2.x answers it, an InternalError with
// PostgreSQL's unique-violation message, which the driver does not read as
// a duplicate key and mongoutil.IsDuplicateKey does. It checks that shape,
// not one message: a real FerretDB 2.x (MONGODB_URI), which answers so
// itself, names its own collection's constraint (collection_pk_<n>, n the
// collection's number there).
func TestDuplicateKeyAsInternalError(t *testing.T) {
	t.Parallel()
	through, _ := rewritten(t, []wirefault.Rule{wirefault.DuplicateKeyAsInternalError()})
	coll := through.Collection("c")
	upsert := options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)
	set := bson.D{{Key: "$set", Value: bson.D{{Key: "y", Value: 1}}}}

	if err := coll.FindOneAndUpdate(ctx(t), bson.D{{Key: "_id", Value: 1}, {Key: "x", Value: 1}}, set, upsert).Err(); err != nil {
		t.Fatalf("first upsert: %v", err)
	}
	// The filter cannot match the document, so the upsert collides on _id.
	err := coll.FindOneAndUpdate(ctx(t), bson.D{{Key: "_id", Value: 1}, {Key: "x", Value: 2}}, set, upsert).Err()
	var ce mongo.CommandError
	if !errors.As(err, &ce) || ce.Code != 1 || ce.Name != "InternalError" || !mongoutil.IsDuplicateKey(err) {
		t.Fatalf("colliding upsert: %#v, want FerretDB 2's InternalError for a duplicate key", err)
	}
	if mongo.IsDuplicateKeyError(err) {
		t.Error("the rewritten error still reads as a duplicate key")
	}

	// Other errors are untouched.
	_, err = coll.InsertOne(ctx(t), bson.D{{Key: "_id", Value: 1}})
	if !mongo.IsDuplicateKeyError(err) {
		t.Errorf("insert of a duplicate: %v, want a duplicate key error", err)
	}
}

// stored reads the document with _id id.
func stored(t *testing.T, coll *mongo.Collection, id int) bson.M {
	t.Helper()
	var doc bson.M
	if err := coll.FindOne(ctx(t), bson.D{{Key: "_id", Value: id}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func TestTimestamps(t *testing.T) {
	t.Parallel()
	stamp := bson.D{
		{Key: "$currentDate", Value: bson.D{
			{Key: "ts", Value: bson.D{{Key: "$type", Value: "timestamp"}}},
			{Key: "at", Value: true},
		}},
		{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}},
	}
	upsert := options.UpdateOne().SetUpsert(true)

	t.Run("fixed", func(t *testing.T) {
		t.Parallel()
		fixed := bson.Timestamp{T: 1_700_000_000, I: 7}
		through, _ := rewritten(t, []wirefault.Rule{wirefault.Timestamps(wirefault.FixedTimestamp(fixed))})
		coll := through.Collection("c")
		for id := range 2 {
			if _, err := coll.UpdateOne(ctx(t), bson.D{{Key: "_id", Value: id}}, stamp, upsert); err != nil {
				t.Fatal(err)
			}
		}
		for id := range 2 {
			doc := stored(t, coll, id)
			if doc["ts"] != fixed || doc["x"] != int32(1) {
				t.Errorf("document %d = %v, want ts %v and x 1", id, doc, fixed)
			}
			if _, ok := doc["at"].(bson.DateTime); !ok {
				t.Errorf("document %d = %v: the date in $currentDate was lost", id, doc)
			}
		}
	})

	t.Run("decreasing", func(t *testing.T) {
		t.Parallel()
		start := bson.Timestamp{T: 1_700_000_000, I: 1}
		through, _ := rewritten(t, []wirefault.Rule{wirefault.Timestamps(wirefault.Decreasing(start))})
		coll := through.Collection("c")
		var got []bson.Timestamp
		for range 2 {
			res := coll.FindOneAndUpdate(ctx(t), bson.D{{Key: "_id", Value: 1}}, stamp,
				options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After))
			var doc struct{ TS bson.Timestamp }
			if err := res.Decode(&doc); err != nil {
				t.Fatal(err)
			}
			got = append(got, doc.TS)
		}
		if got[0] != start || !got[1].Before(got[0]) {
			t.Errorf("timestamps %v, want %v then an earlier one", got, start)
		}
	})
}

func TestServerClock(t *testing.T) {
	t.Parallel()
	clock := wirefault.ServerClock(-time.Hour)
	through, direct := rewritten(t, []wirefault.Rule{clock})
	coll := through.Collection("c")
	stamp := bson.D{{Key: "$currentDate", Value: bson.D{
		{Key: "at", Value: bson.D{{Key: "$type", Value: "date"}}},
		{Key: "ts", Value: bson.D{{Key: "$type", Value: "timestamp"}}},
	}}}

	// check updates document id and wants its times offset from now.
	check := func(id int, offset time.Duration) bson.Timestamp {
		t.Helper()
		if _, err := coll.UpdateOne(ctx(t), bson.D{{Key: "_id", Value: id}}, stamp, options.UpdateOne().SetUpsert(true)); err != nil {
			t.Fatal(err)
		}
		want := time.Now().Add(offset)
		doc := stored(t, coll, id)
		at, _ := doc["at"].(bson.DateTime)
		ts, _ := doc["ts"].(bson.Timestamp)
		if d := want.Sub(at.Time()); d < 0 || d > 5*time.Second {
			t.Errorf("at = %v, want about %v", at.Time(), want)
		}
		if d := want.Unix() - int64(ts.T); d < 0 || d > 5 {
			t.Errorf("ts = %v, want about %d seconds", ts, want.Unix())
		}
		return ts
	}

	early := check(1, -time.Hour)
	if ahead := localTime(t, direct).Sub(localTime(t, through)); ahead < time.Hour-5*time.Second || ahead > time.Hour {
		t.Errorf("localTime is %v behind the server's, want 1h", ahead)
	}
	clock.Set(time.Hour)
	late := check(2, time.Hour)
	clock.Set(-time.Hour)
	again := check(3, -time.Hour)
	if !early.Before(late) || !late.After(again) || again.I <= early.I {
		t.Errorf("timestamps %v, %v, %v: want the clock to go forward and back, and the counter up", early, late, again)
	}
}

// spy records the commands that reach it.
type spy struct {
	mu    sync.Mutex
	names []string
}

func (s *spy) Request(cmd bson.D) (out, reply bson.D) {
	s.mu.Lock()
	s.names = append(s.names, cmd[0].Key)
	s.mu.Unlock()
	return nil, nil
}

func (s *spy) Reply(cmd, reply bson.D) bson.D { return nil }

func (s *spy) count(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.names {
		if c == name {
			n++
		}
	}
	return n
}

func TestFail(t *testing.T) {
	t.Parallel()
	var after spy // after the failing rules: sees only what they let through
	badPing := bson.D{
		{Key: "ok", Value: 0.0}, {Key: "errmsg", Value: "no ping today"},
		{Key: "code", Value: int32(2)}, {Key: "codeName", Value: "BadValue"},
	}
	through, _ := rewritten(t, []wirefault.Rule{
		wirefault.HiddenIndexUnsupported(),
		wirefault.Fail("ping", nil, badPing),
		&after,
	})

	hide := bson.D{{Key: "collMod", Value: "c"}, {Key: "index", Value: bson.D{
		{Key: "keyPattern", Value: bson.D{{Key: "a", Value: 1}}}, {Key: "hidden", Value: true},
	}}}
	err := through.RunCommand(ctx(t), hide).Err()
	var ce mongo.CommandError
	if !errors.As(err, &ce) || ce.Code != 1 || ce.Name != "InternalError" || ce.Message != "'collMod.index.hidden' is not supported yet." {
		t.Errorf("collMod hidden: %v, want FerretDB 2's InternalError", err)
	}
	// A collMod without index.hidden reaches the server, whatever it says.
	_ = through.RunCommand(ctx(t), bson.D{{Key: "collMod", Value: "c"}}).Err()
	if n := after.count("collMod"); n != 1 {
		t.Errorf("%d collMod reached the server, want 1", n)
	}
	// So does a build of an index that is not hidden; a hidden one does not.
	create := func(hidden bool) error {
		return through.RunCommand(ctx(t), bson.D{{Key: "createIndexes", Value: "c"}, {Key: "indexes", Value: bson.A{
			bson.D{{Key: "key", Value: bson.D{{Key: "a", Value: 1}}}, {Key: "name", Value: "a_1"}, {Key: "hidden", Value: hidden}},
		}}}).Err()
	}
	err = create(true)
	if !errors.As(err, &ce) || ce.Code != 1 || ce.Name != "InternalError" || ce.Message != "hidden indexes are not supported yet." {
		t.Errorf("createIndexes hidden: %v, want FerretDB 2's InternalError", err)
	}
	_ = create(false)
	if n := after.count("createIndexes"); n != 1 {
		t.Errorf("%d createIndexes reached the server, want only the one not hidden", n)
	}

	err = through.Client().Ping(ctx(t), nil)
	if !errors.As(err, &ce) || ce.Code != 2 || ce.Message != "no ping today" {
		t.Errorf("ping: %v, want the rule's BadValue", err)
	}
}

func TestUntouchedTraffic(t *testing.T) {
	t.Parallel()
	var s spy
	through, direct := rewritten(t, []wirefault.Rule{&s})
	coll := through.Collection("c")

	var docs []any
	for i := range 25 {
		docs = append(docs, bson.D{{Key: "_id", Value: i}, {Key: "v", Value: bson.D{{Key: "i", Value: int64(i)}}}})
	}
	if _, err := coll.InsertMany(ctx(t), docs); err != nil {
		t.Fatal(err)
	}
	res, err := coll.BulkWrite(ctx(t), []mongo.WriteModel{
		mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: 100}}),
		mongo.NewUpdateManyModel().SetFilter(bson.D{{Key: "_id", Value: bson.D{{Key: "$lt", Value: 5}}}}).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "low", Value: true}}}}),
		mongo.NewDeleteOneModel().SetFilter(bson.D{{Key: "_id", Value: 24}}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.InsertedCount != 1 || res.MatchedCount != 5 || res.ModifiedCount != 5 || res.DeletedCount != 1 {
		t.Errorf("bulk write = %+v", res)
	}

	cur, err := coll.Find(ctx(t), bson.D{}, options.Find().SetBatchSize(3).SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var got []struct {
		ID  int  `bson:"_id"`
		Low bool `bson:"low"`
		V   struct{ I int64 }
	}
	if err := cur.All(ctx(t), &got); err != nil {
		t.Fatal(err)
	}
	var ids []int
	for _, d := range got {
		ids = append(ids, d.ID)
		if d.ID < 25 && (d.V.I != int64(d.ID) || d.Low != (d.ID < 5)) {
			t.Errorf("document %+v", d)
		}
	}
	var want []int
	for i := range 24 {
		want = append(want, i)
	}
	want = append(want, 100)
	if !slices.Equal(ids, want) {
		t.Errorf("ids %v, want %v", ids, want)
	}
	if n, err := direct.Collection("c").CountDocuments(ctx(t), bson.D{}); err != nil || n != 25 {
		t.Errorf("direct count = %d, %v; want 25", n, err)
	}
	if s.count("getMore") < 7 || s.count("isMaster") == 0 {
		t.Errorf("commands seen: %v; want getMores and the legacy isMaster handshake", s.names)
	}
}

// TestRulesSeeSequences checks that a rule sees a document sequence as an
// array and that the server takes the rewritten body.
func TestRulesSeeSequences(t *testing.T) {
	t.Parallel()
	tag := wirefault.RuleFuncs{OnRequest: func(cmd bson.D) (out, reply bson.D) {
		if cmd[0].Key != "insert" {
			return nil, nil
		}
		out = slices.Clone(cmd)
		for i, e := range out {
			if e.Key == "documents" {
				var docs bson.A
				for _, d := range e.Value.(bson.A) {
					docs = append(docs, append(slices.Clone(d.(bson.D)), bson.E{Key: "tag", Value: "x"}))
				}
				out[i].Value = docs
			}
		}
		return out, nil
	}}
	through, _ := rewritten(t, []wirefault.Rule{tag})
	coll := through.Collection("c")
	if _, err := coll.InsertMany(ctx(t), []any{bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 2}}}); err != nil {
		t.Fatal(err)
	}
	n, err := coll.CountDocuments(ctx(t), bson.D{{Key: "tag", Value: "x"}})
	if err != nil || n != 2 {
		t.Errorf("%d tagged documents, %v; want 2", n, err)
	}
}
