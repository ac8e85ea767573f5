package lock_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/simdb"
	"github.com/mongolock/mongolock/lock"
)

// TestMutualExclusion: eight clients hammer one lock. A holder either
// releases, or vanishes and keeps "working" until its lease deadline. No two
// may ever be inside together while both trust their leases, and fences must
// strictly increase from holder to holder.
func TestMutualExclusion(t *testing.T) {
	t.Parallel()
	hammer(t, func(int) clockwork.Clock { return nil })
}

// TestMutualExclusionSkewedClocks: the same with every client's clock wrong
// by up to ±TTL.
func TestMutualExclusionSkewedClocks(t *testing.T) {
	t.Parallel()
	hammer(t, func(i int) clockwork.Clock {
		return mongotest.SkewedClock(time.Duration(float64(hammerTTL) * (2*rand.Float64() - 1)))
	})
}

const hammerTTL = 400 * time.Millisecond

// What makes the hammering mean something: this many holders, and every
// vanishEvery-th of them vanishing (so an eighth of them are followed by a
// takeover after expiry). The clients go on until there were that many, however slow the
// machine; the test's context only bounds a hang.
const (
	hammerEntries = 40
	vanishEvery   = 8
)

// critical is a section at most one trusted holder may be in. A holder is
// inside from its entry until it leaves or its lease's deadline passes,
// whichever comes first: a lease promises nothing past its deadline, and a
// holder's goroutine may be scheduled late to leave on a loaded machine.
type critical struct {
	mu          sync.Mutex
	inside      string
	insideUntil func() time.Time // the deadline of the holder inside, on the test's clock
	lastFence   uint64
	entries     int
	takeovers   int
	refusals    int
}

// enter records who entering with fence, trusting its lease until until()
// (on the test's clock; a Session's renewals move it). It returns the
// holder's number (1 for the first) and whether it entered: not if its
// deadline passed before it could (its grant came too late to trust, or it
// was scheduled late).
func (c *critical) enter(t testing.TB, who string, fence uint64, until func() time.Time) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if !now.Before(until()) {
		return 0, false
	}
	if c.inside != "" && now.Before(c.insideUntil()) {
		t.Errorf("%s entered while %s is inside, %v before its deadline", who, c.inside, c.insideUntil().Sub(now))
	}
	if fence <= c.lastFence {
		t.Errorf("%s has fence %d, not above the previous holder's %d", who, fence, c.lastFence)
	}
	c.inside, c.insideUntil, c.lastFence = who, until, fence
	c.entries++
	return c.entries, true
}

// count is how many holders entered so far.
func (c *critical) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries
}

// enough reports whether there were hammerEntries holders and at least
// one takeover of a vanished holder's lock.
func (c *critical) enough() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries >= hammerEntries && c.takeovers > 0
}

func (c *critical) leave(who string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inside == who {
		c.inside = ""
	}
}

func (c *critical) add(n *int) {
	c.mu.Lock()
	*n++
	c.mu.Unlock()
}

func hammer(t *testing.T, clock func(i int) clockwork.Clock) {
	const clients = 8
	db := newDB(t)
	var cs critical
	ctx := testCtx(t, 3*time.Minute)
	var wg sync.WaitGroup
	for i := range clients {
		opts := []lock.Option{lock.WithTTL(hammerTTL)}
		var clk clockwork.Clock = mongotest.SkewedClock(0)
		if c := clock(i); c != nil {
			clk = c
			opts = append(opts, lock.WithClock(c))
		}
		l := onNewClient(t, db, opts...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			kid := fmt.Sprintf("k%d", i)
			for term := 0; !cs.enough() && ctx.Err() == nil; term++ {
				lease, ok, err := acquireOne(ctx, l, "hot", kid)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("%s: %v", kid, err)
					}
					return
				}
				if !ok {
					cs.add(&cs.refusals)
					time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
					continue
				}
				// The lease's deadline on the test's clock (the Locker's
				// may be skewed; the difference is monotonic).
				until := time.Now().Add(lease.Deadline.Sub(clk.Now()))
				who := fmt.Sprintf("%s/term%d", kid, term)
				n, entered := cs.enter(t, who, lease.Fence, func() time.Time { return until })
				if !entered || n%vanishEvery == 0 {
					// Vanish (or, answered too late to trust, leave the
					// lock to expire): work until the deadline, never
					// release.
					time.Sleep(time.Until(until))
					cs.leave(who)
					if entered {
						cs.add(&cs.takeovers)
					}
					// A new keeper id, as after a crash and restart.
					kid += "x"
					continue
				}
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
				cs.leave(who)
				err = releaseOne(ctx, l, "hot", kid)
				if errors.Is(err, lock.ErrNotHeld) && !time.Now().Before(until) {
					// Worked past the deadline on a loaded machine, and
					// someone took the lock over meanwhile.
					err = nil
				}
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("%s release: %v", kid, err)
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d holders, %d of them vanished; %d attempts refused", cs.entries, cs.takeovers, cs.refusals)
	if !cs.enough() || cs.refusals == 0 {
		t.Fatalf("too little contention to mean anything: %d entries, %d vanished, %d refused (%v)", cs.entries, cs.takeovers, cs.refusals, ctx.Err())
	}
}

// TestTakeoverAfterExpiry: a holder vanishes without releasing; a contender
// polling every retry period gets the lock, never before the lease expired
// by the server's clock nor before the old holder's deadline, and with a
// larger fence. How soon it gets it depends, on the test server, on how
// loaded the machine is: TestTakeoverWithinTTLAndPeriod checks that on a
// simulated server's time.
func TestTakeoverAfterExpiry(t *testing.T) {
	t.Parallel()
	const ttl, retry = 1 * time.Second, 50 * time.Millisecond
	ls, _ := newLockers(t, 2, lock.WithTTL(ttl))
	took := takeoverAfterExpiry(t, ls[0], ls[1], retry)
	t.Logf("taken over after %v (TTL %v)", took, ttl)
}

// TestTakeoverWithinTTLAndPeriod: the same on a simulated server whose
// every command takes simRTT there and back, in a synctest bubble: the
// contender gets the lock at its first poll after the lease expired, so
// within the TTL and one retry period of the sending of the holder's write,
// plus round trips: the lease expires a TTL after the write reached the
// server, half a round trip after its sending; a poll that lands at that
// instant is refused (a lease is live until its expiry, inclusive), and
// the next lands a retry period and a round trip later, and is answered
// half a round trip after that.
func TestTakeoverWithinTTLAndPeriod(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const ttl, retry, rtt = 1 * time.Second, 50 * time.Millisecond, simRTT
		srv := simdb.NewServer(simdb.MongoDB, 0)
		holder, _, _ := simLocker(t, srv, "holder", simPlan, nil, lock.WithTTL(ttl))
		contender, _, _ := simLocker(t, srv, "contender", simPlan, nil, lock.WithTTL(ttl))
		took := takeoverAfterExpiry(t, holder, contender, retry)
		// An attempt takes up to two round trips: the acquisition, and a
		// read of the server's clock when a refusal left the estimate old
		// (refreshClockFor). The attempt refused just before the expiry
		// and the one that takes the lock: four.
		if bound := ttl + retry + 4*rtt; took > bound {
			t.Fatalf("takeover took %v, want within TTL %v + retry %v + four round trips of %v", took, ttl, retry, rtt)
		}
		t.Logf("taken over after %v (TTL %v, retry period %v, round trip %v)", took, ttl, retry, rtt)
	})
}

// takeoverAfterExpiry takes a lock on holder, which then vanishes, polls
// for it on contender every retry, checks the takeover, and returns how
// long after the holder's winning write was sent the contender had it.
func takeoverAfterExpiry(t *testing.T, holder, contender *lock.Locker, retry time.Duration) time.Duration {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	lease := mustAcquire(t, ctx, holder, "t", "gone")
	h, err := contender.Holder(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	var got lock.Grant
	for {
		l, ok, err := acquireOne(ctx, contender, "t", "next")
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got = l
			break
		}
		time.Sleep(retry)
	}
	took := time.Since(lease.Sent) // the holder's clock is the test's
	if time.Now().Before(lease.Deadline) {
		t.Fatalf("taken over before the old holder's deadline")
	}
	if !got.AcquiredAt.After(h.ExpiresAt) {
		t.Fatalf("taken over at server time %v, before the lease expired at %v", got.AcquiredAt, h.ExpiresAt)
	}
	if got.Fence <= lease.Fence {
		t.Fatalf("fence %d not above %d", got.Fence, lease.Fence)
	}
	return took
}
