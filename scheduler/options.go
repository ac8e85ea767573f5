package scheduler

import (
	"fmt"
	"time"

	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/lock"
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
	// MinHistoryRetention is the shortest retention WithHistory accepts
	// besides 0 (no history): a TTL index counts in seconds.
	MinHistoryRetention = time.Second
	// DefaultOpTimeout bounds each database call the scheduler makes on its
	// own: claims, lock acquisitions and records. Lock releases are bounded
	// by the Session's release timeout, and the renewals of running jobs'
	// leases by the Session's timings.
	DefaultOpTimeout = 10 * time.Second
	// DefaultStopMode is what Stop does with running jobs.
	DefaultStopMode = StopCancel
)

// Overlap is what a firing does when the job's previous run, on any
// instance, still holds the job's lock.
type Overlap int

const (
	// OverlapSkip waits for the previous run for half the time to the
	// next firing, at most a TTL, and then records the firing as not run
	// (ReasonLockHeld), unless that run began after the firing (it was
	// late): the firing then waits for it, in order, up to its misfire
	// threshold. The default.
	OverlapSkip Overlap = iota
	// OverlapWait waits for the previous run to end, however long, and
	// then runs. Other firings that fall meanwhile, which the instances
	// busy with the two do not claim, are not run (ReasonRunGoing).
	OverlapWait
	// OverlapCancel cancels the previous run (its context's cause is
	// ErrOverlapCancelled), on whichever instance it runs, within that
	// instance's poll interval, then waits for it to end and runs.
	OverlapCancel
)

func (o Overlap) String() string {
	switch o {
	case OverlapSkip:
		return "skip"
	case OverlapWait:
		return "wait"
	case OverlapCancel:
		return "cancel"
	}
	return fmt.Sprintf("Overlap(%d)", int(o))
}

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
	lockPrefix string
	stopMode   StopMode
	jobsColl   string
	runsColl   string
	retention  time.Duration // 0: no history
	opTimeout  time.Duration
	misfire    MisfirePolicy
	threshold  time.Duration // 0: MisfireThresholdFor the Session's timings
	poll       time.Duration // 0: the Session's renew interval
	leader     Leader        // nil: per-job locks only
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
		misfire:    DefaultMisfirePolicy,
	}
}

// Leader tells whether this instance leads an election.
// *runner.LeaderAwareRunner is one.
type Leader interface {
	// IsLeader reports whether this instance leads, with a lease it can
	// still trust. It must be quick: the Scheduler asks before every claim.
	IsLeader() bool
}

// WithLeaderOnly runs every job of the Scheduler on the instance that
// leads leader's election (a runner.LeaderAwareRunner on the same Session,
// whose Run the application runs alongside), as gocron's elector mode or
// River's periodic jobs do. Followers claim nothing. Each firing still
// goes through its claim, its job's lock and fence, so every guarantee of
// the package holds across a change of leader: a new leader takes over the
// claims the previous one left pending (its lease lapsed or was released,
// or it would not lead), and claims the latest firing when it starts to
// lead, which covers the firings since the last claim: those within the
// misfire threshold run late, the misfires as the misfire policy says (a
// handover takes about a TTL, within the threshold); a run the previous
// leader still has going keeps its
// job's lock until it ends (the overlap policy applies), while a job's lock
// that a leader which died left held is waited out, as any lock whose
// holder stopped renewing it (see the package documentation). Default: none
// (each firing runs on whichever instance claims it).
func WithLeaderOnly(leader Leader) Option {
	return func(c *config) error {
		if leader == nil {
			return fmt.Errorf("%w: WithLeaderOnly: nil leader", ErrInvalidOption)
		}
		c.leader = leader
		return nil
	}
}

// WithPollInterval sets how often the Scheduler reads the documents of its
// jobs for work left undone: claims to take over from instances that died,
// triggers (Trigger), runs to cancel (OverlapCancel) and removals. Each
// poll is one query. Default: the Session's renew interval (a third of its
// TTL by default).
func WithPollInterval(d time.Duration) Option {
	return func(c *config) error {
		if d < 10*time.Millisecond {
			return fmt.Errorf("%w: WithPollInterval: %v is shorter than 10ms", ErrInvalidOption, d)
		}
		c.poll = d
		return nil
	}
}

// Option configures a Scheduler.
type Option func(*config) error

// WithLocation sets the time zone of specs that do not name one with
// CRON_TZ=. Default: UTC, not the machine's local zone, so that instances
// configured with different zones still agree on every firing.
//
// The Scheduler registers its specs with the zone's IANA name (see "One
// spec per job" in the package documentation), so loc must have one that
// every instance loads: a zone from time.LoadLocation, or time.Local,
// whose name ("Local" on every host with TZ unset) is found from TZ,
// /etc/localtime or /etc/timezone and checked against the zone. A zone
// that cannot be named so (a time.FixedZone, or a local zone this host
// does not name) is refused with an error wrapping ErrInvalidOption. UTC
// and its aliases (Etc/UTC, ...) count as UTC.
func WithLocation(loc *time.Location) Option {
	return func(c *config) error {
		if loc == nil {
			return fmt.Errorf("%w: WithLocation: nil location", ErrInvalidOption)
		}
		z, err := zoneOf(loc)
		if err != nil {
			return fmt.Errorf("%w: WithLocation: %w", ErrInvalidOption, err)
		}
		c.location = z
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

// ValidHistoryRetention reports whether WithHistory accepts d: 0, or at
// least MinHistoryRetention.
func ValidHistoryRetention(d time.Duration) bool {
	return d == 0 || d >= MinHistoryRetention
}

// WithHistory sets how long the run history is kept; 0 keeps no history
// (the last run of each job is still recorded). It is enforced by a TTL
// index (EnsureIndexes) where the server has them, and by PurgeHistory.
// Default: DefaultHistoryRetention (7 days).
func WithHistory(retention time.Duration) Option {
	return func(c *config) error {
		if !ValidHistoryRetention(retention) {
			return fmt.Errorf("%w: WithHistory: retention %v must be 0 or at least %v", ErrInvalidOption, retention, MinHistoryRetention)
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
	timeout    time.Duration
	misfire    *MisfirePolicy // nil: the Scheduler's
	overlap    Overlap
	retries    int
	backoff    lock.Backoff
	pauseAfter int
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

// JobOverlap sets what a firing does while the job's previous run still
// goes. Default: OverlapSkip.
func JobOverlap(o Overlap) JobOption {
	return func(jc *jobConfig) error {
		if o < OverlapSkip || o > OverlapCancel {
			return fmt.Errorf("%w: JobOverlap: unknown policy %d", ErrInvalidOption, int(o))
		}
		jc.overlap = o
		return nil
	}
}

// MaxRetries bounds JobRetries.
const MaxRetries = 100

// JobRetries runs a failed firing again, up to n more times, after the
// pauses of backoff (lock.Backoff: First, doubling up to Max), under the
// same lease and fencing token. Each attempt is recorded in the history.
// An attempt is not started if it could not start before the job's next
// firing. Default: no retries.
func JobRetries(n int, backoff lock.Backoff) JobOption {
	return func(jc *jobConfig) error {
		switch {
		case n < 0 || n > MaxRetries:
			return fmt.Errorf("%w: JobRetries: %d is not from 0 to %d", ErrInvalidOption, n, MaxRetries)
		case n > 0 && (backoff.First <= 0 || backoff.Max < backoff.First):
			return fmt.Errorf("%w: JobRetries: backoff %v..%v needs 0 < First <= Max", ErrInvalidOption, backoff.First, backoff.Max)
		}
		jc.retries, jc.backoff = n, backoff
		return nil
	}
}

// JobPauseAfter pauses the job, cluster-wide, once n firings in a row have
// failed (after their retries), with a note that says so; Resume resumes
// it. Default: never.
func JobPauseAfter(n int) JobOption {
	return func(jc *jobConfig) error {
		if n < 1 {
			return fmt.Errorf("%w: JobPauseAfter: %d is not positive", ErrInvalidOption, n)
		}
		jc.pauseAfter = n
		return nil
	}
}
