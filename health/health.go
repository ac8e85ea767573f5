package health

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/internal/errs"
	"github.com/mongolock/mongolock/internal/hideuri"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/scheduler"
)

// Sentinel errors. Check them with errors.Is.
var (
	// ErrInvalidOption reports a bad option passed to New; the message
	// names the option. It matches lock.ErrInvalidOption too.
	ErrInvalidOption error = errs.Kind("health: invalid option", lock.ErrInvalidOption)

	// ErrUnhealthy is wrapped by Report.Err when a check failed.
	ErrUnhealthy = errors.New("health: check failed")
)

// Names of the checks in a Report.
const (
	// CheckRenewals (liveness): a Session's renewals have not been failing
	// past a lease's renew deadline plus the slack.
	CheckRenewals = "renewals"
	// CheckAbandoned (liveness): no task that ignored its cancelled
	// context was abandoned and is still running.
	CheckAbandoned = "abandoned_tasks"
	// CheckStalls (liveness): the runner's stall detection has not fired
	// recently.
	CheckStalls = "stalled_tasks"
	// CheckScheduler (liveness, with a scheduler watched): no scheduler loop is
	// behind its earliest due firing by more than the limit.
	CheckScheduler = "scheduler"
	// CheckMigrations (readiness, with a migrator watched or a database
	// known): every migration is applied.
	CheckMigrations = "migrations"
	// CheckDatabase (readiness, with a Session on a lock.Locker watched):
	// the database answers.
	CheckDatabase = "database"
	// CheckLeader (leader): this instance leads every watched runner's
	// election.
	CheckLeader = "leader"
)

// Scheduler is what the liveness check reads of a scheduler:
// *scheduler.Scheduler is one.
type Scheduler interface {
	KeeperID() string
	Lag() time.Duration
}

// Runner is what the leader check reads of a leader election:
// *runner.LeaderAwareRunner is one. None of its methods touches the
// database.
type Runner interface {
	LockID() string
	KeeperID() string
	IsLeader() bool
	Fence() uint64
	Leader() string
}

var (
	_ Scheduler = (*scheduler.Scheduler)(nil)
	_ Runner    = (*runner.LeaderAwareRunner)(nil)
)

// Checker answers liveness, readiness and leader probes from the events of
// the Sessions it observes and from the schedulers, runners and migrators
// it watches. ForSession makes one that watches a Session and everything
// built on it; New makes one to give lock.WithObserver and to watch things
// one by one. It is safe for concurrent use.
type Checker struct {
	clock clockwork.Clock
	cfg   config

	mu         sync.Mutex
	failing    map[string]*failing   // renewals failing, by keeper id
	abandoned  map[termKey]time.Time // tasks abandoned and not returned: when
	stalls     map[termKey]*stall    // terms the stall detection ended
	schedulers []Scheduler           // watched
	runners    []Runner              // watched
	migrators  []*migratorCheck      // watched
	sessions   []*lock.Session       // watched: their components are (session.go)
	watched    map[any]struct{}      // the schedulers, runners and migrators above
	databases  []*databaseCheck      // of the watched Sessions' Lockers (database.go)
	dbKeys     map[dbKey]struct{}    // the databases above
}

var _ lock.Observer = (*Checker)(nil)

// New returns a Checker. It does no I/O.
func New(opts ...Option) (*Checker, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	return &Checker{
		clock:     cfg.clock,
		cfg:       cfg,
		failing:   make(map[string]*failing),
		abandoned: make(map[termKey]time.Time),
		stalls:    make(map[termKey]*stall),
	}, nil
}

// WatchScheduler adds s to the liveness check: it fails while s's loop is
// behind its earliest due firing by more than the lag limit
// (WithSchedulerLagLimit). Several schedulers may be watched; each is
// checked once however often it is watched (WatchSession watches those
// built on a Session).
func (c *Checker) WatchScheduler(s Scheduler) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watchSchedulerLocked(s)
}

// WatchRunner adds r to the leader check: it answers OK only while this
// instance leads the election of every watched runner. Several runners
// may be watched; use one Checker per election to probe them apart.
func (c *Checker) WatchRunner(r Runner) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watchRunnerLocked(r)
}

// WatchMigrations adds m to the readiness check: it fails until every
// migration m registers is applied. The status is read from the database
// at most once at a time, bounded by the check timeout (WithCheckTimeout),
// and no more once everything was found applied, until the Checker
// observes a rollback (lock.MigrationApplied with Reason "down").
func (c *Checker) WatchMigrations(m Migrator) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watchMigrationsLocked(m)
}

// Check is the outcome of one check.
type Check struct {
	OK bool `json:"ok"`
	// Reason says why the check fails or, when it passes, what it found.
	Reason string `json:"reason,omitempty"`
	// Since is when the failure began, on the checker's clock, when known.
	Since time.Time `json:"since,omitzero"`
}

// Report is the outcome of a probe: OK when every check passed.
type Report struct {
	OK bool `json:"ok"`
	// Reasons has one line per failed check, "name: reason", in the order
	// of the names.
	Reasons []string `json:"reasons,omitempty"`
	// Checks holds every check made, by name (CheckRenewals, ...).
	Checks map[string]Check `json:"checks"`
	// At is when the probe was answered, on the checker's clock.
	At time.Time `json:"at"`
}

// Err returns nil if r is OK, and otherwise an error wrapping ErrUnhealthy
// that gives the reasons: for health-check libraries that take a
// func(context.Context) error.
func (r Report) Err() error {
	if r.OK {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrUnhealthy, strings.Join(r.Reasons, "; "))
}

// newReport builds the report of checks. Their reasons quote text read
// from the database and errors (a failed migration's error), which may
// hold a connection string: the credentials of any URI in them are hidden
// by where they stand (as ui.RedactURIs does), so a probe never shows a
// password.
func newReport(at time.Time, checks map[string]Check) Report {
	r := Report{OK: true, Checks: checks, At: at}
	for _, name := range sortedKeys(checks) {
		ch := checks[name]
		ch.Reason = hideuri.URIs(ch.Reason)
		checks[name] = ch
		if !ch.OK {
			r.OK = false
			r.Reasons = append(r.Reasons, name+": "+ch.Reason)
		}
	}
	return r
}

// Live reports whether the process is alive: whether restarting it is
// not called for. It fails when a Session's renewals have failed past a
// lease's renew deadline plus the slack (CheckRenewals), while a task that
// ignored its cancelled context runs on abandoned (CheckAbandoned), for a
// while after the runner's stall detection fired (CheckStalls), and while
// a watched scheduler's loop is behind by more than the limit
// (CheckScheduler). It does no I/O; ctx is for symmetry with Ready.
func (c *Checker) Live(ctx context.Context) Report {
	now := c.clock.Now()
	return newReport(now, c.liveChecks(now))
}

func (c *Checker) liveChecks(now time.Time) map[string]Check {
	c.mu.Lock()
	c.syncLocked()
	checks := map[string]Check{
		CheckRenewals:  c.renewalsCheckLocked(now),
		CheckAbandoned: c.abandonedCheckLocked(now),
		CheckStalls:    c.stallsCheckLocked(now),
	}
	scheds := c.schedulers
	c.mu.Unlock()
	if len(scheds) > 0 {
		checks[CheckScheduler] = c.schedulerCheck(scheds)
	}
	return checks
}

// schedulerCheck fails while a scheduler's loop is behind by more than the
// limit.
func (c *Checker) schedulerCheck(scheds []Scheduler) Check {
	ch := Check{OK: true}
	var bad, fine []string
	for _, s := range scheds {
		lag := s.Lag()
		w := fmt.Sprintf("loop of the scheduler of keeper %s is %v behind its earliest due firing", s.KeeperID(), dur(lag))
		if lag > c.cfg.lagLimit {
			ch.OK = false
			bad = append(bad, fmt.Sprintf("%s, more than the limit of %v", w, dur(c.cfg.lagLimit)))
		} else {
			fine = append(fine, w)
		}
	}
	if ch.OK {
		ch.Reason = strings.Join(fine, "; ")
	} else {
		ch.Reason = strings.Join(bad, "; ")
	}
	return ch
}

// Ready reports whether the process should receive work: the database of
// each watched Session's lock.Locker answers (CheckDatabase), every watched
// migrator's migrations, or with none the default ones (see the package
// doc), are applied (CheckMigrations), and every liveness
// check passes, so that an instance waiting to be restarted gets no
// traffic meanwhile. It reads each migrator's status until it finds
// everything applied (see WatchMigrations); ctx bounds the wait.
func (c *Checker) Ready(ctx context.Context) Report {
	c.mu.Lock()
	c.syncLocked()
	migs, dbs := c.migrators, c.databases
	c.mu.Unlock()
	var db Check
	if len(dbs) > 0 {
		db = Check{OK: true}
		var bad, fine []string
		for _, d := range dbs {
			if ch := d.ping(ctx); ch.OK {
				fine = append(fine, ch.Reason)
			} else {
				db.OK = false
				bad = append(bad, ch.Reason)
			}
		}
		db.Reason = strings.Join(append(bad, fine...), "; ")
		if len(migs) == 0 { // no migrator watched: the module's own, and WithMigrationOptions's
			for _, d := range dbs {
				migs = append(migs, d.migs)
			}
		}
	}
	var mig Check
	if len(migs) > 0 {
		mig = Check{OK: true}
		var bad, fine []string
		for _, m := range migs {
			ch, known := m.cached()
			if !known && !db.OK && len(dbs) > 0 {
				ch = Check{Reason: "status not read: the database did not answer"}
			} else if !known {
				ch = m.check(ctx)
			}
			if !ch.OK {
				mig.OK = false
				bad = append(bad, ch.Reason)
			} else {
				fine = append(fine, ch.Reason)
			}
		}
		if mig.OK {
			mig.Reason = strings.Join(fine, "; ")
		} else {
			mig.Reason = strings.Join(bad, "; ")
		}
	}
	now := c.clock.Now()
	checks := c.liveChecks(now)
	if len(migs) > 0 {
		checks[CheckMigrations] = mig
	}
	if len(dbs) > 0 {
		checks[CheckDatabase] = db
	}
	return newReport(now, checks)
}

// Leader reports whether this instance leads the election of every
// watched runner (CheckLeader), as the runners know it without a round
// trip (runner.LeaderAwareRunner.IsLeader): a leader stays one until its
// lease stops being trusted. With no runner watched it fails. It does no
// I/O.
func (c *Checker) Leader(ctx context.Context) Report {
	c.mu.Lock()
	c.syncLocked()
	runners := c.runners
	c.mu.Unlock()
	ch := Check{OK: len(runners) > 0, Reason: "no runner watched"}
	var why []string
	for _, r := range runners {
		switch leader := r.Leader(); {
		case r.IsLeader():
			why = append(why, fmt.Sprintf("keeper %s leads %q (fence %d)", r.KeeperID(), r.LockID(), r.Fence()))
		case leader != "":
			ch.OK = false
			why = append(why, fmt.Sprintf("keeper %s does not lead %q: %s does", r.KeeperID(), r.LockID(), leader))
		default:
			ch.OK = false
			why = append(why, fmt.Sprintf("keeper %s does not lead %q: leader unknown", r.KeeperID(), r.LockID()))
		}
	}
	if len(why) > 0 {
		ch.Reason = strings.Join(why, "; ")
	}
	return newReport(c.clock.Now(), map[string]Check{CheckLeader: ch})
}
