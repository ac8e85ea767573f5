package mongotest

import (
	"time"

	"github.com/jonboulle/clockwork"
)

// SkewedClock returns the real clock with its wall time shifted by offset,
// as on a machine whose clock is wrong. Timers are real and readings keep
// Go's monotonic clock, so elapsed times are right.
func SkewedClock(offset time.Duration) clockwork.Clock {
	return skewedClock{clockwork.NewRealClock(), offset}
}

type skewedClock struct {
	clockwork.Clock
	offset time.Duration
}

func (c skewedClock) Now() time.Time                  { return c.Clock.Now().Add(c.offset) }
func (c skewedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c skewedClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }
