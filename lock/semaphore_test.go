package lock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
)

func newSemaphore(t testing.TB, s *lock.Session, name string, n int) *lock.Semaphore {
	t.Helper()
	m, err := s.Semaphore(name, n)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// mustTakeSlot takes a slot of m with one attempt, failing the test if it
// cannot, and returns its lease and slot number.
func mustTakeSlot(t testing.TB, ctx context.Context, m *lock.Semaphore) (*lock.Lease, int) {
	t.Helper()
	var l *lock.Lease
	ok, err := tryAgainOnError(ctx, func() (ok bool, err error) { l, ok, err = m.AcquireLock(ctx); return ok, err })
	if err != nil || !ok {
		t.Fatalf("acquire semaphore %q: ok=%v err=%v", m.Name(), ok, err)
	}
	return l, slotOf(t, m.Name(), l)
}

func slotOf(t testing.TB, name string, l *lock.Lease) int {
	t.Helper()
	got, k, ok := lock.ParseSlotID(l.LockID())
	if !ok || got != name {
		t.Fatalf("lease of %q is not a slot of %q", l.LockID(), name)
	}
	return k
}

func TestSlotID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		id   string
		name string
		k    int
		ok   bool
	}{
		{"pool#0", "pool", 0, true},
		{"pool#17", "pool", 17, true},
		{"a#b#3", "a#b", 3, true},
		{"#3", "", 0, false},
		{"pool", "", 0, false},
		{"pool#", "", 0, false},
		{"pool#03", "", 0, false},
		{"pool#-1", "", 0, false},
		{"pool#+1", "", 0, false},
		{fmt.Sprintf("pool#%d", lock.MaxSlots), "", 0, false},
	} {
		name, k, ok := lock.ParseSlotID(tc.id)
		if name != tc.name || k != tc.k || ok != tc.ok {
			t.Errorf("ParseSlotID(%q) = %q, %d, %v; want %q, %d, %v", tc.id, name, k, ok, tc.name, tc.k, tc.ok)
		}
		if ok && lock.SlotID(name, k) != tc.id {
			t.Errorf("SlotID(%q, %d) = %q, want %q", name, k, lock.SlotID(name, k), tc.id)
		}
	}
}

// TestSemaphoreBadInput: bad names, slot counts and arguments are errors
// wrapping ErrInvalidArgument that say what is wrong, and nothing is
// written.
func TestSemaphoreBadInput(t *testing.T) {
	t.Parallel()
	ls, db := newLockers(t, 1)
	s := newSession(t, ls[0])
	ctx := testCtx(t, 30*time.Second)
	for _, tc := range []struct {
		name string
		n    int
		want string
	}{
		{"", 1, "semaphore name is empty"},
		{"a\x00b", 1, "NUL"},
		{"\xff", 1, "UTF-8"},
		{strings.Repeat("x", lock.MaxIDLength), 1, "slot id"},
		{strings.Repeat("x", lock.MaxIDLength-2), 1, ""},
		{strings.Repeat("x", lock.MaxIDLength-2), 11, "slot id"},
		{"pool", 0, "0 slots, want 1 to"},
		{"pool", -1, "-1 slots"},
		{"pool", lock.MaxSlots + 1, fmt.Sprintf("%d slots", lock.MaxSlots+1)},
		{"pool", lock.MaxSlots, ""},
	} {
		_, err := s.Semaphore(tc.name, tc.n)
		if tc.want == "" {
			if err != nil {
				t.Errorf("Semaphore(%.10q…, %d): %v", tc.name, tc.n, err)
			}
			continue
		}
		if !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Semaphore(%.10q…, %d) = %v, want ErrInvalidArgument saying %q", tc.name, tc.n, err, tc.want)
		}
		if err := s.DoSemaphore(ctx, tc.name, tc.n, func(context.Context) error { return nil }); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("DoSemaphore(%.10q…, %d) = %v, want ErrInvalidArgument", tc.name, tc.n, err)
		}
	}
	if err := s.DoSemaphore(ctx, "pool", 2, nil); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("DoSemaphore with nil fn = %v", err)
	}
	m := newSemaphore(t, s, "pool", 2)
	var nilCtx context.Context
	ran := false
	for name, op := range map[string]func() error{
		"Session.DoSemaphore": func() error {
			return s.DoSemaphore(nilCtx, "pool", 2, func(context.Context) error { ran = true; return nil })
		},
		"Semaphore.Lock":        func() error { _, err := m.Lock(nilCtx); return err },
		"Semaphore.AcquireLock": func() error { _, _, err := m.AcquireLock(nilCtx); return err },
		"Semaphore.Wait":        func() error { return m.Wait(nilCtx, time.Millisecond) },
		"Semaphore.ReleaseLock": func() error { return m.ReleaseLock(nilCtx) },
	} {
		if err := recovered(op); !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil context") {
			t.Errorf("%s(nil context): %v, want an error wrapping ErrInvalidArgument naming the nil context", name, err)
		}
	}
	if ran || m.Lease() != nil {
		t.Errorf("a call with a nil context ran or took a slot")
	}
	if err := m.ReleaseLock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("ReleaseLock with nothing held = %v, want ErrNotHeld", err)
	}
	if n, err := db.Collection(lock.DefaultCollection).CountDocuments(ctx, map[string]any{"_id": map[string]any{"$regex": "^pool"}}); err != nil || n != 0 {
		t.Errorf("%d documents written (%v)", n, err)
	}
}

// TestSemaphoreSlots: n holders take the n slots, each its own; the next
// is refused, and is already-held through a handle that holds one; a
// release frees its slot for the next; a caller with a smaller n only
// tries the slots below it.
func TestSemaphoreSlots(t *testing.T) {
	t.Parallel()
	ls, _ := newLockers(t, 2)
	a, b := newSession(t, ls[0]), newSession(t, ls[1])
	ctx := testCtx(t, time.Minute)
	const n = 3
	held := map[int]*lock.Semaphore{}
	for i := range n {
		sess := a
		if i%2 == 1 {
			sess = b
		}
		m := newSemaphore(t, sess, "pool", n)
		l, k := mustTakeSlot(t, ctx, m)
		if held[k] != nil {
			t.Fatalf("slot %d taken twice", k)
		}
		if l.Fence() == 0 || m.Lease() != l {
			t.Fatalf("slot %d: fence %d, Lease %v", k, l.Fence(), m.Lease())
		}
		held[k] = m
		if _, _, err := m.AcquireLock(ctx); !errors.Is(err, lock.ErrAlreadyHeld) {
			t.Fatalf("second acquire through one handle = %v, want ErrAlreadyHeld", err)
		}
	}
	for _, sess := range []*lock.Session{a, b} {
		if l, ok, err := newSemaphore(t, sess, "pool", n).AcquireLock(ctx); ok || err != nil {
			t.Fatalf("a fourth holder: ok=%v err=%v (%v)", ok, err, l)
		}
	}
	// A smaller n: slot 0 only.
	small := newSemaphore(t, b, "pool", 1)
	if _, ok, err := small.AcquireLock(ctx); ok || err != nil {
		t.Fatalf("n=1 while slot 0 held: ok=%v err=%v", ok, err)
	}
	old := held[0].Lease().Fence()
	if err := held[0].ReleaseLock(ctx); err != nil {
		t.Fatal(err)
	}
	if held[0].Lease() != nil {
		t.Fatal("a released Semaphore still has a lease")
	}
	l, k := mustTakeSlot(t, ctx, small)
	if k != 0 || l.Fence() <= old {
		t.Fatalf("after the release took slot %d fence %d, want slot 0 above fence %d", k, l.Fence(), old)
	}
	if _, ok, err := newSemaphore(t, a, "pool", n).AcquireLock(ctx); ok || err != nil {
		t.Fatalf("a fourth holder: ok=%v err=%v", ok, err)
	}
	// A slot taken by hand through the store is a held lock like any other.
	h, err := a.Holder(ctx, lock.SlotID("pool", 1))
	if err != nil || h.Fence != held[1].Lease().Fence() {
		t.Fatalf("holder of slot 1: %+v, %v", h, err)
	}
}

// TestSemaphoreLapsedSlotTaken: a holder that dies (stops renewing) keeps
// its slot until the lease lapses by the server's clock; a waiter then
// takes it, with a larger fence, never before the dead holder's deadline.
func TestSemaphoreLapsedSlotTaken(t *testing.T) {
	t.Parallel()
	ls, _ := newLockers(t, 2, lock.WithTTL(time.Second))
	a, b := newSession(t, ls[0]), newSession(t, ls[1], lock.WithRetryPeriod(50*time.Millisecond))
	ctx := testCtx(t, time.Minute)
	m0, m1 := newSemaphore(t, a, "pool", 2), newSemaphore(t, a, "pool", 2)
	dead, k := mustTakeSlot(t, ctx, m0)
	mustTakeSlot(t, ctx, m1)
	dead.Abandon(errors.New("died"))
	until := dead.Deadline()
	waiter := newSemaphore(t, b, "pool", 2)
	l, err := waiter.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := slotOf(t, "pool", l); got != k {
		t.Fatalf("took slot %d, want the dead holder's %d", got, k)
	}
	if time.Now().Before(until) {
		t.Fatalf("taken %v before the dead holder's deadline", time.Until(until))
	}
	if l.Fence() <= dead.Fence() {
		t.Fatalf("fence %d not above the dead holder's %d", l.Fence(), dead.Fence())
	}
	if err := m0.ReleaseLock(ctx); !errors.Is(err, lock.ErrLeaseLost) && !strings.Contains(fmt.Sprint(err), "died") {
		t.Fatalf("release by the dead holder: %v", err)
	}
	if h, err := b.Holder(ctx, l.LockID()); err != nil || h.Fence != l.Fence() {
		t.Fatalf("the dead holder's release freed the new term: %+v, %v", h, err)
	}
}

// slotBook records who holds which slot: a holder is inside from its
// entry until it leaves or its lease's deadline passes, whichever comes
// first (as critical does for one lock).
type slotBook struct {
	n  int
	mu sync.Mutex
	in map[string]struct {
		slot  int
		until func() time.Time
	}
	lastFence  map[int]uint64
	vanished   map[int]bool // the slot's last holder vanished
	entries    int
	takeovers  int
	maxInside  int
	refusals   int
	failures   int
	lastErr    error
	perSlotCnt map[int]int
}

func newSlotBook(n int) *slotBook {
	return &slotBook{n: n, in: map[string]struct {
		slot  int
		until func() time.Time
	}{}, lastFence: map[int]uint64{}, vanished: map[int]bool{}, perSlotCnt: map[int]int{}}
}

func (b *slotBook) enter(t testing.TB, who string, slot int, fence uint64, until func() time.Time) (int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if !now.Before(until()) {
		return 0, false
	}
	inside := 1
	for other, h := range b.in {
		if !now.Before(h.until()) {
			continue
		}
		inside++
		if h.slot == slot {
			t.Errorf("%s entered slot %d while %s holds it, %v before its deadline", who, slot, other, h.until().Sub(now))
		}
	}
	if inside > b.n {
		t.Errorf("%s entered as holder %d of a %d-slot semaphore", who, inside, b.n)
	}
	b.maxInside = max(b.maxInside, inside)
	if fence <= b.lastFence[slot] {
		t.Errorf("%s has fence %d on slot %d, not above the previous holder's %d", who, fence, slot, b.lastFence[slot])
	}
	if b.vanished[slot] {
		b.takeovers++
		b.vanished[slot] = false
	}
	b.lastFence[slot] = fence
	b.in[who] = struct {
		slot  int
		until func() time.Time
	}{slot, until}
	b.entries++
	b.perSlotCnt[slot]++
	return b.entries, true
}

func (b *slotBook) leave(who string, vanished bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h, ok := b.in[who]; ok && vanished {
		b.vanished[h.slot] = true
	}
	delete(b.in, who)
}

func (b *slotBook) refused() {
	b.mu.Lock()
	b.refusals++
	b.mu.Unlock()
}

func (b *slotBook) failed(err error) {
	b.mu.Lock()
	b.failures++
	b.lastErr = err
	b.mu.Unlock()
}

func (b *slotBook) enough() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.entries >= 60 && b.takeovers > 0
}

// TestSemaphoreAtMostN: twelve holders in six Sessions hammer a 3-slot
// semaphore, each waiting with Lock or trying with AcquireLock; one in
// eight vanishes (stops renewing and works to its deadline). Never are
// more than three inside while trusting their leases, never two on one
// slot, and each slot's fences only grow; vanished holders' slots are
// taken over.
func TestSemaphoreAtMostN(t *testing.T) {
	t.Parallel()
	const sessions, perSession, n = 6, 2, 3
	const ttl = time.Second
	ls, _ := newLockers(t, sessions, lock.WithTTL(ttl))
	book := newSlotBook(n)
	ctx := testCtx(t, 3*time.Minute)
	var wg sync.WaitGroup
	for i := range sessions {
		s := newSession(t, ls[i], lock.WithRetryPeriod(20*time.Millisecond))
		for j := range perSession {
			m := newSemaphore(t, s, "hot", n)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for term := 0; !book.enough() && ctx.Err() == nil; term++ {
					var l *lock.Lease
					var err error
					if j == 0 {
						lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
						l, err = m.Lock(lctx)
						cancel()
						if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
							book.refused()
							continue
						}
					} else {
						var ok bool
						l, ok, err = m.AcquireLock(ctx)
						if err == nil && !ok {
							book.refused()
							time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
							continue
						}
					}
					if err != nil {
						if ctx.Err() != nil {
							return
						}
						// A grant too late to trust, or an attempt that
						// timed out on a loaded machine: try again.
						book.failed(err)
						continue
					}
					who := fmt.Sprintf("%d/%d/term%d", i, j, term)
					e, entered := book.enter(t, who, slotOf(t, "hot", l), l.Fence(), l.Deadline)
					vanish := entered && e%8 == 0
					if vanish || !entered {
						l.Abandon(errors.New("vanished"))
						time.Sleep(time.Until(l.Deadline()))
					} else {
						time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
					}
					book.leave(who, vanish)
					err = m.ReleaseLock(ctx)
					if err != nil && (vanish || !entered || errors.Is(err, lock.ErrLeaseLost)) {
						err = nil // ended before the release, as it should
					}
					if err != nil {
						if ctx.Err() == nil {
							t.Errorf("%s release: %v", who, err)
						}
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("%d holders, %d takeovers of a vanished holder's slot, at most %d inside at once, %d refused, %d failed (last: %v); per slot %v",
		book.entries, book.takeovers, book.maxInside, book.refusals, book.failures, book.lastErr, book.perSlotCnt)
	if !book.enough() || book.refusals == 0 || book.maxInside < 2 {
		t.Fatalf("too little contention to mean anything: %d entries, %d takeovers, %d refused, at most %d inside (%v)",
			book.entries, book.takeovers, book.refusals, book.maxInside, ctx.Err())
	}
}

// TestSemaphoreRoundTrips counts commands with the driver's command
// monitor: a free first slot costs one findAndModify, as a Mutex's lock;
// when it is held, a read of the slots and one findAndModify per slot
// found free; a full semaphore one findAndModify and the read (and, at the
// first refusal, the read of the holder's TTL that any refusal makes); a
// release one update. The keep-alive renews on a client of its own.
func TestSemaphoreRoundTrips(t *testing.T) {
	t.Parallel()
	client, counter := mongotest.CountingClient(t)
	dbName := newDB(t)
	ka := mongotest.Database(t, mongotest.NewClient(t), dbName)
	l, err := lock.New(mongotest.Database(t, client, dbName), lock.WithTTL(30*time.Second), lock.WithKeepAliveDatabase(ka))
	if err != nil {
		t.Fatal(err)
	}
	s := newSession(t, l)
	ctx := testCtx(t, time.Minute)
	mustLock(t, ctx, newMutex(t, s, "warm-up")) // the deployment, the clock

	const n = 4
	ms := make([]*lock.Semaphore, n)
	for i := range ms {
		ms[i] = newSemaphore(t, s, "pool", n)
	}
	counter.Reset()
	mustTakeSlot(t, ctx, ms[0])
	if c := counter.Counts(); counter.Total() != 1 || c["findAndModify"] != 1 {
		t.Errorf("acquire of an empty semaphore: %v, want one findAndModify", c)
	}
	for i := 1; i < n; i++ {
		counter.Reset()
		mustTakeSlot(t, ctx, ms[i])
		c := counter.Counts()
		switch {
		case counter.Total() == 1 && c["findAndModify"] == 1:
		case c["findAndModify"] == 2 && c["find"] >= 1 && counter.Total() <= 4:
			// The first slot tried was held (a slot held in this
			// Session is refused without a round trip): the read, the
			// free slot.
		case c["find"] >= 1 && c["findAndModify"] == 1 && counter.Total() <= 3:
			// The first slot tried was held here: the read, the free slot.
		default:
			t.Errorf("acquire %d of %d: %v", i+1, n, c)
		}
		t.Logf("acquire %d of %d: %v", i+1, n, c)
	}
	for range 2 {
		counter.Reset()
		if _, ok, err := newSemaphore(t, s, "pool", n).AcquireLock(ctx); ok || err != nil {
			t.Fatalf("acquire of a full semaphore: ok=%v err=%v", ok, err)
		}
		// Every slot is held in this Session: known without a round trip.
		if c := counter.Counts(); counter.Total() != 0 {
			t.Errorf("acquire of a full semaphore held here: %v, want no round trip", c)
		}
	}
	other := newSession(t, l)
	for range 2 {
		counter.Reset()
		if _, ok, err := newSemaphore(t, other, "pool", n).AcquireLock(ctx); ok || err != nil {
			t.Fatalf("acquire of a full semaphore: ok=%v err=%v", ok, err)
		}
		if c := counter.Counts(); c["findAndModify"] != 1 || c["find"] < 1 || counter.Total() > 3 {
			t.Errorf("acquire of a full semaphore held elsewhere: %v, want one findAndModify and the read", c)
		}
	}
	counter.Reset()
	if err := ms[0].ReleaseLock(ctx); err != nil {
		t.Fatal(err)
	}
	if c := counter.Counts(); c["update"] != 1 || counter.Total() != 1 {
		t.Errorf("release: %v, want one update", c)
	}
}

// TestDoSemaphore: n functions run at once under DoSemaphore, each with
// its own slot's lease and fence in its context; one more waits until one
// of them returns; fn's error comes back.
func TestDoSemaphore(t *testing.T) {
	t.Parallel()
	ls, _ := newLockers(t, 1)
	s := newSession(t, ls[0], lock.WithRetryPeriod(20*time.Millisecond))
	ctx := testCtx(t, time.Minute)
	const n = 3
	inside := make(chan string, n+1)
	release := make(chan struct{})
	errc := make(chan error, n+1)
	run := func() {
		errc <- s.DoSemaphore(ctx, "do", n, func(ctx context.Context) error {
			l, ok := lock.LeaseFrom(ctx)
			f, okf := lock.FenceFrom(ctx)
			if !ok || !okf || f != l.Fence() {
				return fmt.Errorf("no lease in the context")
			}
			inside <- l.LockID()
			<-release
			return errors.New("done")
		})
	}
	for range n {
		go run()
	}
	seen := map[string]bool{}
	for range n {
		seen[<-inside] = true
	}
	if len(seen) != n {
		t.Fatalf("slots %v, want %d different", seen, n)
	}
	go run()
	select {
	case id := <-inside:
		t.Fatalf("a fourth function ran, on %s", id)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	for range n + 1 {
		if err := <-errc; err == nil || err.Error() != "done" {
			t.Errorf("DoSemaphore = %v, want fn's error", err)
		}
	}
	if len(inside) != 1 {
		t.Errorf("the fourth function did not run")
	}
}

// TestSemaphoreOnStoreWithoutListing: on a store that cannot list locks
// (locktest's), an attempt whose first slot is held tries the others in
// turn, and a waiter in the Session wakes when a holder here releases.
func TestSemaphoreOnStoreWithoutListing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := newMemStore(30 * time.Second)
		s := newSession(t, store)
		other := newSession(t, store)
		ctx := context.Background()
		const n = 3
		seen := map[int]bool{}
		var held []*lock.Semaphore
		for range n {
			m := newSemaphore(t, other, "pool", n)
			_, k := mustTakeSlot(t, ctx, m)
			seen[k] = true
			held = append(held, m)
		}
		if len(seen) != n {
			t.Fatalf("slots %v", seen)
		}
		waiter := newSemaphore(t, other, "pool", n)
		if _, ok, err := waiter.AcquireLock(ctx); ok || err != nil {
			t.Fatalf("a full semaphore: ok=%v err=%v", ok, err)
		}
		if _, ok, err := newSemaphore(t, s, "pool", n).AcquireLock(ctx); ok || err != nil {
			t.Fatalf("a full semaphore, from another session: ok=%v err=%v", ok, err)
		}
		got := make(chan *lock.Lease, 1)
		go func() {
			l, err := waiter.Lock(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		synctest.Wait()
		// The highest slot: not the first the waiter finds held here.
		last := held[0]
		for _, m := range held {
			if slotOf(t, "pool", m.Lease()) > slotOf(t, "pool", last.Lease()) {
				last = m
			}
		}
		freed := last.Lease().LockID()
		start := time.Now()
		if err := last.ReleaseLock(ctx); err != nil {
			t.Fatal(err)
		}
		l := <-got
		if l.LockID() != freed {
			t.Fatalf("took %s, want the freed %s", l.LockID(), freed)
		}
		// The store takes no time: woken, the waiter takes the slot
		// without the bubble's clock moving.
		if d := time.Since(start); d != 0 {
			t.Errorf("the waiter took the slot %v after the release, not at once", d)
		}
		if err := waiter.ReleaseLock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
