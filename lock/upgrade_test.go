package lock_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/lock"
)

// TestOldDocumentsAreConvertedNotTakenOver: a lock document written by an
// earlier version carries its fence as a server timestamp, which may run
// ahead of the wall clock (a cluster time after a failover from a fast
// primary). Taking it over with a fence from this version's epoch could go
// below it, so it is left alone until EnsureIndexes converts it; then the
// next fence is above the old one.
func TestOldDocumentsAreConvertedNotTakenOver(t *testing.T) {
	t.Parallel()
	ls, db := newLockers(t, 1, lock.WithTTL(time.Second))
	l := ls[0]
	ctx := testCtx(t, 30*time.Second)
	old := time.Now().Add(-time.Hour)
	legacy := bson.Timestamp{T: uint32(time.Now().Unix()) + 100, I: 7}
	_, err := db.Collection(lock.DefaultCollection).InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "expired"}, {Key: "kid", Value: "v0.4"}, {Key: "ts", Value: old}, {Key: "at", Value: old},
			{Key: "fence", Value: legacy}, {Key: "ttl", Value: int64(1000)}},
		bson.D{{Key: "_id", Value: "held"}, {Key: "kid", Value: "v0.4"}, {Key: "ts", Value: time.Now()}, {Key: "at", Value: old},
			{Key: "fence", Value: legacy}, {Key: "ttl", Value: int64(60000)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if h, err := l.Holder(ctx, "held"); err != nil || h.Fence != uint64(legacy.T)<<32|uint64(legacy.I) {
		t.Fatalf("holder of an old document: %+v %v, want its timestamp fence", h, err)
	}
	if _, ok, err := acquireOne(ctx, l, "expired", "K"); ok || err != nil {
		t.Fatalf("took over an unconverted old document: ok=%v err=%v", ok, err)
	}
	if a, err := l.AcquireLocks(ctx, "K", "expired", "free"); err != nil || len(a.Granted) != 1 || a.Granted[0].LockID != "free" {
		t.Fatalf("batch with an unconverted old document: %+v %v, want only free granted", a, err)
	}
	// Not by its own keeper either, one lock or a batch.
	if _, ok, err := acquireOne(ctx, l, "expired", "v0.4"); ok || err != nil {
		t.Fatalf("its own keeper took over an unconverted old document: ok=%v err=%v", ok, err)
	}
	if a, err := l.AcquireLocks(ctx, "v0.4", "expired", "free2"); err != nil || len(a.Granted) != 1 || a.Granted[0].LockID != "free2" {
		t.Fatalf("its own keeper's batch with an unconverted old document: %+v %v, want only free2 granted", a, err)
	}
	if err := l.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := lock.UpgradeDocuments(ctx, db.Collection(lock.DefaultCollection)); err != nil || n != 0 {
		t.Fatalf("second upgrade converted %d (%v), want none left", n, err)
	}
	g := mustAcquire(t, ctx, l, "expired", "K")
	if g.Fence <= uint64(legacy.T)<<32|uint64(legacy.I) {
		t.Fatalf("fence %d after the conversion, not above the old %d", g.Fence, uint64(legacy.T)<<32|uint64(legacy.I))
	}
	if _, ok, err := acquireOne(ctx, l, "held", "K"); ok || err != nil {
		t.Fatalf("a live old lease after the conversion: ok=%v err=%v, want refused", ok, err)
	}
}

// TestFencesPast2To32Terms: seq passes 2^32 after four billion terms of one
// document; fences keep increasing, and releases by fence still find their
// term.
func TestFencesPast2To32Terms(t *testing.T) {
	t.Parallel()
	ls, db := newLockers(t, 1)
	l := ls[0]
	ctx := testCtx(t, 30*time.Second)
	epoch := time.Now().Unix() - 10
	_, err := db.Collection(lock.DefaultCollection).InsertOne(ctx, bson.D{{Key: "_id", Value: "hot"},
		{Key: "ts", Value: time.Now()}, {Key: "epoch", Value: epoch}, {Key: "seq", Value: int64(1<<32 - 2)}})
	if err != nil {
		t.Fatal(err)
	}
	last := uint64(epoch)<<32 + 1<<32 - 2
	for i := range 4 {
		g := mustAcquire(t, ctx, l, "hot", "K")
		if g.Fence <= last {
			t.Fatalf("term %d: fence %d, not above %d", i, g.Fence, last)
		}
		last = g.Fence
		n, err := l.ReleaseTerms(ctx, "K", lock.Term{LockID: "hot", Fence: g.Fence})
		if err != nil || n != 1 {
			t.Fatalf("term %d (fence %d): released %d, %v; want 1", i, g.Fence, n, err)
		}
	}
}
