package lock_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/lock"
)

func TestAcquireReleaseAndFences(t *testing.T) {
	t.Parallel()
	ls, _ := newLockers(t, 2, lock.WithTTL(10*time.Second))
	a, b := ls[0], ls[1]
	ctx := testCtx(t, 30*time.Second)

	l1 := mustAcquire(t, ctx, a, "job", "A")
	if l1.Fence == 0 || l1.KeeperID != "A" || l1.LockID != "job" {
		t.Fatalf("lease = %+v", l1)
	}
	if d := time.Until(l1.Deadline); d <= 9*time.Second || d > 10*time.Second {
		t.Fatalf("deadline in %v, want just under the 10s TTL", d)
	}
	if _, ok, err := b.AcquireLock(ctx, "job", "B"); ok || err != nil {
		t.Fatalf("second keeper: ok=%v err=%v, want not acquired and no error", ok, err)
	}
	// The holder acquiring again extends its lease in a new term.
	l2 := mustAcquire(t, ctx, a, "job", "A")
	if l2.Fence <= l1.Fence {
		t.Fatalf("re-acquire fence %d, want > %d", l2.Fence, l1.Fence)
	}
	// Another keeper can neither release nor renew it.
	if err := b.ReleaseLock(ctx, "job", "B"); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("foreign release: %v, want ErrNotHeld", err)
	}
	if r, err := b.Renew(ctx, "B", "job"); err != nil || len(r.Held) != 0 || len(r.Lost) != 1 {
		t.Fatalf("foreign renew: %+v %v", r, err)
	}
	h, err := b.Holder(ctx, "job")
	if err != nil || h.KeeperID != "A" || h.Fence != l2.Fence {
		t.Fatalf("holder after foreign release: %+v %v", h, err)
	}
	if left := h.ExpiresAt.Sub(h.ReadAt); h.ReadAt.IsZero() || left <= 0 || left > 10*time.Second {
		t.Fatalf("holder read at %v, lease left %v: want a server time with under the 10s TTL left", h.ReadAt, left)
	}
	if err := a.ReleaseLock(ctx, "job", "A"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Holder(ctx, "job"); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("holder after release: %v, want ErrNotHeld", err)
	}
	// The fence survives the document's deletion.
	l3 := mustAcquire(t, ctx, b, "job", "B")
	if l3.Fence <= l2.Fence {
		t.Fatalf("fence after release %d, want > %d", l3.Fence, l2.Fence)
	}
	if err := a.ReleaseLock(ctx, "job", "A"); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("release by former holder: %v, want ErrNotHeld", err)
	}
}

func TestRenewMany(t *testing.T) {
	t.Parallel()
	ls, _ := newLockers(t, 2, lock.WithTTL(10*time.Second))
	a, b := ls[0], ls[1]
	ctx := testCtx(t, 30*time.Second)
	fences := map[string]uint64{}
	for _, id := range []string{"x", "y", "z"} {
		fences[id] = mustAcquire(t, ctx, a, id, "A").Fence
	}
	mustAcquire(t, ctx, b, "w", "B")
	if err := a.ReleaseLock(ctx, "z", "A"); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	r, err := a.Renew(ctx, "A", "x", "y", "z", "w", "x")
	if err != nil {
		t.Fatal(err)
	}
	if !sameSet(r.Held, []string{"x", "y"}) || !sameSet(r.Lost, []string{"z", "w"}) {
		t.Fatalf("renew: held %v lost %v", r.Held, r.Lost)
	}
	if r.Deadline.Before(before.Add(9 * time.Second)) {
		t.Fatalf("renew deadline %v too early", r.Deadline)
	}
	for _, id := range []string{"x", "y"} {
		h, err := a.Holder(ctx, id)
		if err != nil || h.Fence != fences[id] {
			t.Fatalf("%s after renew: %+v %v; renewal must keep the fence %d", id, h, err, fences[id])
		}
	}
	// The lost lock was not re-created.
	if _, err := a.Holder(ctx, "z"); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("renew re-created a released lock: %v", err)
	}
	// Of x, z (released) and w (B's), ReleaseLocks deletes x only.
	if n, err := a.ReleaseLocks(ctx, "A", "x", "z", "w"); err != nil || n != 1 {
		t.Fatalf("release x, z, w: %d %v, want 1", n, err)
	}
	if _, err := a.Holder(ctx, "x"); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("x after ReleaseLocks: %v, want ErrNotHeld", err)
	}
	if n, err := a.ReleaseLocks(ctx, "A"); err != nil || n != 0 {
		t.Fatalf("release of no locks: %d %v", n, err)
	}
	if n, err := a.ReleaseAll(ctx, "A"); err != nil || n != 1 {
		t.Fatalf("release all: %d %v, want 1 (y)", n, err)
	}
	if h, err := a.Holder(ctx, "w"); err != nil || h.KeeperID != "B" {
		t.Fatalf("ReleaseLocks or ReleaseAll touched another keeper's lock: %+v %v", h, err)
	}
}

func TestLapsedLeaseIsNotRenewed(t *testing.T) {
	t.Parallel()
	ttl := 300 * time.Millisecond
	ls, _ := newLockers(t, 1, lock.WithTTL(ttl))
	a := ls[0]
	ctx := testCtx(t, 30*time.Second)
	first := mustAcquire(t, ctx, a, "lapse", "A")
	time.Sleep(ttl + 100*time.Millisecond) // let the lease expire by the server's clock
	if _, err := a.Holder(ctx, "lapse"); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("holder of lapsed lease: %v, want ErrNotHeld", err)
	}
	r, err := a.Renew(ctx, "A", "lapse")
	if err != nil || len(r.Held) != 0 {
		t.Fatalf("renewing a lapsed lease: %+v %v, want it lost", r, err)
	}
	second := mustAcquire(t, ctx, a, "lapse", "A")
	if second.Fence <= first.Fence {
		t.Fatalf("new term fence %d, want > %d", second.Fence, first.Fence)
	}
	hs, err := a.Locks(ctx)
	if err != nil || len(hs) != 1 || hs[0].Expired || hs[0].KeeperID != "A" {
		t.Fatalf("locks: %+v %v", hs, err)
	}
}

func TestPurgeDeletesOnlyExpired(t *testing.T) {
	t.Parallel()
	ttl := 300 * time.Millisecond
	ls, db := newLockers(t, 1, lock.WithTTL(ttl))
	a := ls[0]
	ctx := testCtx(t, 30*time.Second)
	mustAcquire(t, ctx, a, "old", "A")
	time.Sleep(ttl + 100*time.Millisecond)
	mustAcquire(t, ctx, a, "new", "A")
	n, err := a.Purge(ctx)
	if err != nil || n != 1 {
		t.Fatalf("purge: %d %v, want 1", n, err)
	}
	left, err := db.Collection(lock.DefaultCollection).CountDocuments(ctx, bson.D{})
	if err != nil || left != 1 {
		t.Fatalf("documents left: %d %v, want 1", left, err)
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]int{}
	for _, s := range a {
		m[s]++
	}
	for _, s := range b {
		m[s]--
	}
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return true
}

func TestNewKeeperIDUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := lock.NewKeeperID()
		if err := lock.ValidateID("keeperID", id); err != nil || seen[id] {
			t.Fatalf("keeper id %q: valid=%v duplicate=%v", id, err, seen[id])
		}
		if !strings.Contains(id, fmt.Sprintf("-%d-", os.Getpid())) {
			t.Fatalf("keeper id %q lacks the pid", id)
		}
		seen[id] = true
	}
}
