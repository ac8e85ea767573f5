package lock

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/mongolock/mongolock/internal/simclock"
)

// The estimate must bracket the server's true clock whatever the local
// wall clock says, and tighten with better samples.
func TestServerClockBounds(t *testing.T) {
	local := time.Now().Add(-3 * time.Hour) // a badly wrong local clock; only differences count
	server := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var c serverClock
	if _, _, ok := c.bounds(local); ok {
		t.Fatal("bounds without a sample")
	}
	// Server read at some point during a 10ms round trip.
	c.observe(server.Add(4*time.Millisecond), local, local.Add(10*time.Millisecond))
	now := local.Add(time.Second)
	trueNow := server.Add(time.Second) // server clock ran exactly as the local one
	lo, hi, ok := c.bounds(now)
	if !ok || lo.After(trueNow) || hi.Before(trueNow) {
		t.Fatalf("bounds [%v, %v] do not bracket %v", lo, hi, trueNow)
	}
	if w := hi.Sub(lo); w > 15*time.Millisecond {
		t.Fatalf("interval %v wider than round trip + drift + 1ms", w)
	}
	// A tighter sample (1ms round trip) narrows the interval.
	c.observe(trueNow.Add(500*time.Microsecond), now, now.Add(time.Millisecond))
	lo2, hi2, _ := c.bounds(now.Add(time.Millisecond))
	if hi2.Sub(lo2) >= hi.Sub(lo) {
		t.Fatalf("tighter sample did not narrow: %v vs %v", hi2.Sub(lo2), hi.Sub(lo))
	}
	if age, _ := c.age(now.Add(time.Second)); age > time.Second {
		t.Fatalf("age %v", age)
	}
}

// A reading that contradicts the estimate (the server's clock was stepped
// back) replaces it at once instead of being outvoted by older samples.
func TestServerClockStepBack(t *testing.T) {
	local := time.Now()
	server := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var c serverClock
	c.observe(server, local, local.Add(time.Millisecond))
	later := local.Add(10 * time.Second)
	stepped := server.Add(10*time.Second - 2*time.Second) // clock stepped back 2s
	c.observe(stepped, later, later.Add(5*time.Millisecond))
	lo, hi, _ := c.bounds(later.Add(5 * time.Millisecond))
	if lo.After(stepped.Add(10*time.Millisecond)) || hi.Before(stepped) {
		t.Fatalf("after a step back the bounds [%v, %v] do not follow the new reading %v", lo, hi, stepped)
	}
	if age, _ := c.age(later.Add(5 * time.Millisecond)); age != 0 {
		t.Fatalf("age %v right after a reading", age)
	}
}

// age counts from the newest reading even when an older one stays the
// tightest bound.
func TestServerClockAgeFromNewestReading(t *testing.T) {
	local := time.Now()
	server := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var c serverClock
	c.observe(server, local, local.Add(time.Millisecond)) // precise
	later := local.Add(2 * time.Second)
	c.observe(server.Add(2*time.Second), later.Add(-50*time.Millisecond), later.Add(50*time.Millisecond)) // sloppy, consistent
	if age, _ := c.age(later.Add(50 * time.Millisecond)); age != 0 {
		t.Fatalf("age %v, want 0 right after a reading", age)
	}
}

// The lower bound follows the monotonic clock, not a wall clock stepped
// back: it would put the estimate of the server's clock the step behind
// until the next reading, and the firings that fall due by it with it.
func TestServerClockLowerBoundIgnoresWallStepBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := simclock.New(0)
		server := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		var c serverClock
		sent := clk.Now()
		time.Sleep(time.Millisecond)
		c.observe(server, sent, clk.Now())
		time.Sleep(time.Second)
		clk.Step(-8 * time.Minute)
		trueNow := server.Add(time.Second)
		lo, hi, _ := c.bounds(clk.Now())
		if lo.After(trueNow) || hi.Before(trueNow) {
			t.Fatalf("bounds [%v, %v] do not bracket %v", lo, hi, trueNow)
		}
		if late := trueNow.Sub(lo); late > 10*time.Millisecond {
			t.Errorf("lower bound %v behind the server's clock, after the wall clock stepped back 8m", late)
		}
	})
}
