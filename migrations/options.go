package migrations

import (
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/lock"
)

// Defaults used by New.
const (
	// DefaultCollection is the collection migration records live in.
	DefaultCollection = "mongolock_migrations"
	// DefaultLockID is the id of the lock that guards a run.
	DefaultLockID = "mongolock.migrations"
	// DefaultWait is how long Up and Down wait for another migrator to finish
	// before giving up with ErrWaitTimeout. Index builds on big collections
	// take minutes.
	DefaultWait = 5 * time.Minute
	// DefaultRetryPeriod is how often a waiting migrator checks whether the
	// other one finished and tries to take the lock.
	DefaultRetryPeriod = time.Second
	// DefaultReleaseTimeout bounds recording a failure and releasing the lock
	// after the caller's context ended.
	DefaultReleaseTimeout = 10 * time.Second
)

type config struct {
	collection     string
	lockCollection string
	lockTTL        time.Duration
	lockID         string
	keeperID       string
	locker         Locker
	wait           time.Duration
	retry          time.Duration
	log            zerolog.Logger
	clock          clockwork.Clock
	migrations     []Migration
	runsCollection string
	retention      time.Duration
}

// Option configures a Migrator.
type Option func(*config) error

// WithCollection sets the collection migration records are kept in.
// Default: DefaultCollection ("mongolock_migrations").
func WithCollection(name string) Option {
	return func(c *config) error {
		if !mongoutil.ValidCollectionName(name) {
			return fmt.Errorf("%w: WithCollection: invalid collection name %q", ErrInvalidOption, name)
		}
		c.collection = name
		return nil
	}
}

// WithLockCollection sets the lock collection: the built-in migration
// maintains its indexes, and the lock guarding runs lives there.
// Default: lock.DefaultCollection ("locks").
func WithLockCollection(name string) Option {
	return func(c *config) error {
		if !mongoutil.ValidCollectionName(name) {
			return fmt.Errorf("%w: WithLockCollection: invalid collection name %q", ErrInvalidOption, name)
		}
		c.lockCollection = name
		return nil
	}
}

// WithLockTTL sets the lease TTL your lockers use. The built-in migration
// sets the lock collection's TTL index from it, and the lock guarding runs
// uses it. Default: lock.DefaultTTL (30s); at least lock.MinTTL.
func WithLockTTL(ttl time.Duration) Option {
	return func(c *config) error {
		if ttl < lock.MinTTL {
			return fmt.Errorf("%w: WithLockTTL: %v is shorter than the minimum %v", ErrInvalidOption, ttl, lock.MinTTL)
		}
		c.lockTTL = ttl
		return nil
	}
}

// WithLockID sets the id of the lock that guards runs. Migrators that
// share a records collection must share it. Default: DefaultLockID.
func WithLockID(id string) Option {
	return func(c *config) error {
		if err := lock.ValidateID("lockID", id); err != nil {
			return fmt.Errorf("%w: WithLockID: %v", ErrInvalidOption, err)
		}
		c.lockID = id
		return nil
	}
}

// WithKeeperID sets the keeper id this migrator takes the lock as and
// records migrations under. Default: lock.NewKeeperID().
func WithKeeperID(id string) Option {
	return func(c *config) error {
		if err := lock.ValidateID("keeperID", id); err != nil {
			return fmt.Errorf("%w: WithKeeperID: %v", ErrInvalidOption, err)
		}
		c.keeperID = id
		return nil
	}
}

// WithLocker sets the locker that guards runs, for tests or another store.
// Default: a lock.Locker on the lock collection with the lock TTL.
func WithLocker(l Locker) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: WithLocker: nil locker", ErrInvalidOption)
		}
		c.locker = l
		return nil
	}
}

// WithWait sets how long Up and Down wait while another migrator holds the
// lock. Zero means do not wait. Default: DefaultWait (5m).
func WithWait(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: WithWait: %v is negative", ErrInvalidOption, d)
		}
		c.wait = d
		return nil
	}
}

// WithRetryPeriod sets how often a waiting migrator polls. It must be
// shorter than the lock TTL. Default: DefaultRetryPeriod (1s), or half the
// lock TTL if that is shorter.
func WithRetryPeriod(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithRetryPeriod: %v is not positive", ErrInvalidOption, d)
		}
		c.retry = d
		return nil
	}
}

// WithLogger sets the logger. Migrations find it with zerolog.Ctx(ctx).
// Default: zerolog.Nop().
func WithLogger(l zerolog.Logger) Option {
	return func(c *config) error {
		c.log = l
		return nil
	}
}

// WithClock sets the clock used for waiting, renewing and timing, for tests.
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

// WithMigrations registers migrations beside the built-in ones (Builtin).
// It may be given several times; the migrations of all of them are applied
// in version order.
func WithMigrations(ms ...Migration) Option {
	return func(c *config) error {
		c.migrations = append(c.migrations, ms...)
		return nil
	}
}

// WithSchedulerHistory sets the scheduler's run history collection and
// retention, as given to scheduler.WithRunsCollection and
// scheduler.WithHistory: the built-in SchedulerIndexes maintains its
// indexes. Default: scheduler.DefaultRunsCollection and
// scheduler.DefaultHistoryRetention (7 days).
func WithSchedulerHistory(runsCollection string, retention time.Duration) Option {
	return func(c *config) error {
		if !mongoutil.ValidCollectionName(runsCollection) {
			return fmt.Errorf("%w: WithSchedulerHistory: invalid collection name %q", ErrInvalidOption, runsCollection)
		}
		if retention < 0 || (retention > 0 && retention < time.Second) {
			return fmt.Errorf("%w: WithSchedulerHistory: retention %v must be 0 or at least 1s", ErrInvalidOption, retention)
		}
		c.runsCollection = runsCollection
		c.retention = retention
		return nil
	}
}
