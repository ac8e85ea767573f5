package migrations

import (
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/scheduler"
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
	// DefaultRetryPeriod is the longest pause of a waiting migrator between
	// two checks whether the other one finished and attempts to take the
	// lock.
	DefaultRetryPeriod = time.Second
	// DefaultReleaseTimeout bounds recording the outcome of a migration
	// after the caller's context ended. (Releasing the lock is bounded by
	// the Session's release timeout.)
	DefaultReleaseTimeout = 10 * time.Second
)

type config struct {
	collection      string
	lockCollection  string
	lockTTL         time.Duration
	lockID          string
	session         *lock.Session
	sessionOpts     []lock.SessionOption // for the Sessions the migrator makes
	notWithSession  []string             // options given that WithSession excludes
	wait            time.Duration
	retry           time.Duration
	migrations      []Migration
	runsCollection  string
	retention       time.Duration
	termsCollection string
	termRetention   time.Duration
}

// Option configures a Migrator.
type Option func(*config) error

// invalidOption is the error of a bad option.
func invalidOption(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
}

// WithSession makes the migrator take its lock through s: the keeper id it
// holds the lock as and records migrations under, the store, the clock, the
// lease timings and the observers are s's. The lock collection whose
// indexes the built-in migration maintains is s's store's if the store has
// a Collection method, as *lock.Locker has (otherwise it is
// lock.DefaultCollection); that collection must be in the migrator's
// database. WithSession cannot be
// combined with WithLockCollection, WithLockTTL, WithLogger or WithObserver.
// The migrator does not close s. Default: every Up or Down that needs the
// lock makes a Session of its own, on a lock.Locker with the lock
// collection and TTL, and closes it before returning.
func WithSession(s *lock.Session) Option {
	return func(c *config) error {
		if s == nil {
			return invalidOption("WithSession: nil session")
		}
		c.session = s
		return nil
	}
}

// WithCollection sets the collection migration records are kept in.
// Default: DefaultCollection ("mongolock_migrations").
func WithCollection(name string) Option {
	return func(c *config) error {
		if !mongoutil.ValidCollectionName(name) {
			return invalidOption("WithCollection: invalid collection name %q", name)
		}
		c.collection = name
		return nil
	}
}

// WithLockCollection sets the lock collection: the built-in migration
// maintains its indexes, and the lock guarding runs lives there. Not with
// WithSession. Default: lock.DefaultCollection ("locks").
func WithLockCollection(name string) Option {
	return func(c *config) error {
		if !mongoutil.ValidCollectionName(name) {
			return invalidOption("WithLockCollection: invalid collection name %q", name)
		}
		c.lockCollection = name
		c.notWithSession = append(c.notWithSession, "WithLockCollection")
		return nil
	}
}

// WithLockTTL sets the lease length of the lock guarding runs: a migrator
// that dies holds it up for that long. It has no bearing on the lock
// collection's indexes, which are the same whatever TTL lockers use
// (LockIndexes). Not with WithSession. Default: lock.DefaultTTL (30s); from
// lock.MinTTL to lock.MaxTTL, and long enough for a Session's safety margin
// (New checks).
func WithLockTTL(ttl time.Duration) Option {
	return func(c *config) error {
		if ttl < lock.MinTTL {
			return invalidOption("WithLockTTL: %v is shorter than the minimum %v", ttl, lock.MinTTL)
		}
		if ttl > lock.MaxTTL {
			return invalidOption("WithLockTTL: %v is longer than the maximum %v", ttl, lock.MaxTTL)
		}
		c.lockTTL = ttl
		c.notWithSession = append(c.notWithSession, "WithLockTTL")
		return nil
	}
}

// WithLockID sets the id of the lock that guards runs. Migrators that
// share a records collection must share it. Default: DefaultLockID.
func WithLockID(id string) Option {
	return func(c *config) error {
		if err := lock.ValidateID("WithLockID", id); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		c.lockID = id
		return nil
	}
}

// WithWait sets how long Up and Down wait while another migrator holds the
// lock. Zero means do not wait. Default: DefaultWait (5m).
func WithWait(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return invalidOption("WithWait: %v is negative", d)
		}
		c.wait = d
		return nil
	}
}

// WithRetryPeriod sets the longest pause of a waiting migrator between two
// checks whether the other one finished and attempts to take the lock; the
// pauses start shorter and grow, with jitter, up to it (lock.Backoff). It
// must be shorter than the lock TTL. Default: DefaultRetryPeriod (1s), or
// half the lock TTL if that is shorter.
func WithRetryPeriod(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalidOption("WithRetryPeriod: %v is not positive", d)
		}
		c.retry = d
		return nil
	}
}

// WithLogger logs the events of the Sessions the migrator makes for itself
// (lock.WithSessionLogger): its lock, and the migrations it applied, waited
// for and failed. Not with WithSession: give that Session the logger. The
// migrations themselves log to the logger of the context given to Up or
// Down (zerolog.Ctx), not to this one. Default: no logging.
func WithLogger(l zerolog.Logger) Option {
	return func(c *config) error {
		c.sessionOpts = append(c.sessionOpts, lock.WithSessionLogger(l))
		c.notWithSession = append(c.notWithSession, "WithLogger")
		return nil
	}
}

// WithObserver adds an observer of the events of the Sessions the migrator
// makes for itself (lock.WithObserver): its lock, and lock.MigrationApplied,
// lock.MigrationWaited and lock.MigrationFailed. Several may be added. Not
// with WithSession: give that Session the observer. Default: none.
func WithObserver(o lock.Observer) Option {
	return func(c *config) error {
		if o == nil {
			return invalidOption("WithObserver: nil observer")
		}
		c.sessionOpts = append(c.sessionOpts, lock.WithObserver(o))
		c.notWithSession = append(c.notWithSession, "WithObserver")
		return nil
	}
}

// WithMigrations registers migrations beside the built-in ones (Builtin).
// It may be given several times; the migrations of all of them are applied
// in version order. Their versions must be positive: negative ones are
// reserved for the built-in migrations (ErrInvalidMigration).
func WithMigrations(ms ...Migration) Option {
	return func(c *config) error {
		for _, m := range ms {
			if m.Version < 0 {
				return fmt.Errorf("%w: WithMigrations: version %d (%s): negative versions are reserved for "+
					"mongolock's built-in migrations; give it a positive version", ErrInvalidMigration, m.Version, m.Description)
			}
		}
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
			return invalidOption("WithSchedulerHistory: invalid collection name %q", runsCollection)
		}
		if !scheduler.ValidHistoryRetention(retention) {
			return invalidOption("WithSchedulerHistory: retention %v must be 0 or at least %v", retention, scheduler.MinHistoryRetention)
		}
		c.runsCollection = runsCollection
		c.retention = retention
		return nil
	}
}

// WithTermLog sets the collection and retention of the term log of
// elections (runner.NewTermLog's WithTermsCollection): the built-in
// TermLogIndexes maintains its indexes. Default:
// runner.DefaultTermsCollection and runner.DefaultTermRetention (7 days).
func WithTermLog(collection string, retention time.Duration) Option {
	return func(c *config) error {
		if !mongoutil.ValidCollectionName(collection) {
			return invalidOption("WithTermLog: invalid collection name %q", collection)
		}
		if retention < time.Second {
			return invalidOption("WithTermLog: retention %v must be at least 1s", retention)
		}
		c.termsCollection = collection
		c.termRetention = retention
		return nil
	}
}
