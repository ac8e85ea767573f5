package lock

import (
	"testing"
	"time"
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
