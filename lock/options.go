package lock

import (
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/mongolock/mongolock/internal/mongoutil"
	"go.mongodb.org/mongo-driver/v2/mongo"
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
	MaxTTL = 24 * time.Hour
	// Retention is how long a lock document stays after its last renewal,
	// held or released: the TTL index (EnsureIndexes) and Purge remove it
	// then. It outlasts every lease, so the TTL monitor never removes a live
	// one whatever TTL its keeper uses, and a lock made again after its
	// document was removed gets a larger fence (see Grant.Fence).
	Retention = MaxTTL + time.Hour
	// DefaultClockRefresh is how old the estimate of the server's clock may
	// grow before it is refreshed with a round trip (a $currentDate write to
	// a clock document in the lock collection). Acquisitions refresh it for
	// free, and a failed command makes the next call refresh it.
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
	watch        *TopologyWatch
	keepAlive    *mongo.Database
	badDocs      func(BadDocument)
	watchPeriod  time.Duration // Watch's poll period (watch.go)
}

// WithBadDocuments sets the function told of each lock document a read
// skipped because it is not what this module writes (BadDocument), every
// time a read meets it; it must be quick. Default: a warning in the
// Locker's log (WithLogger), once per document and field, its _id and
// problem logged with the credentials of any URI in them hidden.
func WithBadDocuments(fn func(BadDocument)) Option {
	return func(c *config) error {
		if fn == nil {
			return fmt.Errorf("%w: WithBadDocuments: nil function", ErrInvalidOption)
		}
		c.badDocs = fn
		return nil
	}
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

// WithTTL sets the lease length. Lockers on one collection may use
// different TTLs: each lease lapses its own TTL after its last renewal,
// whoever takes it over, and the TTL index only removes documents long
// after any lease lapsed (Retention).
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
// round trip refreshes it. Default: DefaultClockRefresh (1m).
func WithClockRefresh(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithClockRefresh: %v is not positive", ErrInvalidOption, d)
		}
		c.clockRefresh = d
		return nil
	}
}

// WithTopologyWatch makes the Locker read the server's clock again as soon
// as w has seen a new node accept writes (see TopologyWatch). Default:
// none.
func WithTopologyWatch(w *TopologyWatch) Option {
	return func(c *config) error {
		if w == nil {
			return fmt.Errorf("%w: WithTopologyWatch: nil watch", ErrInvalidOption)
		}
		c.watch = w
		return nil
	}
}

// WithKeepAliveDatabase makes Renew, the one call a Session's keep-alive
// makes for every lease it holds, and the reading of the server's clock
// before it, go through db: the same database on a second mongo.Client,
// connected to the same deployment with the same URI. Every guarantee rests
// on that renewal arriving in time, and a client's connection pool is
// shared by all of its commands: a burst of the application's own (a
// Scheduler stopping a thousand jobs, a slow aggregation per request) can
// take every connection, and a renewal waiting for one can lose every
// lease at once. A client of its own for the keep-alive needs a pool of two
// (options.Client().SetMaxPoolSize(2)). Everything else still goes through
// the Locker's database. Default: none; renewals share the pool.
func WithKeepAliveDatabase(db *mongo.Database) Option {
	return func(c *config) error {
		if db == nil {
			return fmt.Errorf("%w: WithKeepAliveDatabase: nil database", ErrInvalidOption)
		}
		c.keepAlive = db
		return nil
	}
}
