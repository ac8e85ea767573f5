package locktest

import (
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"
)

// Option configures a Store.
type Option func(*config) error

type config struct {
	ttl      time.Duration
	clock    clockwork.Clock
	safety   time.Duration
	noSafety bool // safety set explicitly
	noLog    bool
}

// WithTTL sets the lease length. Default: lock.DefaultTTL (30s); it must be
// positive.
func WithTTL(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("WithTTL: %v is not positive", d)
		}
		c.ttl = d
		return nil
	}
}

// WithClock sets the clock of every time the Store reads: expiry, grants'
// deadlines, Holder's times, and the Sessions built on it (lock.Store's
// Clock). Default: the real clock, which inside a testing/synctest bubble
// reads the bubble's fake time; pass a *clockwork.FakeClock to move time
// by hand.
func WithClock(clk clockwork.Clock) Option {
	return func(c *config) error {
		if clk == nil {
			return fmt.Errorf("WithClock: nil clock")
		}
		c.clock = clk
		return nil
	}
}

// WithSafety sets how much earlier than the TTL after sending a holder
// stops trusting a lease: Grant and Renewal deadlines are Sent + TTL - d.
// Default: as the Locker, 1ms plus a thousandth of the TTL; from 0 to less
// than the TTL.
func WithSafety(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("WithSafety: %v is negative", d)
		}
		c.safety, c.noSafety = d, true
		return nil
	}
}

// WithoutCallLog keeps no record of calls (Calls returns none): for
// benchmarks and long soak tests, whose logs would grow without bound.
func WithoutCallLog() Option {
	return func(c *config) error {
		c.noLog = true
		return nil
	}
}
