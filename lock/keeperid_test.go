package lock_test

import (
	"testing"
	"time"

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
