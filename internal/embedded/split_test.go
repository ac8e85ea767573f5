package embedded_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/embedded"
)

// bigBatch is more update statements in one command than FerretDB 1.24 has
// SQLite connections per database (100): its update handler keeps each
// statement's query open until the whole command ends, so without the
// proxy splitting the command it waits for ever for a connection.
const bigBatch = 250

// TestBigUpdateBatch: one update command with more statements than
// FerretDB's connection pool holds completes, and its result (matched,
// modified and upserted counts, the upserted statements' indexes) is that
// of the whole command.
func TestBigUpdateBatch(t *testing.T) {
	t.Parallel()
	coll, ctx := bigCollection(t)
	// Every existing document once, and upserts of new ones spread over
	// the command (every 25th statement), so over several of the proxy's
	// chunks.
	const upserts = bigBatch / 25
	var models []mongo.WriteModel
	wantIDs := map[int32]bool{}
	for i := range bigBatch + upserts {
		id := i - i/25
		if i%25 == 24 {
			id = -i
			wantIDs[int32(id)] = true
		}
		models = append(models, mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: id}}).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: 1}}}}).SetUpsert(true))
	}
	res, err := coll.BulkWrite(ctx, models)
	if err != nil {
		t.Fatalf("bulk write of %d updates: %v", len(models), err)
	}
	if res.MatchedCount != bigBatch || res.ModifiedCount != bigBatch || res.UpsertedCount != upserts {
		t.Errorf("matched %d, modified %d, upserted %d; want %d, %d, %d",
			res.MatchedCount, res.ModifiedCount, res.UpsertedCount, bigBatch, bigBatch, upserts)
	}
	// FerretDB 1.24 numbers upserts 0, 1, … in a command instead of giving
	// the statement's index; still, no two may share one.
	gotIDs := map[int32]bool{}
	for _, id := range res.UpsertedIDs {
		if n, ok := id.(int32); ok {
			gotIDs[n] = true
		}
	}
	if !maps.Equal(gotIDs, wantIDs) {
		t.Errorf("upserted ids %v, want %v", gotIDs, wantIDs)
	}
	n, err := coll.CountDocuments(ctx, bson.D{{Key: "v", Value: 1}})
	if err != nil || n != bigBatch+upserts {
		t.Errorf("%d documents updated (%v), want %d", n, err, bigBatch+upserts)
	}
}

// TestBigUpdateBatchWriteError: in a big ordered command, a statement that
// fails stops the command at its chunk, and its error carries an index
// within that chunk's statements; an unordered command goes on past that
// chunk. (FerretDB 1.24 itself stops an update command at the first error,
// ordered or not, and reports it at index 0.)
func TestBigUpdateBatchWriteError(t *testing.T) {
	t.Parallel()
	coll, ctx := bigCollection(t)
	const bad = 170 // changes _id, which fails
	models := func(v int) []mongo.WriteModel {
		var ms []mongo.WriteModel
		for i := range bigBatch {
			u := bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: v}}}}
			if i == bad {
				u = bson.D{{Key: "$set", Value: bson.D{{Key: "_id", Value: -1}}}}
			}
			ms = append(ms, mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: i}}).SetUpdate(u))
		}
		return ms
	}
	chunkStart := bad - bad%embedded.MaxUpdateStatements
	for _, tc := range []struct {
		ordered bool
		v       int
		minRan  int64 // statements that must have run
		maxRan  int64
	}{{true, 1, int64(chunkStart), bad}, {false, 2, bigBatch - embedded.MaxUpdateStatements, bigBatch - 1}} {
		_, err := coll.BulkWrite(ctx, models(tc.v), options.BulkWrite().SetOrdered(tc.ordered))
		var bwe mongo.BulkWriteException
		if !errors.As(err, &bwe) || len(bwe.WriteErrors) != 1 || bwe.WriteErrors[0].Code != 66 ||
			bwe.WriteErrors[0].Index < chunkStart || bwe.WriteErrors[0].Index > bad {
			t.Fatalf("ordered=%v: %v, want one ImmutableField error at an index in [%d, %d]",
				tc.ordered, err, chunkStart, bad)
		}
		n, err := coll.CountDocuments(ctx, bson.D{{Key: "v", Value: tc.v}})
		if err != nil || n < tc.minRan || n > tc.maxRan {
			t.Errorf("ordered=%v: %d documents updated (%v), want %d to %d", tc.ordered, n, err, tc.minRan, tc.maxRan)
		}
	}
}

// bigCollection starts a server with a collection of bigBatch documents
// {_id: i, v: 0}, and returns it with a context for the test. The context
// only bounds a hang, past the proxy's embedded.ReplyTimeout (which
// reports the deadlock these tests are about): under the race detector a
// big batch keeps FerretDB's SQLite busy for seconds, and for more than
// half a minute on a loaded machine.
func bigCollection(t *testing.T) (*mongo.Collection, context.Context) {
	t.Helper()
	coll := connect(t, start(t, "")).Database("db").Collection("c")
	ctx := ctxFor(t, embedded.ReplyTimeout+time.Minute)
	docs := make([]any, bigBatch)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: i}, {Key: "v", Value: 0}}
	}
	if _, err := coll.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	return coll, ctx
}
