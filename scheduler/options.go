package scheduler

import (
	"fmt"
	"time"

	"github.com/mongolock/mongolock/internal/mongoutil"
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
	// own: claims, lock acquisitions and records. Lock releases are bounded
	// by the Session's release timeout, and the renewals of running jobs'
	// leases by the Session's timings.
	DefaultOpTimeout = 10 * time.Second
	// DefaultStopMode is what Stop does with running jobs.
	DefaultStopMode = StopCancel
)

// StopMode is what Stop does with jobs that are running.
type StopMode int

const (
	// StopCancel cancels running jobs (cause ErrStopped) and waits for them
	// to return.
	StopCancel StopMode = iota
	// StopWait lets running jobs finish, their leases kept alive by the
	// Session, until the context passed to Stop is done; then it cancels
	// them.
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
	location   *time.Location
	seconds    bool
	lockPrefix string
	stopMode   StopMode
	jobsColl   string
	runsColl   string
	retention  time.Duration // 0: no history
	opTimeout  time.Duration
}

func defaultConfig() config {
	return config{
		location:   time.UTC,
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

// WithOpTimeout bounds each database call the scheduler makes on its own:
// claims, lock acquisitions and records. Default: DefaultOpTimeout (10s).
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
// for d. The Session keeps the lease alive until the job returns. Default:
// no timeout.
func JobTimeout(d time.Duration) JobOption {
	return func(c *jobConfig) error {
		if d <= 0 {
			return fmt.Errorf("%w: JobTimeout: %v is not positive", ErrInvalidOption, d)
		}
		c.timeout = d
		return nil
	}
}
