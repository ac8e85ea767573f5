package locktest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/lock"
)

// Harness is what RunConformance needs of a lock.Store implementation.
type Harness struct {
	// NewStore returns an empty store: no lock of another store of the
	// run is visible in it (for a *lock.Locker, a new database or
	// collection), and a fake clock of its own if it has one. The suite
	// waits up to twice the store's TTL several times, and expects a call
	// to take well under a quarter of it: 300ms suits a Locker on a local
	// server, 30s a Store on a fake clock.
	NewStore func(t *testing.T) lock.Store
	// Wait lets at least d pass for store. If nil, a *clockwork.FakeClock
	// store clock is advanced and any other is slept on (Clock().Sleep):
	// a store judging expiry by a server's clock needs real time.
	Wait func(t *testing.T, store lock.Store, d time.Duration)
}

// RunConformance checks that the stores h makes keep the contract
// lock.Store users rely on, as *lock.Locker does: exclusion between
// keepers (also under concurrent calls); re-acquisition by the holder is a
// new term with a larger fence; fences strictly increase across release,
// expiry and takeover; another keeper takes a lease over only after its
// TTL since the last renewal; Renew extends live leases, reports the others
// lost and re-creates none; ReleaseTerms with a stale fence releases
// nothing; Holder reports the holder, fence and expiry, and ErrNotHeld
// with the last term for released and expired locks; a batch acquisition
// grants what is free and refuses what is held elsewhere; a store that
// keeps values (lock.ValueStore) writes one only for the live term of its
// holder and clears it with every new term and release; bad ids are
// rejected; a call whose context ended fails with its error. Each case is
// a parallel subtest on its own store. A case whose calls took so long
// that a lease it needs live may have ended (a loaded machine, on a real
// clock) is skipped, saying so, rather than failed.
func RunConformance(t *testing.T, h Harness) {
	t.Helper()
	if h.NewStore == nil {
		t.Fatal("locktest: RunConformance: Harness.NewStore is nil")
	}
	if h.Wait == nil {
		h.Wait = wait
	}
	for _, c := range conformance {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			store := h.NewStore(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*store.TTL()+10*time.Second)
			defer cancel()
			c.run(&checker{t: t, ctx: ctx, s: store, ttl: store.TTL(), wait: func(d time.Duration) { h.Wait(t, store, d) },
				deadlines: make(map[string]time.Time)})
		})
	}
}

func wait(_ *testing.T, store lock.Store, d time.Duration) {
	if fc, ok := store.Clock().(*clockwork.FakeClock); ok {
		fc.Advance(d)
		return
	}
	store.Clock().Sleep(d)
}

var conformance = []struct {
	name string
	run  func(c *checker)
}{
	{"Exclusion", testExclusion},
	{"ConcurrentExclusion", testConcurrentExclusion},
	{"ReacquireIsNewTerm", testReacquire},
	{"FencesIncrease", testFencesIncrease},
	{"TakeoverOnlyAfterTTL", testTakeover},
	{"Renew", testRenew},
	{"ReleaseTerms", testReleaseTerms},
	{"Holder", testHolder},
	{"Batch", testBatch},
	{"InvalidArguments", testInvalid},
	{"EndedContext", testEndedContext},
	{"Value", testValue},
}

// checker runs one case on one store. It keeps the deadline of every
// lease it was granted or renewed, so that a check that needs a lease
// to be live can tell a broken store from a machine too slow to judge:
// a lease is only promised until its deadline.
type checker struct {
	t    *testing.T
	ctx  context.Context
	s    lock.Store
	ttl  time.Duration
	wait func(time.Duration)

	mu        sync.Mutex
	deadlines map[string]time.Time // keeper "/" lock id: deadline of its lease
}

func (c *checker) noteDeadline(keeper, id string, d time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadlines[keeper+"/"+id] = d
}

// late reports whether at is within margin of the deadline of keeper's
// lease on id, or past it: too late to expect the lease live. The case is
// then skipped rather than failed.
func (c *checker) late(keeper, id string, at time.Time, margin time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.deadlines[keeper+"/"+id]
	return ok && !at.Before(d.Add(-margin))
}

// tooSlow skips the case, saying why.
func (c *checker) tooSlow(what string) {
	c.t.Helper()
	c.t.Skipf("%s: the calls took so long that the lease may have ended; too slow to judge", what)
}

// acquire calls AcquireLocks and checks what every store guarantees of
// its answer.
func (c *checker) acquire(keeper string, ids ...string) lock.Acquisition {
	c.t.Helper()
	before := c.s.Clock().Now()
	a, err := c.s.AcquireLocks(c.ctx, keeper, ids...)
	after := c.s.Clock().Now()
	if err != nil {
		c.t.Fatalf("AcquireLocks(%s, %v): %v", keeper, ids, err)
	}
	for _, g := range a.Granted {
		if !slices.Contains(ids, g.LockID) || g.KeeperID != keeper || g.Fence == 0 {
			c.t.Fatalf("AcquireLocks(%s, %v) granted %+v", keeper, ids, g)
		}
		c.checkDeadline("grant of "+g.LockID, g.Sent, g.Deadline, before, after)
		c.noteDeadline(keeper, g.LockID, g.Deadline)
	}
	return a
}

// checkDeadline checks a deadline of a call that began at sent, between
// before and after: at most the TTL after sent, and (a bound of
// usefulness, not of safety) at least half of it.
func (c *checker) checkDeadline(what string, sent, deadline, before, after time.Time) {
	c.t.Helper()
	if sent.Before(before) || sent.After(after) {
		c.t.Errorf("%s: sent at %v, not within the call (%v to %v)", what, sent, before, after)
	}
	if deadline.After(sent.Add(c.ttl)) || deadline.Before(sent.Add(c.ttl/2)) {
		c.t.Errorf("%s: deadline %v after sending, want at most the TTL %v and at least half of it", what, deadline.Sub(sent), c.ttl)
	}
}

// mustGrant acquires id for keeper and fails unless it is granted.
func (c *checker) mustGrant(keeper, id string) lock.Grant {
	c.t.Helper()
	a := c.acquire(keeper, id)
	if len(a.Granted) != 1 || len(a.Refused) != 0 {
		c.t.Fatalf("%s acquiring %q: %+v, want it granted", keeper, id, a)
	}
	return a.Granted[0]
}

// mustRefuse fails unless keeper's acquisition of id, which holder holds,
// is refused. A grant answered after the holder's deadline proves nothing.
func (c *checker) mustRefuse(keeper, id, holder string) {
	c.t.Helper()
	a := c.acquire(keeper, id)
	if len(a.Granted) == 0 && slices.Equal(a.Refused, []string{id}) {
		return
	}
	if len(a.Granted) == 1 && c.late(holder, id, c.s.Clock().Now(), 0) {
		c.tooSlow(fmt.Sprintf("%s took %q from %s", keeper, id, holder))
	}
	c.t.Fatalf("%s acquiring %q, held by %s: %+v, want it refused", keeper, id, holder, a)
}

// takeOver acquires id for keeper, whose holder's lease lapsed: once the
// TTL has passed since its last renewal it must be granted, though a store
// judging by an estimate of a server's clock may need a little longer.
func (c *checker) takeOver(keeper, id string) lock.Grant {
	c.t.Helper()
	for range 8 {
		if a := c.acquire(keeper, id); len(a.Granted) == 1 {
			return a.Granted[0]
		}
		c.wait(c.ttl / 4)
	}
	c.t.Fatalf("%s could not take over %q, two TTLs after its lease lapsed", keeper, id)
	return lock.Grant{}
}

// expired waits until Holder reports id's lease expired, as takeOver, and
// returns what it reports.
func (c *checker) expired(id string) lock.Holder {
	c.t.Helper()
	for range 8 {
		h, err := c.s.Holder(c.ctx, id)
		if !errors.Is(err, lock.ErrNotHeld) && err != nil {
			c.t.Fatalf("Holder(%q): %v", id, err)
		}
		if err != nil && h.Expired {
			return h
		}
		c.wait(c.ttl / 4)
	}
	c.t.Fatalf("Holder(%q) never reports the lapsed lease expired", id)
	return lock.Holder{}
}

// renew renews ids for keeper and checks that held and lost are what it
// reports, in any order. A lease expected held but reported lost when
// the renewal was sent late in the lease proves nothing.
func (c *checker) renew(keeper string, ids, held, lost []string) lock.Renewal {
	c.t.Helper()
	before := c.s.Clock().Now()
	r, err := c.s.Renew(c.ctx, keeper, ids...)
	after := c.s.Clock().Now()
	if err != nil {
		c.t.Fatalf("Renew(%s, %v): %v", keeper, ids, err)
	}
	if len(r.Held)+len(r.Lost) != len(ids) {
		c.t.Fatalf("Renew(%s, %v) = %+v: every id must be held or lost", keeper, ids, r)
	}
	if len(r.Held) > 0 && (r.Deadline.Before(before.Add(c.ttl/2)) || r.Deadline.After(after.Add(c.ttl))) {
		c.t.Errorf("renewal deadline %v after the call began, want from half the TTL to the TTL (%v) after sending", r.Deadline.Sub(before), c.ttl)
	}
	if !sameSet(r.Held, held) || !sameSet(r.Lost, lost) {
		for _, id := range held {
			if slices.Contains(r.Lost, id) && c.late(keeper, id, before, c.ttl/4) {
				c.tooSlow(fmt.Sprintf("renewal of %q by %s", id, keeper))
			}
		}
		c.t.Fatalf("Renew(%s, %v): held %v lost %v, want held %v lost %v", keeper, ids, r.Held, r.Lost, held, lost)
	}
	for _, id := range r.Held {
		c.noteDeadline(keeper, id, r.Deadline)
	}
	return r
}

func (c *checker) release(keeper string, terms ...lock.Term) int {
	c.t.Helper()
	n, err := c.s.ReleaseTerms(c.ctx, keeper, terms...)
	if err != nil {
		c.t.Fatalf("ReleaseTerms(%s, %v): %v", keeper, terms, err)
	}
	return n
}

func (c *checker) wantReleased(keeper string, want int, terms ...lock.Term) {
	c.t.Helper()
	if n := c.release(keeper, terms...); n != want {
		c.t.Fatalf("ReleaseTerms(%s, %+v) released %d, want %d", keeper, terms, n, want)
	}
}

// holder returns Holder's answer, failing on errors other than ErrNotHeld.
func (c *checker) holder(id string) (lock.Holder, bool) {
	c.t.Helper()
	h, err := c.s.Holder(c.ctx, id)
	switch {
	case errors.Is(err, lock.ErrNotHeld):
		return h, false
	case err != nil:
		c.t.Fatalf("Holder(%q): %v", id, err)
	}
	if h.LockID != id || h.KeeperID == "" || h.Fence == 0 || h.Released || h.Expired {
		c.t.Fatalf("Holder(%q) = %+v, want a live lease", id, h)
	}
	if d := h.ExpiresAt.Sub(h.RenewedAt); d < c.ttl || d >= c.ttl+time.Millisecond {
		c.t.Errorf("Holder(%q): expires %v after its renewal, want the TTL %v", id, d, c.ttl)
	}
	if h.AcquiredAt.After(h.RenewedAt) {
		c.t.Errorf("Holder(%q): acquired at %v, after its last renewal %v", id, h.AcquiredAt, h.RenewedAt)
	}
	if !h.ReadAt.IsZero() && !h.ReadAt.Before(h.ExpiresAt) {
		c.t.Errorf("Holder(%q): live lease read at %v, not before it expires at %v", id, h.ReadAt, h.ExpiresAt)
	}
	return h, true
}

// wantHolder checks that keeper holds id in the term of fence.
func (c *checker) wantHolder(id, keeper string, fence uint64) lock.Holder {
	c.t.Helper()
	before := c.s.Clock().Now()
	h, ok := c.holder(id)
	if !ok || h.KeeperID != keeper || h.Fence != fence {
		if !ok && h.Expired && c.late(keeper, id, before, c.ttl/4) {
			c.tooSlow(fmt.Sprintf("holder of %q", id))
		}
		c.t.Fatalf("Holder(%q) = %+v (held: %v), want %s with fence %d", id, h, ok, keeper, fence)
	}
	return h
}

// fenceOf returns the fence of id's current term.
func (c *checker) fenceOf(id string) uint64 {
	c.t.Helper()
	h, ok := c.holder(id)
	if !ok {
		c.t.Fatalf("%q is not held", id)
	}
	return h.Fence
}

func testExclusion(c *checker) {
	g := c.mustGrant("A", "x")
	c.mustRefuse("B", "x", "A")
	c.renew("B", []string{"x"}, nil, []string{"x"})
	c.wantReleased("B", 0, lock.Term{LockID: "x"})
	c.wantReleased("B", 0, lock.Term{LockID: "x", Fence: g.Fence})
	c.wantHolder("x", "A", g.Fence)
	c.renew("A", []string{"x"}, []string{"x"}, nil)
	c.mustRefuse("B", "x", "A")
}

// testConcurrentExclusion: keepers race to take, renew and release one
// lock. No grant may come while another keeper's trusted lease on it
// lasts, no renewal may find it lost before then, and fences increase in
// the order of the grants.
func testConcurrentExclusion(c *checker) {
	const keepers, attempts = 4, 10
	var (
		mu       sync.Mutex
		holder   string    // keeper of the lease taken last, until it releases it
		deadline time.Time // its deadline
		last     uint64    // fence of the last trusted grant
		grants   int
		wg       sync.WaitGroup
	)
	start := make(chan struct{})
	for k := range keepers {
		keeper := string(rune('A' + k))
		wg.Go(func() {
			<-start
			for range attempts {
				a, err := c.s.AcquireLocks(c.ctx, keeper, "x")
				recv := c.s.Clock().Now()
				if err != nil {
					c.t.Errorf("%s: %v", keeper, err)
					return
				}
				if len(a.Granted) == 0 {
					continue
				}
				g := a.Granted[0]
				if !recv.Before(g.Deadline) {
					// Answered too late to trust (a slow machine): a
					// Session would release it at once, and so do we.
					_ = c.release(keeper, lock.Term{LockID: "x", Fence: g.Fence})
					continue
				}
				mu.Lock()
				if holder != "" && recv.Before(deadline) {
					c.t.Errorf("%s granted x (fence %d) while %s's lease lasts until %v", keeper, g.Fence, holder, deadline)
				}
				if g.Fence <= last {
					c.t.Errorf("%s granted fence %d after fence %d", keeper, g.Fence, last)
				}
				holder, deadline, last = keeper, g.Deadline, g.Fence
				grants++
				mu.Unlock()

				// While it holds the lease, it is its.
				runtime.Gosched()
				r, err := c.s.Renew(c.ctx, keeper, "x")
				if err == nil && len(r.Held) == 0 && c.s.Clock().Now().Before(g.Deadline) {
					c.t.Errorf("%s lost x (fence %d) before its deadline", keeper, g.Fence)
				}
				mu.Lock()
				holder = ""
				mu.Unlock()
				_ = c.release(keeper, lock.Term{LockID: "x", Fence: g.Fence})
			}
		})
	}
	close(start)
	wg.Wait()
	if grants == 0 {
		c.t.Fatal("no keeper ever took the lock")
	}
}

func testReacquire(c *checker) {
	g1 := c.mustGrant("A", "x")
	g2 := c.mustGrant("A", "x")
	if g2.Fence <= g1.Fence {
		c.t.Fatalf("re-acquisition by the holder: fence %d after %d, want a new term with a larger one", g2.Fence, g1.Fence)
	}
	c.wantHolder("x", "A", g2.Fence)
	c.wantReleased("A", 0, lock.Term{LockID: "x", Fence: g1.Fence})
	c.wantHolder("x", "A", g2.Fence)
	c.renew("A", []string{"x"}, []string{"x"}, nil)
	c.wantReleased("A", 1, lock.Term{LockID: "x", Fence: g2.Fence})
	if h, ok := c.holder("x"); ok {
		c.t.Fatalf("Holder after the release: %+v, want ErrNotHeld", h)
	}
}

func testFencesIncrease(c *checker) {
	var fences []uint64
	note := func(g lock.Grant) { fences = append(fences, g.Fence) }
	g := c.mustGrant("A", "x")
	note(g)
	c.wantReleased("A", 1, lock.Term{LockID: "x", Fence: g.Fence})
	note(c.mustGrant("A", "x")) // after a release, by the same keeper
	c.wantReleased("A", 1, lock.Term{LockID: "x"})
	g = c.mustGrant("B", "x") // after a release, by another keeper
	note(g)
	c.wait(c.ttl + c.ttl/2)
	note(c.takeOver("A", "x")) // taking over an expired lease
	c.wait(c.ttl + c.ttl/2)
	note(c.mustGrant("A", "x")) // its own expired lease
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			c.t.Fatalf("fences %v: term %d's is not larger than the one before", fences, i)
		}
	}
	c.renew("B", []string{"x"}, nil, []string{"x"})
}

func testTakeover(c *checker) {
	g := c.mustGrant("A", "x")
	c.wait(c.ttl / 2)
	c.mustRefuse("B", "x", "A")
	c.renew("A", []string{"x"}, []string{"x"}, nil)
	c.wait(c.ttl / 2) // the TTL since the acquisition, half since the renewal
	c.mustRefuse("B", "x", "A")
	c.wait(c.ttl) // 1.5 TTL since the renewal
	if h := c.expired("x"); h.KeeperID != "A" || h.Fence != g.Fence {
		c.t.Fatalf("Holder of a lapsed lease: %+v; want A's, fence %d", h, g.Fence)
	}
	gb := c.takeOver("B", "x")
	if gb.Fence <= g.Fence {
		c.t.Fatalf("takeover: fence %d after %d", gb.Fence, g.Fence)
	}
	c.renew("A", []string{"x"}, nil, []string{"x"})
	c.wantReleased("A", 0, lock.Term{LockID: "x"})
	c.wantHolder("x", "B", gb.Fence)
}

func testRenew(c *checker) {
	old := c.mustGrant("A", "old")
	c.wait(c.ttl * 6 / 10)
	c.acquire("A", "a", "b")
	c.mustGrant("B", "other")
	before := c.wantHolder("a", "A", c.fenceOf("a"))
	c.wantReleased("A", 1, lock.Term{LockID: "b"})
	c.wait(c.ttl * 6 / 10) // old's lease lapsed; a's has 0.4 TTL left
	c.renew("A", []string{"a", "b", "old", "other", "never"}, []string{"a"}, []string{"b", "old", "other", "never"})
	after := c.wantHolder("a", "A", before.Fence) // a renewal keeps the fence
	if !after.RenewedAt.After(before.RenewedAt) || !after.AcquiredAt.Equal(before.AcquiredAt) {
		c.t.Errorf("renewal: renewed %v -> %v, acquired %v -> %v; want a later renewal, the same term", before.RenewedAt, after.RenewedAt, before.AcquiredAt, after.AcquiredAt)
	}
	// A renewal re-creates no lease: not the lapsed one, not the released one.
	if h, err := c.s.Holder(c.ctx, "old"); !errors.Is(err, lock.ErrNotHeld) || h.KeeperID != "A" || h.Fence != old.Fence {
		c.t.Fatalf("Holder of a lapsed lease after its renewal failed: %+v, %v", h, err)
	}
	if h, err := c.s.Holder(c.ctx, "b"); !errors.Is(err, lock.ErrNotHeld) || !h.Released {
		c.t.Fatalf("Holder of a released lock after a renewal: %+v, %v", h, err)
	}
	c.takeOver("B", "old")
	c.wait(c.ttl * 6 / 10) // a's lease: its TTL since the renewal has not passed
	c.mustRefuse("B", "a", "A")
}

func testReleaseTerms(c *checker) {
	gx := c.mustGrant("A", "x")
	gy := c.mustGrant("A", "y")
	c.mustGrant("B", "z")
	c.wantReleased("A", 0, lock.Term{LockID: "x", Fence: gx.Fence + 1}) // no such term
	c.wantReleased("A", 0, lock.Term{LockID: "z"})                      // B's
	c.wantReleased("A", 0, lock.Term{LockID: "never"})
	c.wantHolder("x", "A", gx.Fence)
	c.wantReleased("A", 2, lock.Term{LockID: "x", Fence: gx.Fence}, lock.Term{LockID: "y"}, lock.Term{LockID: "z"})
	c.wantReleased("A", 0, lock.Term{LockID: "x"}, lock.Term{LockID: "y", Fence: gy.Fence}) // already released
	c.renew("A", []string{"x", "y"}, nil, []string{"x", "y"})
	g := c.mustGrant("B", "x")
	c.wantReleased("A", 0, lock.Term{LockID: "x", Fence: gx.Fence})
	c.wantHolder("x", "B", g.Fence)
}

func testHolder(c *checker) {
	if h, err := c.s.Holder(c.ctx, "never"); !errors.Is(err, lock.ErrNotHeld) || h.KeeperID != "" || h.Fence != 0 {
		c.t.Fatalf("Holder of a lock never taken: %+v, %v; want ErrNotHeld", h, err)
	}
	g := c.mustGrant("A", "x")
	c.wantHolder("x", "A", g.Fence)
	c.wantReleased("A", 1, lock.Term{LockID: "x"})
	r, err := c.s.Holder(c.ctx, "x")
	if !errors.Is(err, lock.ErrNotHeld) || !r.Released || r.KeeperID != "" || r.Fence != g.Fence || r.LockID != "x" {
		c.t.Fatalf("Holder of a released lock: %+v, %v; want Released, fence %d, with ErrNotHeld", r, err, g.Fence)
	}
	gy := c.mustGrant("B", "y")
	c.wait(c.ttl + c.ttl/2)
	e := c.expired("y")
	if e.KeeperID != "B" || e.Fence != gy.Fence || e.LockID != "y" || e.Released {
		c.t.Fatalf("Holder of an expired lease: %+v; want B's, fence %d", e, gy.Fence)
	}
	if !e.ReadAt.IsZero() && e.ExpiresAt.After(e.ReadAt) {
		c.t.Errorf("Holder of an expired lease: expires at %v, after it was read at %v", e.ExpiresAt, e.ReadAt)
	}
}

func testBatch(c *checker) {
	gb := c.mustGrant("B", "b")
	a := c.acquire("A", "a", "b", "c", "a")
	if len(a.Granted) == 3 && c.late("B", "b", c.s.Clock().Now(), 0) {
		c.tooSlow("batch took b from B")
	}
	if len(a.Granted) != 2 || a.Granted[0].LockID != "a" || a.Granted[1].LockID != "c" || !slices.Equal(a.Refused, []string{"b"}) {
		c.t.Fatalf("batch of a, b (held by B), c, a: %+v; want a and c granted in order, b refused", a)
	}
	c.wantHolder("a", "A", a.Granted[0].Fence)
	c.wantHolder("c", "A", a.Granted[1].Fence)
	c.wantHolder("b", "B", gb.Fence)
	c.renew("A", []string{"a", "b", "c"}, []string{"a", "c"}, []string{"b"})
	again := c.acquire("A", "a", "c")
	if len(again.Granted) != 2 || again.Granted[0].Fence <= a.Granted[0].Fence || again.Granted[1].Fence <= a.Granted[1].Fence {
		c.t.Fatalf("batch re-acquisition %+v after %+v: want new terms with larger fences", again, a)
	}
	c.wantReleased("A", 2, lock.Term{LockID: "a", Fence: again.Granted[0].Fence}, lock.Term{LockID: "c", Fence: again.Granted[1].Fence})
	a = c.acquire("B", "a", "c", "b")
	if len(a.Granted) != 3 || len(a.Refused) != 0 {
		c.t.Fatalf("batch of released and own locks: %+v; want all granted", a)
	}
}

func testInvalid(c *checker) {
	bad := func(what string, err error) {
		c.t.Helper()
		if !errors.Is(err, lock.ErrInvalidArgument) {
			c.t.Errorf("%s: %v, want lock.ErrInvalidArgument", what, err)
		}
	}
	_, err := c.s.AcquireLocks(c.ctx, "", "x")
	bad("acquire with an empty keeper id", err)
	_, err = c.s.AcquireLocks(c.ctx, "A", "x", "")
	bad("acquire of an empty lock id", err)
	_, err = c.s.AcquireLocks(c.ctx, "A", "a\x00b")
	bad("acquire of a lock id with NUL", err)
	_, err = c.s.Renew(c.ctx, "", "x")
	bad("renew with an empty keeper id", err)
	_, err = c.s.ReleaseTerms(c.ctx, "A", lock.Term{})
	bad("release of an empty lock id", err)
	_, err = c.s.Holder(c.ctx, "")
	bad("holder of an empty lock id", err)
	if _, ok := c.holder("x"); ok {
		c.t.Fatal("a rejected acquisition took x")
	}
	if a, err := c.s.AcquireLocks(c.ctx, "A"); err != nil || len(a.Granted)+len(a.Refused) != 0 {
		c.t.Errorf("acquire of no locks: %+v, %v", a, err)
	}
	if r, err := c.s.Renew(c.ctx, "A"); err != nil || len(r.Held)+len(r.Lost) != 0 {
		c.t.Errorf("renew of no locks: %+v, %v", r, err)
	}
	if n, err := c.s.ReleaseTerms(c.ctx, "A"); err != nil || n != 0 {
		c.t.Errorf("release of no locks: %d, %v", n, err)
	}
}

func testEndedContext(c *checker) {
	g := c.mustGrant("A", "x")
	ended, cancel := context.WithCancel(c.ctx)
	cancel()
	if _, err := c.s.AcquireLocks(ended, "B", "y"); !errors.Is(err, context.Canceled) {
		c.t.Errorf("acquire with an ended context: %v, want context.Canceled", err)
	}
	if _, err := c.s.Renew(ended, "A", "x"); !errors.Is(err, context.Canceled) {
		c.t.Errorf("renew with an ended context: %v, want context.Canceled", err)
	}
	if _, err := c.s.ReleaseTerms(ended, "A", lock.Term{LockID: "x"}); !errors.Is(err, context.Canceled) {
		c.t.Errorf("release with an ended context: %v, want context.Canceled", err)
	}
	c.wantHolder("x", "A", g.Fence)
	if h, ok := c.holder("y"); ok {
		c.t.Errorf("y held by %s after an acquisition with an ended context", h.KeeperID)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// testValue: a value is written only by its term's live holder, shown by
// Holder, and cleared by a new term and a release (lock.ValueStore).
func testValue(c *checker) {
	vs, ok := c.s.(lock.ValueStore)
	if !ok {
		c.t.Skip("the store keeps no values (not a lock.ValueStore)")
	}
	set := func(keeper string, fence uint64, v string) error {
		return vs.SetValue(c.ctx, keeper, lock.Term{LockID: "x", Fence: fence}, []byte(v))
	}
	wantValue := func(want string) {
		c.t.Helper()
		h, _ := c.holder("x")
		if string(h.Value) != want {
			c.t.Fatalf("Holder value %q, want %q", h.Value, want)
		}
	}
	g := c.mustGrant("A", "x")
	wantValue("")
	if err := set("A", g.Fence, "a:1"); err != nil {
		c.t.Fatalf("A's SetValue: %v", err)
	}
	wantValue("a:1")
	if err := set("B", g.Fence, "b"); !errors.Is(err, lock.ErrStaleTerm) {
		c.t.Fatalf("B's SetValue on A's term: %v, want ErrStaleTerm", err)
	}
	if err := vs.SetValue(c.ctx, "A", lock.Term{LockID: "x", Fence: g.Fence}, make([]byte, lock.MaxValueSize+1)); !errors.Is(err, lock.ErrValueTooLarge) {
		c.t.Fatalf("a value too large: %v, want ErrValueTooLarge", err)
	}
	wantValue("a:1")
	g2 := c.mustGrant("A", "x") // a new term of the same keeper
	wantValue("")
	if err := set("A", g.Fence, "old"); !errors.Is(err, lock.ErrStaleTerm) {
		c.t.Fatalf("SetValue on A's previous term: %v, want ErrStaleTerm", err)
	}
	if err := set("A", g2.Fence, "a:2"); err != nil {
		c.t.Fatalf("A's SetValue: %v", err)
	}
	c.wantReleased("A", 1, lock.Term{LockID: "x", Fence: g2.Fence})
	wantValue("")
	if err := set("A", g2.Fence, "late"); !errors.Is(err, lock.ErrStaleTerm) {
		c.t.Fatalf("SetValue after the release: %v, want ErrStaleTerm", err)
	}
}
