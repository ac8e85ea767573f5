package lock_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/lock"
)

// TestSameKeeperIDExcludes: two Sessions given one keeper id
// (WithKeeperID("billing") on every replica) exclude each other like any
// two Sessions: exactly one of them takes a lock, whether one lock at a
// time (findAndModify) or many (bulk write), and the other reports the
// shared keeper id.
func TestSameKeeperIDExcludes(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 30*time.Second)
	ls, _ := newLockers(t, 2, lock.WithTTL(time.Minute))
	rec := newRecorder()
	a, err := lock.NewSession(ls[0], lock.WithKeeperID("billing"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := lock.NewSession(ls[1], lock.WithKeeperID("billing"), lock.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, ids := range [][]string{{"invoice-run"}, {"x", "y", "z"}} {
		ta, err := a.AcquireLocks(ctx, ids...)
		if err != nil || len(ta.Leases) != len(ids) {
			t.Fatalf("first session: %+v, %v", ta, err)
		}
		tb, err := b.AcquireLocks(ctx, ids...)
		if err != nil {
			t.Fatal(err)
		}
		if len(tb.Leases) != 0 || len(tb.Refused) != len(ids) {
			t.Fatalf("second session with the same keeper id took %d of %v (refused %v): both hold the lock", len(tb.Leases), ids, tb.Refused)
		}
	}
	if e := rec.of(lock.KeeperIDShared, ""); len(e) != 1 || e[0].KeeperID != "billing" {
		t.Errorf("KeeperIDShared events %+v, want one for keeper billing", e)
	}
	// The holder still renews and releases its own leases, and then the
	// other takes them.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	tb, err := b.AcquireLocks(ctx, "invoice-run", "x")
	if err != nil || len(tb.Leases) != 2 {
		t.Fatalf("after the first session closed: %+v, %v", tb, err)
	}
}

// TestSameKeeperIDRestartAndUpgrade: a process restarted with its keeper
// id does not inherit the leases of its previous run, nor a Session those
// an earlier version (which writes no token) left with its keeper id: it
// is refused them while they are live, and takes them once they lapse.
// The Locker's own methods, an operator's tool, act as the keeper id
// whatever the token.
func TestSameKeeperIDRestartAndUpgrade(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 30*time.Second)
	ls, db := newLockers(t, 1, lock.WithTTL(time.Second))
	coll := db.Collection(lock.DefaultCollection)
	now, old := time.Now().Add(time.Minute), time.Now().Add(-time.Hour) // live: renewed "in a minute"
	doc := func(id, tok string, ts time.Time) bson.D {
		d := bson.D{{Key: "_id", Value: id}, {Key: "kid", Value: "billing"}, {Key: "ts", Value: ts}, {Key: "at", Value: ts},
			{Key: "epoch", Value: now.Unix() - 100}, {Key: "seq", Value: int64(3)}, {Key: "ttl", Value: int64(1000)}}
		if tok != "" {
			d = append(d, bson.E{Key: "tok", Value: tok})
		}
		return d
	}
	if _, err := coll.InsertMany(ctx, []any{
		doc("previous-run-live", "0123456789abcdef", now), doc("previous-run-lapsed", "0123456789abcdef", old),
		doc("old-version-live", "", now), doc("old-version-lapsed", "", old),
	}); err != nil {
		t.Fatal(err)
	}
	s, err := lock.NewSession(ls[0], lock.WithKeeperID("billing"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, ids := range [][]string{{"previous-run-live"}, {"old-version-live"}, {"previous-run-live", "old-version-live"}} {
		tk, err := s.AcquireLocks(ctx, ids...)
		if err != nil || len(tk.Leases) != 0 || len(tk.Refused) != len(ids) {
			t.Errorf("live leases of keeper billing without this Session's token %v: %+v, %v; want refused", ids, tk, err)
		}
	}
	for _, ids := range [][]string{{"previous-run-lapsed"}, {"old-version-lapsed", "free"}} {
		tk, err := s.AcquireLocks(ctx, ids...)
		if err != nil || len(tk.Leases) != len(ids) {
			t.Errorf("lapsed leases %v: %+v, %v; want them taken", ids, tk, err)
		}
	}
	// The operator's release as the keeper id releases a Session's lease.
	if n, err := ls[0].ReleaseLocks(ctx, "billing", "free", "previous-run-live"); err != nil || n != 2 {
		t.Errorf("ReleaseLocks as billing: %d, %v; want 2", n, err)
	}
}
