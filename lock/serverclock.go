package lock

import (
	"sync"
	"time"
)

// maxDrift bounds how far the local monotonic clock and the server's clock
// may run apart, as a fraction of elapsed time (1000 ppm, ten times what
// crystal oscillators are specified for).
const maxDrift = 1e-3

// sampleMaxAge is how long a sample may keep giving the tightest bound
// before a newer one replaces it anyway, so that a server clock that was
// stepped is followed within minutes rather than never.
const sampleMaxAge = 5 * time.Minute

// serverClock estimates the database server's clock from samples: a server
// time T read by a request sent at local instant s and answered at local
// instant r was taken somewhere in [s, r]. So at a later local instant t the
// server's clock reads at least T+(t-r) and at most T+(t-s)+1ms (server
// dates have millisecond resolution), give or take drift.
type serverClock struct {
	mu     sync.Mutex
	lo, hi *sample   // samples giving the tightest lower and upper bounds
	last   time.Time // local instant of the newest sample
}

type sample struct {
	server     time.Time
	sent, recv time.Time // local, with monotonic readings
}

// lower and upper measure the time since the sample on whichever of the
// monotonic and wall clocks keeps the bound safe (elapsed.go): a suspended
// host's monotonic clock undercounts, a stepped wall clock miscounts.
func (s *sample) lower(now time.Time) time.Time {
	d := elapsedMin(s.recv, now)
	return s.server.Add(d - driftOf(d))
}

func (s *sample) upper(now time.Time) time.Time {
	d := elapsedMax(s.sent, now)
	return s.server.Add(d + driftOf(d) + time.Millisecond)
}

func driftOf(d time.Duration) time.Duration {
	if d < 0 {
		d = -d
	}
	return time.Duration(float64(d) * maxDrift)
}

// observe records a server time read between the local instants sent and recv.
func (c *serverClock) observe(server, sent, recv time.Time) {
	s := &sample{server: server, sent: sent, recv: recv}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = recv
	if c.lo != nil && (s.upper(recv).Before(c.lo.lower(recv)) || s.lower(recv).After(c.hi.upper(recv))) {
		// The new reading contradicts the old ones: the server's clock was
		// stepped (or the primary changed). Trust only the new reading.
		c.lo, c.hi = s, s
		return
	}
	if c.lo == nil || s.lower(recv).After(c.lo.lower(recv)) || recv.Sub(c.lo.recv) > sampleMaxAge {
		c.lo = s
	}
	if c.hi == nil || s.upper(recv).Before(c.hi.upper(recv)) || recv.Sub(c.hi.recv) > sampleMaxAge {
		c.hi = s
	}
}

// bounds returns the interval the server's clock is in at local instant now,
// and ok=false if there is no sample yet.
func (c *serverClock) bounds(now time.Time) (lo, hi time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lo == nil {
		return time.Time{}, time.Time{}, false
	}
	return c.lo.lower(now), c.hi.upper(now), true
}

// doubt makes age report the estimate as old, so it is read again soon.
// The samples stay: they still bound the server's clock unless it changed,
// and a reading that contradicts them replaces them.
func (c *serverClock) doubt() {
	c.mu.Lock()
	c.last = time.Time{}
	c.mu.Unlock()
}

// age is how long ago, at local instant now, the newest sample was taken.
func (c *serverClock) age(now time.Time) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lo == nil {
		return 0, false
	}
	return now.Sub(c.last), true
}
