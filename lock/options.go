package lock

import (
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/mongolock/mongolock/internal/mongoutil"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// Defaults used by New.
const (
	// DefaultCollection is the collection lock documents live in.
	DefaultCollection = "locks"
	// DefaultTTL is how long a lease lasts after its last acquire or renew.
	DefaultTTL = 30 * time.Second
	// MinTTL is the shortest TTL New accepts.
	MinTTL = 100 * time.Millisecond
	// MaxTTL is the longest TTL New accepts.
	MaxTTL = 7 * 24 * time.Hour
	// DefaultClockRefresh is how old the estimate of the server's clock may
	// grow before it is refreshed with a hello round trip. Acquisitions
	// refresh it for free.
	DefaultClockRefresh = time.Minute
)

// DefaultWriteConcern is majority with journal: an acquisition that is
// acknowledged survives a primary failover.
func DefaultWriteConcern() *writeconcern.WriteConcern {
	j := true
	return &writeconcern.WriteConcern{W: writeconcern.WCMajority, Journal: &j}
}

type config struct {
	collection   string
	ttl          time.Duration
	wc           *writeconcern.WriteConcern
	log          zerolog.Logger
	clock        clockwork.Clock
	clockRefresh time.Duration
}

// Option configures a Locker.
type Option func(*config) error

// WithCollection sets the collection that holds lock documents.
// Default: DefaultCollection ("locks").
func WithCollection(name string) Option {
	return func(c *config) error {
		if !mongoutil.ValidCollectionName(name) {
			return fmt.Errorf("%w: WithCollection: invalid collection name %q", ErrInvalidOption, name)
		}
		c.collection = name
		return nil
	}
}

// WithTTL sets the lease length. Every Locker on one collection must use
// the same TTL: a lease is taken over only by a keeper whose TTL is at least
// the holder's, but the collection's TTL index (EnsureIndexes) has one
// value, and the TTL monitor deletes leases longer than it while they live.
// Default: DefaultTTL (30s); from MinTTL to MaxTTL.
func WithTTL(ttl time.Duration) Option {
	return func(c *config) error {
		if ttl < MinTTL {
			return fmt.Errorf("%w: WithTTL: %v is shorter than the minimum %v", ErrInvalidOption, ttl, MinTTL)
		}
		if ttl > MaxTTL {
			return fmt.Errorf("%w: WithTTL: %v is longer than the maximum %v", ErrInvalidOption, ttl, MaxTTL)
		}
		c.ttl = ttl
		return nil
	}
}

// WithWriteConcern sets the write concern of every write. Default:
// DefaultWriteConcern (majority, journaled). A weaker one can lose an
// acknowledged lock in a failover and let two keepers hold it.
func WithWriteConcern(wc *writeconcern.WriteConcern) Option {
	return func(c *config) error {
		if wc == nil {
			return fmt.Errorf("%w: WithWriteConcern: nil write concern", ErrInvalidOption)
		}
		if !wc.Acknowledged() {
			return fmt.Errorf("%w: WithWriteConcern: unacknowledged writes cannot tell whether a lock was acquired", ErrInvalidOption)
		}
		c.wc = wc
		return nil
	}
}

// WithLogger sets the logger. Default: zerolog.Nop().
func WithLogger(l zerolog.Logger) Option {
	return func(c *config) error {
		c.log = l
		return nil
	}
}

// WithClock sets the local clock of every time read and timer: the
// Locker's, and those of every Session, runner, scheduler and migrator
// built on it. Only differences between its readings are used, never its
// wall time, so a clock that is set wrong is harmless. For tests.
// Default: the system clock.
func WithClock(clk clockwork.Clock) Option {
	return func(c *config) error {
		if clk == nil {
			return fmt.Errorf("%w: WithClock: nil clock", ErrInvalidOption)
		}
		c.clock = clk
		return nil
	}
}

// WithClockRefresh sets how old the server clock estimate may grow before a
// hello round trip refreshes it. Default: DefaultClockRefresh (1m).
func WithClockRefresh(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithClockRefresh: %v is not positive", ErrInvalidOption, d)
		}
		c.clockRefresh = d
		return nil
	}
}
