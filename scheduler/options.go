package scheduler

import (
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/rs/zerolog"
)

// Defaults used by New.
const (
	// DefaultJobsCollection holds one document per job: the last claimed
	// firing and the last run.
	DefaultJobsCollection = "mongolock_jobs"
	// DefaultRunsCollection holds the run history, one document per run.
	DefaultRunsCollection = "mongolock_runs"
	// DefaultLockPrefix is put before a job's name to make its lock id.
	DefaultLockPrefix = "scheduler/"
	// DefaultHistoryRetention is how long run history is kept.
	DefaultHistoryRetention = 7 * 24 * time.Hour
	// DefaultOpTimeout bounds each database call the scheduler makes on its
	// own (claims, lock acquisitions, records, lock releases), and the
	// retries of a release that failed; renewals made while a job runs are
	// bounded by its lease instead.
	DefaultOpTimeout = 10 * time.Second
	// DefaultRenewDivisor: by default a running job's lease is renewed every
	// TTL/DefaultRenewDivisor.
	DefaultRenewDivisor = 3
	// DefaultMarginDivisor: by default a job whose lease could not be
	// renewed is cancelled TTL/DefaultMarginDivisor (at least
	// MinLeaseMargin) before its lease deadline, so that it has time to
	// stop before anyone else may start.
	DefaultMarginDivisor = 10
	// MinLeaseMargin is the shortest lease margin New accepts
	// (WithLeaseMargin), and the least the default margin is. It is the time
	// a job whose lease could not be renewed has, once its context is
	// cancelled, to notice and return before another instance may start the
	// job; it also absorbs the latency of the timer that cancels it. Clock
	// drift needs no room here: package lock already subtracts it from
	// lease deadlines.
	MinLeaseMargin = 100 * time.Millisecond
	// DefaultStopMode is what Stop does with running jobs.
	DefaultStopMode = StopCancel
)

// StopMode is what Stop does with jobs that are running.
type StopMode int

const (
	// StopCancel cancels running jobs (cause ErrStopped) and waits for them
	// to return.
	StopCancel StopMode = iota
	// StopWait lets running jobs finish, keeping their leases renewed, until
	// the context passed to Stop is done; then it cancels them.
	StopWait
)

func (m StopMode) String() string {
	switch m {
	case StopCancel:
		return "cancel"
	case StopWait:
		return "wait"
	}
	return fmt.Sprintf("StopMode(%d)", int(m))
}

type config struct {
	location      *time.Location
	seconds       bool
	log           zerolog.Logger
	clock         clockwork.Clock
	renewInterval time.Duration // 0: TTL/DefaultRenewDivisor
	leaseMargin   time.Duration // 0: max(TTL/DefaultMarginDivisor, MinLeaseMargin)
	lockPrefix    string
	stopMode      StopMode
	jobsColl      string
	runsColl      string
	retention     time.Duration // 0: no history
	opTimeout     time.Duration
}

func defaultConfig() config {
	return config{
		location:   time.UTC,
		log:        zerolog.Nop(),
		clock:      clockwork.NewRealClock(),
		lockPrefix: DefaultLockPrefix,
		stopMode:   DefaultStopMode,
		jobsColl:   DefaultJobsCollection,
		runsColl:   DefaultRunsCollection,
		retention:  DefaultHistoryRetention,
		opTimeout:  DefaultOpTimeout,
	}
}

// Option configures a Scheduler.
type Option func(*config) error

// WithLocation sets the time zone of specs that do not name one with
// CRON_TZ=. Default: UTC, not the machine's local zone, so that instances
// configured with different zones still agree on every firing.
func WithLocation(loc *time.Location) Option {
	return func(c *config) error {
		if loc == nil {
			return fmt.Errorf("%w: WithLocation: nil location", ErrInvalidOption)
		}
		c.location = loc
		return nil
	}
}

// WithSeconds accepts an optional leading seconds field in specs
// ("*/2 * * * * *"). Default: five fields, as in crontab.
func WithSeconds() Option {
	return func(c *config) error {
		c.seconds = true
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

// WithClock sets the clock used for every time reading and timer, for
// tests. Give the Locker the same clock (lock.WithClock), because lease
// deadlines are instants of the Locker's clock. Default: the system clock.
func WithClock(clk clockwork.Clock) Option {
	return func(c *config) error {
		if clk == nil {
			return fmt.Errorf("%w: WithClock: nil clock", ErrInvalidOption)
		}
		c.clock = clk
		return nil
	}
}

// WithRenewInterval sets how often the lease of a running job is renewed.
// Default: the Locker's TTL divided by DefaultRenewDivisor. New checks that
// it is shorter than the TTL minus the lease margin.
func WithRenewInterval(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithRenewInterval: %v is not positive", ErrInvalidOption, d)
		}
		c.renewInterval = d
		return nil
	}
}

// WithLeaseMargin sets how long before its lease deadline a job whose lease
// could not be renewed is cancelled, to give it time to stop before another
// instance may take the lock. It must be at least MinLeaseMargin, and New
// checks that the renew interval plus the margin is shorter than the TTL.
// Default: the Locker's TTL divided by DefaultMarginDivisor, at least
// MinLeaseMargin.
func WithLeaseMargin(d time.Duration) Option {
	return func(c *config) error {
		if d < MinLeaseMargin {
			return fmt.Errorf("%w: WithLeaseMargin: %v is shorter than MinLeaseMargin (%v)", ErrInvalidOption, d, MinLeaseMargin)
		}
		c.leaseMargin = d
		return nil
	}
}

// WithLockPrefix sets what is put before a job's name to make its lock id.
// Default: DefaultLockPrefix ("scheduler/").
func WithLockPrefix(p string) Option {
	return func(c *config) error {
		c.lockPrefix = p
		return nil
	}
}

// WithStopMode sets what Stop does with running jobs. Default:
// DefaultStopMode (StopCancel).
func WithStopMode(m StopMode) Option {
	return func(c *config) error {
		if m != StopCancel && m != StopWait {
			return fmt.Errorf("%w: WithStopMode: unknown mode %d", ErrInvalidOption, int(m))
		}
		c.stopMode = m
		return nil
	}
}

// WithJobsCollection sets the collection of job documents (claims and last
// runs). Default: DefaultJobsCollection ("mongolock_jobs").
func WithJobsCollection(name string) Option {
	return func(c *config) error {
		if err := checkCollection("WithJobsCollection", name); err != nil {
			return err
		}
		c.jobsColl = name
		return nil
	}
}

// WithRunsCollection sets the collection of the run history. Default:
// DefaultRunsCollection ("mongolock_runs").
func WithRunsCollection(name string) Option {
	return func(c *config) error {
		if err := checkCollection("WithRunsCollection", name); err != nil {
			return err
		}
		c.runsColl = name
		return nil
	}
}

// WithHistory sets how long the run history is kept; 0 keeps no history
// (the last run of each job is still recorded). It is enforced by a TTL
// index (EnsureIndexes) where the server has them, and by PurgeHistory.
// Default: DefaultHistoryRetention (7 days).
func WithHistory(retention time.Duration) Option {
	return func(c *config) error {
		if retention < 0 || (retention > 0 && retention < time.Second) {
			return fmt.Errorf("%w: WithHistory: retention %v must be 0 or at least 1s", ErrInvalidOption, retention)
		}
		c.retention = retention
		return nil
	}
}

// WithOpTimeout bounds each database call the scheduler makes outside a
// running job. Default: DefaultOpTimeout (10s).
func WithOpTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithOpTimeout: %v is not positive", ErrInvalidOption, d)
		}
		c.opTimeout = d
		return nil
	}
}

func checkCollection(opt, name string) error {
	if !mongoutil.ValidCollectionName(name) {
		return fmt.Errorf("%w: %s: invalid collection name %q", ErrInvalidOption, opt, name)
	}
	return nil
}

type jobConfig struct {
	timeout time.Duration
}

// JobOption configures one job.
type JobOption func(*jobConfig) error

// JobTimeout cancels a run's context (cause ErrJobTimeout) once it has run
// for d. The lease stays renewed until the job returns. Default: no timeout.
func JobTimeout(d time.Duration) JobOption {
	return func(c *jobConfig) error {
		if d <= 0 {
			return fmt.Errorf("%w: JobTimeout: %v is not positive", ErrInvalidOption, d)
		}
		c.timeout = d
		return nil
	}
}
