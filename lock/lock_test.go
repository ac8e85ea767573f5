package lock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
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
	if _, ok, err := acquireOne(ctx, b, "job", "B"); ok || err != nil {
		t.Fatalf("second keeper: ok=%v err=%v, want not acquired and no error", ok, err)
	}
	// The holder acquiring again extends its lease in a new term.
	l2 := mustAcquire(t, ctx, a, "job", "A")
	if l2.Fence <= l1.Fence {
		t.Fatalf("re-acquire fence %d, want > %d", l2.Fence, l1.Fence)
	}
	// Another keeper can neither release nor renew it.
	if err := releaseOne(ctx, b, "job", "B"); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("foreign release: %v, want ErrNotHeld", err)
	}
	if r, err := b.Renew(ctx, "B", "job"); err != nil || len(r.Held) != 0 || len(r.Lost) != 1 {
		t.Fatalf("foreign renew: %+v %v", r, err)
	}
	h, err := b.Holder(ctx, "job")
	if err != nil || h.KeeperID != "A" || h.Fence != l2.Fence {
		t.Fatalf("holder after foreign release: %+v %v", h, err)
	}
	// ReadAt is a lower bound of the server's time, low by up to a round
	// trip and the server's millisecond.
	if left := h.ExpiresAt.Sub(h.ReadAt); h.ReadAt.IsZero() || left <= 0 || left > 10*time.Second+100*time.Millisecond {
		t.Fatalf("holder read at %v, lease left %v: want a server time with under the 10s TTL left", h.ReadAt, left)
	}
	if err := releaseOne(ctx, a, "job", "A"); err != nil {
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
	if err := releaseOne(ctx, a, "job", "A"); !errors.Is(err, lock.ErrNotHeld) {
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
	if err := releaseOne(ctx, a, "z", "A"); err != nil {
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
	if h, err := a.Holder(ctx, "w"); err != nil || h.KeeperID != "B" {
		t.Fatalf("ReleaseLocks touched another keeper's lock: %+v %v", h, err)
	}
}

func TestLapsedLeaseIsNotRenewed(t *testing.T) {
	t.Parallel()
	ttl := 300 * time.Millisecond
	ls, db := newLockers(t, 1, lock.WithTTL(ttl))
	a := ls[0]
	// The new term is taken with a long lease, which stays live until it
	// is listed below however slow the round trips.
	again := onNewClient(t, db.Name(), lock.WithTTL(time.Minute))
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
	second := mustAcquire(t, ctx, again, "lapse", "A")
	if second.Fence <= first.Fence {
		t.Fatalf("new term fence %d, want > %d", second.Fence, first.Fence)
	}
	hs, err := a.Locks(ctx)
	if err != nil || len(hs) != 1 || hs[0].Expired || hs[0].KeeperID != "A" {
		t.Fatalf("locks: %+v %v", hs, err)
	}
}

// TestPurgeDeletesWhatTheTTLIndexWould: documents not renewed for
// Retention, held or released, and nothing else.
func TestPurgeDeletesWhatTheTTLIndexWould(t *testing.T) {
	t.Parallel()
	ls, db := newLockers(t, 1)
	a := ls[0]
	ctx := testCtx(t, 30*time.Second)
	coll := db.Collection(lock.DefaultCollection)
	old := time.Now().Add(-lock.Retention - time.Hour)
	_, err := coll.InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "old-held"}, {Key: "kid", Value: "B"}, {Key: "ts", Value: old}, {Key: "ttl", Value: int64(1000)}},
		bson.D{{Key: "_id", Value: "old-released"}, {Key: "ts", Value: old}, {Key: "ttl", Value: int64(1000)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, ctx, a, "new", "A")
	mustAcquire(t, ctx, a, "released", "A")
	if n, err := a.ReleaseLocks(ctx, "A", "released"); err != nil || n != 1 {
		t.Fatalf("release: %d %v", n, err)
	}
	n, err := a.Purge(ctx)
	if err != nil || n != 2 {
		t.Fatalf("purge: %d %v, want 2", n, err)
	}
	var left []struct {
		ID any `bson:"_id"`
	}
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := cur.All(ctx, &left); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range left {
		if s, ok := d.ID.(string); ok {
			ids = append(ids, s)
		}
	}
	if !sameSet(ids, []string{"new", "released"}) {
		t.Fatalf("left %v, want new and released (and the clock document)", left)
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

// TestAcquireMany takes, in one call, a lock the caller holds, a free one,
// one never used and one whose holder's lease lapsed, next to one another
// keeper holds and one whose holder's longer lease has not lapsed: each
// lands in Leases or Refused, in the order asked, with a new term for
// every lease, and the other keepers' locks are untouched. The held locks
// come first, so that on FerretDB, whose bulk writes stop at the first
// failed write, the rest are written by a later pass and the first pass
// must not count the caller's old terms as new ones.
func TestAcquireMany(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	ls, db := newLockers(t, 2, lock.WithTTL(ttl))
	a, c := ls[0], ls[1]
	// The locks the batch must find held by others are taken with long
	// leases, live however slow the round trips before the batch.
	long := onNewClient(t, db.Name(), lock.WithTTL(time.Minute))
	b := onNewClient(t, db.Name(), lock.WithTTL(time.Minute))
	ctx := testCtx(t, 30*time.Second)

	gone := mustAcquire(t, ctx, c, "lapsed", "C")
	longer := mustAcquire(t, ctx, long, "longer", "L")
	time.Sleep(ttl + 100*time.Millisecond)
	own := mustAcquire(t, ctx, a, "own", "A")
	freed := mustAcquire(t, ctx, a, "freed", "A")
	if err := releaseOne(ctx, a, "freed", "A"); err != nil {
		t.Fatal(err)
	}
	other := mustAcquire(t, ctx, b, "other", "B")

	before := time.Now()
	got, err := a.AcquireLocks(ctx, "A", "other", "longer", "own", "new", "lapsed", "other", "freed", "own")
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range got.Granted {
		ids = append(ids, l.LockID)
		if l.KeeperID != "A" {
			t.Errorf("lease %+v: keeper %q", l, l.KeeperID)
		}
		if !l.Deadline.After(before) || l.Deadline.After(after.Add(ttl)) {
			t.Errorf("lease of %q ends %v after the call began, %v after it ended: want within the TTL %v of the call",
				l.LockID, l.Deadline.Sub(before), l.Deadline.Sub(after), ttl)
		}
		h, err := b.Holder(ctx, l.LockID)
		if err != nil || h.KeeperID != "A" || h.Fence != l.Fence {
			t.Errorf("holder of %q: %+v %v, want A with fence %d", l.LockID, h, err, l.Fence)
		}
	}
	if want := []string{"own", "new", "lapsed", "freed"}; fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("acquired %v, want %v in that order", ids, want)
	}
	if fmt.Sprint(got.Refused) != "[other longer]" {
		t.Fatalf("refused %v, want [other longer]", got.Refused)
	}
	for _, prev := range []lock.Grant{own, freed, gone} {
		i := slices.IndexFunc(got.Granted, func(l lock.Grant) bool { return l.LockID == prev.LockID })
		if got.Granted[i].Fence <= prev.Fence {
			t.Errorf("%q: fence %d, want above the previous term's %d", prev.LockID, got.Granted[i].Fence, prev.Fence)
		}
	}
	for _, prev := range []lock.Grant{other, longer} {
		if h, err := a.Holder(ctx, prev.LockID); err != nil || h.KeeperID != prev.KeeperID || h.Fence != prev.Fence {
			t.Errorf("refused lock %q: %+v %v, want %s's term unchanged", prev.LockID, h, err, prev.KeeperID)
		}
	}
}

// TestAcquireManyDeadlineFromWrite: a lease's deadline counts from the
// sending of the write that won it, not from the read that tells which
// it won; a read held up for a while leaves the lease that much less time.
func TestAcquireManyDeadlineFromWrite(t *testing.T) {
	t.Parallel()
	const ttl, delay = 2 * time.Second, 500 * time.Millisecond
	var delayFinds atomic.Bool
	client := mongotest.NewClient(t, options.Client().SetMonitor(&event.CommandMonitor{
		Started: func(_ context.Context, e *event.CommandStartedEvent) {
			if e.CommandName == "find" && delayFinds.Load() {
				time.Sleep(delay)
			}
		},
	}))
	l, err := lock.New(mongotest.Database(t, client, newDB(t)), lock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 30*time.Second)
	mustAcquire(t, ctx, l, "warm-up", "k") // reads the server's clock
	delayFinds.Store(true)
	got, err := l.AcquireLocks(ctx, "k", "x", "y")
	after := time.Now()
	if err != nil || len(got.Granted) != 2 {
		t.Fatalf("acquired %+v: %v", got, err)
	}
	for _, lease := range got.Granted {
		// The write went at least delay before the call returned.
		if lease.Deadline.After(after.Add(ttl - delay)) {
			t.Errorf("lease of %q ends %v after the call returned, want at most TTL %v minus the read's %v",
				lease.LockID, lease.Deadline.Sub(after), ttl, delay)
		}
	}
}

// TestAcquireManyRace: keepers taking overlapping sets of locks at once
// each get every lock they asked for either as a lease or as refused, and
// each lock goes to exactly one of them, the one the database names.
func TestAcquireManyRace(t *testing.T) {
	t.Parallel()
	const keepers, locks = 4, 40
	ls, _ := newLockers(t, keepers, lock.WithTTL(30*time.Second))
	ctx := testCtx(t, 60*time.Second)
	results := make([]lock.Acquisition, keepers)
	var wg sync.WaitGroup
	for k := range keepers {
		wg.Go(func() {
			ids := make([]string, locks)
			for i := range ids {
				ids[i] = fmt.Sprint("r", (i+7*k)%locks) // a different order each
				if k%2 == 1 {
					ids[i] = fmt.Sprint("r", (locks-1-i+7*k)%locks)
				}
			}
			a, err := ls[k].AcquireLocks(ctx, fmt.Sprint("K", k), ids...)
			if err != nil {
				t.Error(err)
			}
			results[k] = a
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	winner := map[string]lock.Grant{}
	for k, a := range results {
		if n := len(a.Granted) + len(a.Refused); n != locks {
			t.Errorf("K%d: %d acquired + %d refused, want all %d", k, len(a.Granted), len(a.Refused), locks)
		}
		for _, l := range a.Granted {
			if w, ok := winner[l.LockID]; ok {
				t.Errorf("%q acquired by both %s and %s", l.LockID, w.KeeperID, l.KeeperID)
			}
			winner[l.LockID] = l
		}
	}
	if len(winner) != locks {
		t.Errorf("%d of %d locks acquired by someone", len(winner), locks)
	}
	for id, w := range winner {
		h, err := ls[0].Holder(ctx, id)
		if err != nil || h.KeeperID != w.KeeperID || h.Fence != w.Fence {
			t.Errorf("holder of %q: %+v %v, want %s with fence %d", id, h, err, w.KeeperID, w.Fence)
		}
	}
}

// A release of a term never deletes a later term of the same keeper: a
// release that reaches the server late (its client timed out) must not
// free a lock the keeper took again meanwhile.
func TestReleaseTermsOnlyThatTerm(t *testing.T) {
	t.Parallel()
	ls, _ := newLockers(t, 1)
	l := ls[0]
	ctx := testCtx(t, 30*time.Second)

	old := mustAcquire(t, ctx, l, "x", "K")
	if err := releaseOne(ctx, l, "x", "K"); err != nil {
		t.Fatal(err)
	}
	cur := mustAcquire(t, ctx, l, "x", "K")
	other := mustAcquire(t, ctx, l, "y", "K")
	mustAcquire(t, ctx, l, "z", "K")
	// Fences are per lock id: y's term with x's old fence may be y's
	// current one, so the stale term of y is one that never was.
	n, err := l.ReleaseTerms(ctx, "K", lock.Term{LockID: "x", Fence: old.Fence}, lock.Term{LockID: "y", Fence: other.Fence + 1})
	if err != nil || n != 0 {
		t.Fatalf("release of an old term: %d deleted, %v; want 0", n, err)
	}
	if h, err := l.Holder(ctx, "x"); err != nil || h.Fence != cur.Fence {
		t.Fatalf("x after a late release of its old term: %+v %v, want the current term %d", h, err, cur.Fence)
	}
	// Fenced and unfenced terms in one call: each deleted by its own rule.
	n, err = l.ReleaseTerms(ctx, "K", lock.Term{LockID: "x", Fence: cur.Fence}, lock.Term{LockID: "y", Fence: other.Fence}, lock.Term{LockID: "z"})
	if err != nil || n != 3 {
		t.Fatalf("release of the current terms: %d deleted, %v; want 3", n, err)
	}
}

// TestLocksPage checks that LocksPage pages the held locks by id: a
// prefix, a cursor and a limit, released locks left out.
func TestLocksPage(t *testing.T) {
	t.Parallel()
	ls, _ := newLockers(t, 1, lock.WithTTL(10*time.Second))
	a := ls[0]
	ctx := testCtx(t, time.Minute)
	for _, id := range []string{"a/1", "a/2", "a/3", "b/1", "c/1"} {
		mustAcquire(t, ctx, a, id, "A")
	}
	if err := releaseOne(ctx, a, "a/2", "A"); err != nil {
		t.Fatal(err)
	}
	ids := func(prefix, after string, limit int) string {
		t.Helper()
		hs, err := a.LocksPage(ctx, prefix, after, limit)
		if err != nil {
			t.Fatalf("LocksPage(%q, %q, %d): %v", prefix, after, limit, err)
		}
		var out []string
		for _, h := range hs {
			out = append(out, h.LockID)
		}
		return strings.Join(out, " ")
	}
	for _, c := range []struct {
		prefix, after string
		limit         int
		want          string
	}{
		{"", "", 10, "a/1 a/3 b/1 c/1"},
		{"", "", 2, "a/1 a/3"},
		{"", "a/3", 2, "b/1 c/1"},
		{"a/", "", 10, "a/1 a/3"},
		{"a/", "a/1", 10, "a/3"},
		{"b/", "a/9", 10, "b/1"}, // a cursor before the prefix
		{"a/", "b/", 10, ""},     // and after it
	} {
		if got := ids(c.prefix, c.after, c.limit); got != c.want {
			t.Errorf("LocksPage(%q, %q, %d) = %q, want %q", c.prefix, c.after, c.limit, got, c.want)
		}
	}
	if _, err := a.LocksPage(ctx, "", "", 0); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("limit 0: %v, want ErrInvalidArgument", err)
	}
}
