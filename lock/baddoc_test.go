package lock_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/lock"
)

// badDocs records the bad documents a Locker reported.
type badDocs struct {
	mu  sync.Mutex
	got map[string]lock.BadDocument // by fmt of the _id
}

func (b *badDocs) report(d lock.BadDocument) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.got == nil {
		b.got = map[string]lock.BadDocument{}
	}
	b.got[fmt.Sprint(d.ID)] = d
}

func (b *badDocs) of(id any) (lock.BadDocument, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.got[fmt.Sprint(id)]
	return d, ok
}

// TestBadDocumentsAreTakenOver: hand-edited or foreign lock documents
// never keep a lock from everyone. A lease without a valid server time
// (ts missing or a string) is no lease; a TTL that is not a whole number
// of milliseconds up to MaxTTL counts as the taker's; a fence that is not
// one (negative, a string, a fraction) restarts above what the document
// held. Each is taken over, by one lock's acquisition and by a batch's,
// with a fence above the document's epoch; a live lease with a bad fence
// still excludes until it lapses.
func TestBadDocumentsAreTakenOver(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	bad := &badDocs{}
	ls, db := newLockers(t, 1, lock.WithTTL(time.Second), lock.WithBadDocuments(bad.report))
	l := ls[0]
	coll := db.Collection(lock.DefaultCollection)
	now := time.Now()
	old := now.Add(-time.Hour)
	epoch := now.Unix() + 1000 // ahead of the server: the fence must still grow past it
	base := func(id string, fields ...bson.E) bson.D {
		d := bson.D{{Key: "_id", Value: id}, {Key: "kid", Value: "other"}, {Key: "ts", Value: old},
			{Key: "epoch", Value: epoch}, {Key: "seq", Value: int64(5)}, {Key: "ttl", Value: int64(1000)}}
		for _, f := range fields {
			replaced := false
			for i := range d {
				if d[i].Key == f.Key {
					if f.Value == nil {
						d = append(d[:i], d[i+1:]...)
					} else {
						d[i].Value = f.Value
					}
					replaced = true
					break
				}
			}
			if !replaced {
				d = append(d, f)
			}
		}
		return d
	}
	cases := []struct {
		name   string
		fields []bson.E
		field  string // reported as bad; "" for a good document
	}{
		{"ts-string", []bson.E{{Key: "ts", Value: "2026-01-01T00:00:00Z"}, {Key: "ttl", Value: int64(60000)}}, "ts"},
		{"ts-missing", []bson.E{{Key: "ts", Value: nil}, {Key: "ttl", Value: int64(60000)}}, "ts"},
		{"ttl-huge", []bson.E{{Key: "ts", Value: now.Add(-10 * time.Second)}, {Key: "ttl", Value: 9e15}}, "ttl"},
		{"ttl-string", []bson.E{{Key: "ts", Value: now.Add(-10 * time.Second)}, {Key: "ttl", Value: "1s"}}, "ttl"},
		{"epoch-negative", []bson.E{{Key: "epoch", Value: int64(-1)}, {Key: "seq", Value: int64(-1)}}, "epoch"},
		{"seq-negative", []bson.E{{Key: "seq", Value: int64(-1)}}, "seq"},
		{"seq-string", []bson.E{{Key: "seq", Value: "7"}}, "seq"},
		{"seq-fraction", []bson.E{{Key: "seq", Value: 1.5}}, ""}, // bad only once taken: 2.5
		{"seq-missing", []bson.E{{Key: "seq", Value: nil}}, "seq"},
		{"epoch-string", []bson.E{{Key: "epoch", Value: "1"}}, "epoch"},
		{"kid-int", []bson.E{{Key: "kid", Value: int32(7)}}, "kid"},
		{"kid-array", []bson.E{{Key: "kid", Value: bson.A{"a", "b"}}}, "kid"},
	}
	for _, batch := range []bool{false, true} {
		for _, c := range cases {
			id := fmt.Sprintf("%s-%v", c.name, batch)
			if _, err := coll.InsertOne(ctx, base(id, c.fields...)); err != nil {
				t.Fatal(err)
			}
			if c.field != "" {
				if _, err := l.Holder(ctx, id); !errors.Is(err, lock.ErrBadDocument) {
					t.Errorf("%s: holder: %v, want ErrBadDocument", id, err)
				} else if b, ok := bad.of(id); !ok || b.Field != c.field || b.Collection != lock.DefaultCollection {
					t.Errorf("%s: reported %+v, want field %q of %s.%s", id, b, c.field, db.Name(), lock.DefaultCollection)
				}
			}
			var g lock.Grant
			if batch {
				a, err := l.AcquireLocks(ctx, "K", id, "free-"+id)
				if err != nil || len(a.Granted) != 2 {
					t.Errorf("%s: batch acquisition %+v, %v; want both taken", id, a, err)
					continue
				}
				g = a.Granted[0]
			} else {
				var ok bool
				var err error
				if g, ok, err = acquireOne(ctx, l, id, "K"); err != nil || !ok {
					t.Errorf("%s: acquisition ok=%v, %v; want it taken over", id, ok, err)
					continue
				}
			}
			// Above the document's epoch; where that is no epoch, at least
			// the server's time in seconds.
			min := uint64(epoch) << 32
			if c.field == "epoch" {
				min = uint64(now.Unix()-60) << 32
			}
			if g.Fence <= min {
				t.Errorf("%s: fence %d, not above %d", id, g.Fence, min)
			}
			h, err := l.Holder(ctx, id)
			if err != nil || h.KeeperID != "K" || h.Fence != g.Fence {
				t.Errorf("%s: holder after the takeover %+v, %v", id, h, err)
			}
			// The next term's fence is larger again.
			if n, err := l.ReleaseTerms(ctx, "K", lock.Term{LockID: id, Fence: g.Fence}); err != nil || n != 1 {
				t.Errorf("%s: release %d, %v", id, n, err)
			}
			if g2 := mustAcquire(t, ctx, l, id, "K2"); g2.Fence <= g.Fence {
				t.Errorf("%s: fence %d after %d", id, g2.Fence, g.Fence)
			}
		}
	}

	// A live lease with a bad fence, or a bad keeper, still excludes.
	for _, c := range []struct {
		name   string
		fields []bson.E
	}{
		{"live-seq-string", []bson.E{{Key: "ts", Value: now}, {Key: "ttl", Value: int64(60000)}, {Key: "seq", Value: "x"}}},
		{"live-kid-int", []bson.E{{Key: "ts", Value: now}, {Key: "ttl", Value: int64(60000)}, {Key: "kid", Value: int32(7)}}},
		{"live-ttl-huge", []bson.E{{Key: "ts", Value: now.Add(30 * time.Second)}, {Key: "ttl", Value: 9e15}}},
	} {
		if _, err := coll.InsertOne(ctx, base(c.name, c.fields...)); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := acquireOne(ctx, l, c.name, "K"); ok || err != nil {
			t.Errorf("%s: acquisition ok=%v, %v; want refused", c.name, ok, err)
		}
		if a, err := l.AcquireLocks(ctx, "K", c.name, "free-"+c.name); err != nil || len(a.Refused) != 1 || a.Refused[0] != c.name {
			t.Errorf("%s: batch %+v, %v; want it refused", c.name, a, err)
		}
	}
}

// TestReadersSkipBadDocuments: one bad document does not fail Locks,
// LocksWithPrefix or Holder for the others: it is skipped and reported,
// with its collection, _id and field.
func TestReadersSkipBadDocuments(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 30*time.Second)
	bad := &badDocs{}
	ls, db := newLockers(t, 1, lock.WithBadDocuments(bad.report))
	l := ls[0]
	mustAcquire(t, ctx, l, "p/good", "K")
	now := time.Now()
	docs := []struct {
		doc   bson.D
		field string
	}{
		{bson.D{{Key: "_id", Value: "p/kid-int"}, {Key: "kid", Value: int32(3)}, {Key: "ts", Value: now}, {Key: "epoch", Value: int64(1)}, {Key: "seq", Value: int64(1)}}, "kid"},
		{bson.D{{Key: "_id", Value: "p/kid-array"}, {Key: "kid", Value: bson.A{"a"}}, {Key: "ts", Value: now}, {Key: "epoch", Value: int64(1)}, {Key: "seq", Value: int64(1)}}, "kid"},
		{bson.D{{Key: "_id", Value: "p/ts-string"}, {Key: "kid", Value: "a"}, {Key: "ts", Value: "yesterday"}, {Key: "epoch", Value: int64(1)}, {Key: "seq", Value: int64(1)}}, "ts"},
		{bson.D{{Key: "_id", Value: "p/seq-string"}, {Key: "kid", Value: "a"}, {Key: "ts", Value: now}, {Key: "epoch", Value: int64(1)}, {Key: "seq", Value: "1"}}, "seq"},
		{bson.D{{Key: "_id", Value: "p/ttl-fraction"}, {Key: "kid", Value: "a"}, {Key: "ts", Value: now}, {Key: "epoch", Value: int64(1)}, {Key: "seq", Value: int64(1)}, {Key: "ttl", Value: 1500.5}}, "ttl"},
		{bson.D{{Key: "_id", Value: int32(42)}, {Key: "kid", Value: "a"}, {Key: "ts", Value: now}, {Key: "epoch", Value: int64(1)}, {Key: "seq", Value: int64(1)}}, "_id"},
	}
	for _, d := range docs {
		if _, err := db.Collection(lock.DefaultCollection).InsertOne(ctx, d.doc); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, hs []lock.Holder, err error) {
		t.Helper()
		if err != nil || len(hs) != 1 || hs[0].LockID != "p/good" {
			t.Errorf("%s: %+v, %v; want the good lock only", what, hs, err)
		}
	}
	hs, err := l.Locks(ctx)
	check("Locks", hs, err)
	for _, d := range docs {
		id := d.doc[0].Value
		b, ok := bad.of(id)
		if !ok || b.Field != d.field || b.Collection != lock.DefaultCollection || b.Problem == "" {
			t.Errorf("document %v: reported %+v (%v), want field %q", id, b, ok, d.field)
		}
	}
	hs, err = l.LocksWithPrefix(ctx, "p/")
	check("LocksWithPrefix", hs, err)
	if h, err := l.Holder(ctx, "p/good"); err != nil || h.KeeperID != "K" {
		t.Errorf("holder of the good lock: %+v, %v", h, err)
	}
	if _, err := l.Holder(ctx, "p/seq-string"); !errors.Is(err, lock.ErrBadDocument) {
		t.Errorf("holder of a bad one: %v, want ErrBadDocument", err)
	}
}
