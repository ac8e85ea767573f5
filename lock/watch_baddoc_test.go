package lock_test

import (
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/lock"
)

// TestWatchBadDocument: a watcher of a lock whose document is bad is told
// so (Holder.Bad names the field), rather than waiting for a first read
// that never comes; the document is reported as readers report it; and
// once the document is good again the watcher sees its holder.
func TestWatchBadDocument(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 30*time.Second)
	bad := &badDocs{}
	_, db := newLockers(t, 0)
	l, err := lock.New(db, lock.WithWatchPeriod(10*time.Millisecond), lock.WithBadDocuments(bad.report))
	if err != nil {
		t.Fatal(err)
	}
	coll := db.Collection(lock.DefaultCollection)
	doc := bson.D{{Key: "_id", Value: "spoiled"}, {Key: "kid", Value: int32(3)}, {Key: "ts", Value: time.Now()},
		{Key: "epoch", Value: int64(1)}, {Key: "seq", Value: int64(1)}}
	if _, err := coll.InsertOne(ctx, doc); err != nil {
		t.Fatal(err)
	}
	w := watch(t, l, "spoiled")
	h := w.await(t, "the bad document", func(h lock.Holder) bool { return true })
	if h.Bad == nil || h.Bad.Field != "kid" || !errors.Is(h.Bad, lock.ErrBadDocument) || h.LockID != "spoiled" || h.KeeperID != "" {
		t.Fatalf("first holder seen: %+v (bad %v); want Bad naming field kid", h, h.Bad)
	}
	if b, ok := bad.of("spoiled"); !ok || b.Field != "kid" {
		t.Errorf("reported %+v (%v), want field kid", b, ok)
	}
	if _, err := coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: "spoiled"}}); err != nil {
		t.Fatal(err)
	}
	w.await(t, "the repaired lock", func(h lock.Holder) bool { return h.Bad == nil && h.LockID == "spoiled" && h.KeeperID == "" })
	mustAcquire(t, ctx, l, "spoiled", "K")
	w.await(t, "the new holder", heldBy("K"))
}
