package lock

import (
	"errors"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/mongolock/mongolock/internal/hideuri"
)

// EventKind says what an Event reports.
type EventKind int

// Events of a Session and its leases.
const (
	// Acquired: a lease was granted and is trusted. Took is the round
	// trip; Remaining how long it is trusted for.
	Acquired EventKind = iota + 1
	// Refused: another holder has the lock (Reason "held elsewhere" or
	// "held in this session"), or the grant came too late to trust
	// (Reason "acquired too late", Err ErrNotTrusted) or after the
	// Session closed (Reason "session closed", Err ErrSessionClosed).
	Refused
	// AcquireFailed: an acquisition failed with Err; the lock may or may
	// not have been taken, and is released when the Session closes.
	AcquireFailed
	// Renewed: the keep-alive renewed a lease. Took is the round trip.
	Renewed
	// RenewFailed: a renewal attempt failed with Err; the lease is still
	// trusted for Remaining, and the keep-alive retries. Attempt counts the
	// failures in a row.
	RenewFailed
	// LeaseLost: a lease ended before its release. Err is the cause
	// (ErrLeaseLost, or the cause given to Lease.Abandon); Reason says why.
	// Leases ended by Session.Close are reported as Released instead.
	LeaseLost
	// Released: a lock was released (Err nil) or its release failed (Err
	// set; it expires with its lease).
	Released
	// TaskAbandoned: work under a lease (Session.Do, a runner's task)
	// ignored its cancelled context for the grace period and was abandoned;
	// Err wraps ErrTaskDidNotStop. The lease is not renewed any more, but
	// its lock stays taken in the Session until the work returns: then it
	// is Released, with the same LockID and Fence.
	TaskAbandoned
	// DeploymentWarning: the store found a deployment where its guarantees
	// do not hold; Reason says which (today: FerretDB 1.x without a
	// serializing proxy, where mutual exclusion is not guaranteed). A
	// Session on a *Locker reports it once, with its first acquisition
	// after the Locker probed the server.
	DeploymentWarning
	// KeeperIDShared: a lock was refused because another live Session
	// with this Session's keeper id holds it: another process given the
	// same WithKeeperID, another Session of this process, or this
	// process's previous run, whose leases it takes only once they
	// lapse. Locks exclude Sessions whatever their keeper ids, but
	// whatever reads keeper ids (Holder, logs, the CLI) cannot tell such
	// Sessions apart. Reported once per Session, with the first such lock
	// (counted by package metrics as mongolock_lock_keeper_id_shared_total).
	KeeperIDShared
)

// Events of the runner package (LeaderAwareRunner).
const (
	// TermStarted: this keeper became leader. Remaining is how long its
	// lease is trusted for; Gap, when known, the failover gap.
	TermStarted EventKind = iota + 100
	// TermEnded: a term that started ended. Err is the cause if the lease
	// was lost or the task abandoned; Took is how long it led.
	TermEnded
	// LeaderSeen: a different leader was observed; Leader is its keeper
	// id (this keeper's own when it leads).
	LeaderSeen
)

// Events of the scheduler package. Job and Scheduled name the firing.
const (
	// FiringClaimed: this keeper won the claim of a firing.
	FiringClaimed EventKind = iota + 200
	// FiringLost: another instance claimed the firing.
	FiringLost
	// FiringSkipped: a firing was not run here; Reason says why (some
	// skips come before any claim: busy, fallen behind, stopping).
	FiringSkipped
	// RunStarted: the job started. Lateness is start minus Scheduled, by
	// the server's clock as the instance estimates it;
	// Attempt how many tries taking the job's lock took.
	RunStarted
	// RunEnded: the job ended with Outcome; Took is its duration, Err its
	// error.
	RunEnded
	// FiringTakenOver: this keeper took over work another keeper claimed
	// and did not start before its lease lapsed; Leader is that keeper.
	// The firings it covers then run here, or are skipped, as if claimed
	// here.
	FiringTakenOver
	// RunRetrying: attempt Attempt of a firing failed with Err; the next
	// one starts after Took, under the same lease.
	RunRetrying
	// JobPaused, JobResumed, JobTriggered, JobRemoved: this keeper paused,
	// resumed, triggered or removed a job (Reason holds the pause's note).
	JobPaused
	JobResumed
	JobTriggered
	JobRemoved
	// JobSpecSuperseded: another instance registered the job with another
	// spec since this one did (Reason names both): the cluster follows
	// the newest registration, and this instance does not fire the job
	// until it is this instance's spec again (JobSpecRestored).
	JobSpecSuperseded
	JobSpecRestored
	// DocumentUnreadable: a read of the jobs or runs collection skipped a
	// document it could not read (a field of the wrong type, a run record
	// without its firing), or a claim met a field of a job document it
	// could not read and repaired it; Err is the BadDocument, Reason its
	// description (collection, _id, field, what was wrong), Job is the
	// job's name where known. The read goes on with the others.
	DocumentUnreadable
)

// Events of the migrations package. Migration names the migration.
const (
	// MigrationApplied: a migration was applied (or rolled back, Reason
	// "down"); Took is how long it ran.
	MigrationApplied EventKind = iota + 300
	// MigrationWaited: the migrator waited Took for another migrator's
	// lock.
	MigrationWaited
	// MigrationFailed: a migration failed with Err.
	MigrationFailed
)

var kindNames = map[EventKind]string{
	Acquired: "acquired", Refused: "refused", AcquireFailed: "acquire failed",
	Renewed: "renewed", RenewFailed: "renew failed", LeaseLost: "lease lost", Released: "released",
	TaskAbandoned: "task abandoned", DeploymentWarning: "deployment warning", KeeperIDShared: "keeper id shared",
	TermStarted: "term started", TermEnded: "term ended", LeaderSeen: "leader seen",
	FiringClaimed: "firing claimed", FiringLost: "firing claimed elsewhere", FiringSkipped: "firing skipped",
	RunStarted: "run started", RunEnded: "run ended", FiringTakenOver: "firing taken over",
	RunRetrying: "run retrying", JobPaused: "job paused", JobResumed: "job resumed",
	JobTriggered: "job triggered", JobRemoved: "job removed",
	JobSpecSuperseded: "job spec superseded", JobSpecRestored: "job spec restored",
	DocumentUnreadable: "document unreadable",
	MigrationApplied:   "migration applied", MigrationWaited: "migration waited", MigrationFailed: "migration failed",
}

func (k EventKind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return "unknown event"
}

// Event is one thing that happened to a lock, a term, a firing or a
// migration. Fields that do not apply to its Kind are zero.
type Event struct {
	Kind EventKind
	// At is when it happened, on the Session's clock.
	At       time.Time
	LockID   string
	KeeperID string
	Fence    uint64
	// Took is the round trip, run or wait the event ends.
	Took time.Duration
	// Remaining is how long the lease is still trusted for, on the local
	// monotonic clock; zero once it is not.
	Remaining time.Duration
	Err       error
	Reason    string
	// Leader is the keeper id of the leader seen (LeaderSeen).
	Leader string
	// Job, Scheduled, Lateness and Outcome describe a firing.
	Job       string
	Scheduled time.Time
	Lateness  time.Duration
	Outcome   string
	// Attempt counts the tries of a renewal or run, from 1.
	Attempt int
	// Migration names a migration ("3 add index").
	Migration string
	// Gap (TermStarted) is the failover gap, on the server's clock: from
	// the last instant the previous term held the lock (its last renewal,
	// or its release) to the start of this one, as read from the lock
	// document before the takeover; 0 when not known (no earlier term was
	// read, or the previous term was released after the last read: a
	// takeover before the lease read could expire).
	Gap time.Duration
}

// Observer receives the events of a Session and of everything built on it
// (WithObserver). Observe is called synchronously from the goroutine where
// the event happened, so it must be quick and must not call back into the
// Session; it may be called from several goroutines at once.
type Observer interface {
	Observe(Event)
}

// ObserverFunc makes a function an Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// observers fans an event out to several observers.
type observers []Observer

func (os observers) Observe(e Event) {
	for _, o := range os {
		o.Observe(e)
	}
}

// LogObserver logs events to log as structured lines: failures (a run
// that failed included), lost leases, retries, deployment warnings,
// superseded specs and unreadable documents at warning level; runs started and ended, terms,
// migrations, firings not run (but those of paused or removed jobs),
// takeovers, control actions and specs restored at info; the rest (the
// acquisitions, renewals and releases of leases, claims) at debug. A
// Session given a logger (WithSessionLogger) logs through it.
// SlogObserver is the same for log/slog. Both hide the credentials of any
// URI in the text they log (ids, reasons, errors: some are read from the
// database), as the dashboard does; the Event itself is unchanged.
func LogObserver(log zerolog.Logger) Observer {
	return ObserverFunc(func(e Event) { logEvent(log, e) })
}

func logEvent(log zerolog.Logger, e Event) {
	var ev *zerolog.Event
	switch levelOf(e) {
	case levelWarn:
		ev = log.Warn()
	case levelInfo:
		ev = log.Info()
	default:
		ev = log.Debug()
	}
	if !ev.Enabled() {
		return
	}
	w := zerologFields{ev}
	writeFields(e, &w)
	w.ev.Msg(e.Kind.String())
}

// logLevel is the level an event is logged at, whatever the logger.
type logLevel int

const (
	levelDebug logLevel = iota
	levelInfo
	levelWarn
)

// levelOf is the level of e: see LogObserver.
func levelOf(e Event) logLevel {
	switch e.Kind {
	case AcquireFailed, RenewFailed, LeaseLost, TaskAbandoned, DeploymentWarning, KeeperIDShared, MigrationFailed, RunRetrying,
		JobSpecSuperseded, DocumentUnreadable:
		return levelWarn
	case Released:
		if e.Err != nil {
			return levelWarn
		}
		return levelDebug
	case RunEnded:
		if e.Err != nil {
			return levelWarn
		}
		return levelInfo
	case FiringSkipped:
		// A paused or removed job skips every firing, on purpose: not news.
		if strings.HasPrefix(e.Reason, "paused") || strings.HasPrefix(e.Reason, "removed") {
			return levelDebug
		}
		return levelInfo
	case RunStarted, TermStarted, TermEnded, LeaderSeen, MigrationApplied, MigrationWaited,
		FiringTakenOver, JobPaused, JobResumed, JobTriggered, JobRemoved, JobSpecRestored:
		return levelInfo
	}
	return levelDebug
}

// fieldWriter takes the fields of a logged event, for one logger.
type fieldWriter interface {
	str(key, v string)
	uint64(key string, v uint64)
	int(key string, v int)
	dur(key string, d time.Duration)
	time(key string, t time.Time)
	err(key string, err error)
}

// writeFields writes the fields of e that are set, under the same keys
// whatever the logger. Text fields and errors are logged with the
// credentials of any URI in them hidden (package hideuri): they carry text
// read from the database (a bad document's _id, another keeper's id, a
// stored error) as well as the program's own.
func writeFields(e Event, w fieldWriter) {
	str := func(k, v string) {
		if v != "" {
			w.str(k, hideuri.URIs(v))
		}
	}
	str("lock", e.LockID)
	str("keeper", e.KeeperID)
	if e.Fence != 0 {
		w.uint64("fence", e.Fence)
	}
	if e.Took != 0 {
		w.dur("took", e.Took)
	}
	if e.Remaining != 0 {
		w.dur("trusted_for", e.Remaining)
	}
	if e.Err != nil {
		if msg := e.Err.Error(); hideuri.URIs(msg) != msg {
			w.err("error", errors.New(hideuri.URIs(msg)))
		} else {
			w.err("error", e.Err)
		}
	}
	str("reason", e.Reason)
	str("leader", e.Leader)
	str("job", e.Job)
	if !e.Scheduled.IsZero() {
		w.time("firing", e.Scheduled)
	}
	if e.Lateness != 0 {
		w.dur("late", e.Lateness)
	}
	str("outcome", e.Outcome)
	if e.Attempt > 1 {
		w.int("attempt", e.Attempt)
	}
	str("migration", e.Migration)
	if e.Gap != 0 {
		w.dur("gap", e.Gap)
	}
}

// zerologFields writes fields to a zerolog event.
type zerologFields struct{ ev *zerolog.Event }

func (z *zerologFields) str(k, v string)               { z.ev = z.ev.Str(k, v) }
func (z *zerologFields) uint64(k string, v uint64)     { z.ev = z.ev.Uint64(k, v) }
func (z *zerologFields) int(k string, v int)           { z.ev = z.ev.Int(k, v) }
func (z *zerologFields) dur(k string, d time.Duration) { z.ev = z.ev.Dur(k, d) }
func (z *zerologFields) time(k string, t time.Time)    { z.ev = z.ev.Time(k, t) }
func (z *zerologFields) err(k string, err error)       { z.ev = z.ev.AnErr(k, err) }
