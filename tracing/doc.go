// Package tracing traces mongolock with OpenTelemetry: a span for each
// acquisition, renewal and release of a lock.Session, for each leader term
// of a runner and each firing run of a scheduler.
//
//	tr, err := tracing.New(tp) // your TracerProvider; never the global one unless you pass it
//	session, err := lock.NewSession(locker, lock.WithTracer(tr))
//
// The core packages (lock, runner, scheduler, migrations) do not import
// OpenTelemetry: they call a lock.Tracer, which this package implements. A
// program that does not import tracing compiles none of it, and a Session
// without a tracer builds no span and allocates nothing for one.
//
// # Parents, children and links
//
// Each operation's span is a child of the span in the context it was given,
// and the context of its round trips carries it: an instrumented MongoDB
// client (one whose command monitor starts spans from the context of its
// CommandStartedEvents, which the driver gives the caller's context) makes
// its command spans children of mongolock's. The work run under a term or
// a firing gets the span in its context, so the spans it starts are
// children too.
//
//   - mongolock.acquire, mongolock.release, and mongolock.renew of
//     Lease.Renew: children of the caller's span (Mutex.Lock's context,
//     ReleaseLock's, ...). Mutex.Lock makes one acquire span per attempt.
//     The release of everything at Session.Close is a trace of its own.
//   - mongolock.renew of the keep-alive: a trace of its own each renew
//     interval (WithFilter leaves them out).
//   - mongolock.term under LeaderAwareRunner.Run: a child of Run's context;
//     the task's context carries it. A term begun by RunTaskOnLeader
//     outlives the call that began it: it is a trace of its own, linked to
//     that call, and each task is a mongolock.task span, a child of its
//     call's context, linked to the term.
//   - mongolock.run: a trace of its own per firing this instance claimed;
//     the job's context carries it, and the acquisition and release of the
//     job's lock and the writes recording the run are its children. A run
//     links to no term: the scheduler runs each firing on the holder of
//     that job's lock, not under a leader's term. lock.Op.Links is there
//     for a leader-only mode to link runs to the term that started them.
//   - Scheduler batches: the acquisitions (and releases) of jobs that fire
//     together share one command and so one span, a child of the run that
//     sent it.
//
// # Spans
//
// Every span is of kind Internal and has mongolock.keeper.id. Status is
// Error, with the error recorded as an exception event, when the operation
// failed: an acquisition that failed or came too late to trust, a renewal
// that failed or found its lease lost, a failed release, a failed or
// skipped-on-error run (not one skipped because the lock was held
// elsewhere, its claim was taken over, or the scheduler stopped), a term whose
// lease was lost, whose task failed, stalled or was abandoned, a failed task.
// A refused acquisition is not a failure.
//
//	span               attributes                           mongolock.outcome
//	mongolock.acquire  lock.id | lock.ids+lock.count,       acquired, refused, failed, mixed
//	                   fence (acquired), attempt (Lock),
//	                   reason (refused)
//	mongolock.renew    lock.id | lock.ids+lock.count,       renewed, failed, lost, mixed
//	                   fence (one lock), attempt (keep-alive)
//	mongolock.release  lock.id | lock.ids+lock.count,       released, failed, mixed
//	                   fence
//	mongolock.term     lock.id, fence, reason               ended, lost, failed
//	mongolock.task     lock.id, fence                       succeeded, failed
//	mongolock.run      job, firing.scheduled, lock.id,      succeeded, failed, skipped,
//	                   fence, attempt, retries, reason      unknown (the job called runtime.Goexit)
//
// The attributes (all prefixed mongolock.):
//
//	keeper.id          string    the Session's keeper id
//	lock.id            string    the lock, when the operation is on one
//	lock.ids           string[]  the locks, when on several (at most MaxLockIDs)
//	lock.count         int       how many locks, when several
//	fence              int       the term's fencing token
//	attempt            int       acquire: Mutex.Lock's attempt, from 1; renew: the keep-alive's
//	                             attempt since its last success, from 1; run: how many
//	                             attempts taking the job's lock took
//	job                string    the scheduler job
//	firing.scheduled   string    the firing's scheduled time, RFC 3339, UTC
//	outcome            string    how it ended (above; a run's is scheduler.Outcome, or "skipped")
//	reason             string    why: "held elsewhere", a scheduler.Reason…, "task returned", "resigned", ...
//	retries            int       run: failed attempts of the firing that were retried (absent if none)
//	retry.delay        double    event "run retrying": seconds until the next attempt
//	firing.claimant    string    event "firing taken over": the keeper whose claim was taken over
//
// Operations on several locks (AcquireLocks, ReleaseLocks, the keep-alive's
// renewal of every lease) add an event to their span for each lock that
// did not end as wanted: named refused, failed or lost, with
// mongolock.lock.id, mongolock.fence, mongolock.reason and mongolock.error.
// A run's span has an event "run started" when the job begins, with
// mongolock.firing.lateness (seconds after the scheduled time); "run
// retrying" for each failed attempt retried, with mongolock.attempt (the
// attempt that failed), mongolock.error and mongolock.retry.delay; "firing
// taken over" when the claim it runs was taken over, with
// mongolock.firing.claimant; "job paused" when its failure paused the job
// (scheduler.JobPauseAfter), with mongolock.reason the pause's note. The
// control events of Scheduler.Pause, Resume, Trigger and Remove reach no
// span: no operation is traced around them.
//
// # Metrics
//
// For metrics, use the metrics package's Prometheus collector. To export
// them through OpenTelemetry instead, the Prometheus bridge
// (go.opentelemetry.io/contrib/bridges/prometheus) makes the registry you
// registered the collector on a metric producer of an OpenTelemetry
// MeterProvider (see the example): the same metrics, names and labels, no
// second set of instruments to keep in step. Pass your registry with
// WithGatherer: without it the bridge reads Prometheus's global one.
package tracing
