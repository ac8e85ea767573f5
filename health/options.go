package health

import (
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/migrations"
)

// Defaults used by New.
const (
	// DefaultRenewSlack is how long after a lease stopped being trusted,
	// with the Session's renewals still failing, liveness fails: a default
	// TTL, time enough for another instance to take the lock over before
	// this one is restarted.
	DefaultRenewSlack = 30 * time.Second
	// DefaultSchedulerLagLimit is how far a scheduler's loop may fall
	// behind its earliest due firing before liveness fails. The loop
	// dispatches a due firing at once, so any lag beyond a few milliseconds
	// means it is blocked.
	DefaultSchedulerLagLimit = 30 * time.Second
	// DefaultStallHold is how long liveness fails after the runner's stall
	// detection fired, even if the stalled task returned at once: long
	// enough for a Kubernetes liveness probe with its default settings
	// (three failures 10s apart) to see it.
	DefaultStallHold = time.Minute
	// DefaultCheckTimeout bounds each read of a migrator's status: a
	// Kubernetes probe's default timeout.
	DefaultCheckTimeout = time.Second
)

// Option configures a Checker.
type Option func(*config) error

type config struct {
	clock        clockwork.Clock
	renewSlack   time.Duration
	lagLimit     time.Duration
	stallHold    time.Duration
	checkTimeout time.Duration
	migOpts      []migrations.Option
}

func defaultConfig() config {
	return config{
		clock:        clockwork.NewRealClock(),
		renewSlack:   DefaultRenewSlack,
		lagLimit:     DefaultSchedulerLagLimit,
		stallHold:    DefaultStallHold,
		checkTimeout: DefaultCheckTimeout,
	}
}

// WithClock sets the clock the checks read the time on and time out
// with. Give it the Session's (lock.Session.Clock): the events it
// observes carry instants of that clock. Default: the real clock.
func WithClock(clk clockwork.Clock) Option {
	return func(c *config) error {
		if clk == nil {
			return fmt.Errorf("%w: WithClock: nil clock", ErrInvalidOption)
		}
		c.clock = clk
		return nil
	}
}

// WithRenewSlack sets how long after a lease stopped being trusted (its
// renew deadline passed) with the Session's renewals still failing
// liveness fails. Zero fails it at the deadline. Default:
// DefaultRenewSlack (30s).
func WithRenewSlack(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: WithRenewSlack: %v is negative", ErrInvalidOption, d)
		}
		c.renewSlack = d
		return nil
	}
}

// WithSchedulerLagLimit sets how far a watched scheduler's loop may be
// behind its earliest due firing (scheduler.Scheduler.Lag) before liveness
// fails. Default: DefaultSchedulerLagLimit (30s).
func WithSchedulerLagLimit(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithSchedulerLagLimit: %v is not positive", ErrInvalidOption, d)
		}
		c.lagLimit = d
		return nil
	}
}

// WithStallHold sets how long liveness fails after the runner's stall
// detection fired (runner.WithStallTimeout); it fails longer if the
// stalled task has not returned by then. Zero fails it only until the
// task returned. Default: DefaultStallHold (1m).
func WithStallHold(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: WithStallHold: %v is negative", ErrInvalidOption, d)
		}
		c.stallHold = d
		return nil
	}
}

// WithCheckTimeout bounds each read of a watched migrator's status, on the
// checker's clock, whatever the probe's own deadline. Default:
// DefaultCheckTimeout (1s).
func WithCheckTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithCheckTimeout: %v is not positive", ErrInvalidOption, d)
		}
		c.checkTimeout = d
		return nil
	}
}

// WithMigrationOptions configures the migrations readiness checks by
// default, in the database of each watched Session's lock.Locker, while no
// migrator is watched: mongolock's own migrations, on the Locker's lock
// collection, and, given here, your program's (migrations.WithMigrations,
// the ones your deploy step applies), their records collection
// (migrations.WithCollection) and the options of the built-in ones. They
// are options of migrations.New; a bad one makes ForSession and
// WatchSession fail. Default: none (the module's migrations only).
func WithMigrationOptions(opts ...migrations.Option) Option {
	return func(c *config) error {
		for _, o := range opts {
			if o == nil {
				return fmt.Errorf("%w: WithMigrationOptions: nil option", ErrInvalidOption)
			}
		}
		c.migOpts = append(c.migOpts, opts...)
		return nil
	}
}
