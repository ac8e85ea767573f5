package lock_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
)

// TestMutualExclusion: eight clients hammer one lock. A holder either
// releases, or vanishes and keeps "working" until its lease deadline. No two
// may ever be inside together, and fences must strictly increase from holder
// to holder.
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

// critical is a section at most one holder may be in.
type critical struct {
	mu        sync.Mutex
	inside    string
	lastFence uint64
	entries   int
	takeovers int
}

func (c *critical) enter(t testing.TB, who string, fence uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inside != "" {
		t.Errorf("%s entered while %s is inside", who, c.inside)
	}
	if fence <= c.lastFence {
		t.Errorf("%s has fence %d, not above the previous holder's %d", who, fence, c.lastFence)
	}
	c.inside, c.lastFence = who, fence
	c.entries++
}

// count is how many holders entered so far.
func (c *critical) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries
}

func (c *critical) leave(who string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inside == who {
		c.inside = ""
	}
}

func hammer(t *testing.T, clock func(i int) clockwork.Clock) {
	const clients = 8
	dur := 4 * time.Second
	if testing.Short() {
		dur = time.Second
	}
	db := newDB(t)
	var cs critical
	ctx := testCtx(t, dur+30*time.Second)
	deadline := time.Now().Add(dur)
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
			for term := 0; time.Now().Before(deadline); term++ {
				lease, ok, err := acquireOne(ctx, l, "hot", kid)
				if err != nil {
					t.Errorf("%s: %v", kid, err)
					return
				}
				if !ok {
					time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
					continue
				}
				who := fmt.Sprintf("%s/term%d", kid, term)
				cs.enter(t, who, lease.Fence)
				if rand.IntN(10) == 0 {
					// Vanish: work until the deadline (on this
					// Locker's clock), never release.
					time.Sleep(lease.Deadline.Sub(clk.Now()))
					cs.leave(who)
					cs.mu.Lock()
					cs.takeovers++
					cs.mu.Unlock()
					// A new keeper id, as after a crash and restart.
					kid += "x"
					continue
				}
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
				cs.leave(who)
				if err := releaseOne(ctx, l, "hot", kid); err != nil {
					t.Errorf("%s release: %v", kid, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d holders, %d of them vanished", cs.entries, cs.takeovers)
	if cs.entries < 20 || cs.takeovers == 0 {
		t.Fatalf("too little contention to mean anything: %d entries, %d vanished", cs.entries, cs.takeovers)
	}
}

// TestTakeoverAfterExpiry: a holder vanishes without releasing; a contender
// polling every retry period gets the lock within TTL plus one period, and
// never before the lease expired by the server's clock.
func TestTakeoverAfterExpiry(t *testing.T) {
	t.Parallel()
	const ttl, retry = 1 * time.Second, 50 * time.Millisecond
	ls, _ := newLockers(t, 2, lock.WithTTL(ttl))
	holder, contender := ls[0], ls[1]
	ctx := testCtx(t, 30*time.Second)
	sent := time.Now()
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
	took := time.Since(sent)
	t.Logf("taken over after %v (TTL %v)", took, ttl)
	if time.Now().Before(lease.Deadline) {
		t.Fatalf("taken over before the old holder's deadline")
	}
	if !got.AcquiredAt.After(h.ExpiresAt) {
		t.Fatalf("taken over at server time %v, before the lease expired at %v", got.AcquiredAt, h.ExpiresAt)
	}
	if took > ttl+retry+500*time.Millisecond {
		t.Fatalf("takeover took %v, want within TTL %v + retry %v (+ round trips)", took, ttl, retry)
	}
	if got.Fence <= lease.Fence {
		t.Fatalf("fence %d not above %d", got.Fence, lease.Fence)
	}
}
