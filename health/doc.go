// Package health answers liveness, readiness and leader probes for a
// program built on mongolock: as http.Handlers that answer 200 or 503 with
// a JSON body that says why, and as plain check functions (Live, Ready,
// Leader; Report.Err for health-check libraries that take a
// func(context.Context) error). A report's reasons hide the credentials of
// any URI they quote (a failed migration's error, as stored), as the
// dashboard does.
//
//	session, err := lock.NewSession(locker)
//	if err != nil { ... }
//	checker, err := health.ForSession(session)
//	if err != nil { ... }
//	checker.Register(mux) // /livez, /healthz, /readyz, /leader
//
// ForSession covers the Session and every runner, scheduler and migrator
// built on it, before or after the call: GET /leader answers 200 on the
// leader of its runners only, liveness checks its schedulers' loops,
// readiness its migrators' migrations (those made with
// migrations.WithSession). The finer calls remain for a Checker made with
// New: lock.WithObserver(checker) or WatchSession, WatchRunner,
// WatchScheduler, WatchMigrations (for a migrator with Sessions of its
// own, say).
//
// A Checker learns about leases, terms and tasks from the events of the
// Sessions it observes (lock.Observer), so it costs nothing between probes
// and a liveness probe never touches the database. It reads the time on
// its own clock (WithClock; ForSession's default is the Session's), which
// should be the Sessions'.
//
// # Liveness
//
// Live, LiveHandler: the process should be restarted when a check fails.
//
//   - renewals: fails once a lease's renew deadline is WithRenewSlack
//     (default 30s) behind with no successful round trip to the store since
//     its renewals began failing. The deadline is read from the failed
//     renewals (lock.RenewFailed: Event.At + Event.Remaining) or from a
//     lock.LeaseLost "renew deadline passed" (its At). Successful round
//     trips are lock.Renewed, lock.Acquired, lock.Refused "held elsewhere",
//     lock.Released without error, lock.LeaseLost "renewal found it
//     taken over or expired", and the events that follow a command the
//     database answered (lock.LeaderSeen, lock.FiringClaimed,
//     lock.FiringLost, lock.RunStarted, lock.MigrationApplied,
//     lock.MigrationWaited), from any observed Session (the connection is
//     the process's, and a Session that lost its leases may make none): the
//     check passes again at the first, a runner's next campaign or a
//     scheduler's next claim once the store is back, say. A process that
//     makes no round trip any more after losing its leases (an hourly
//     RunTaskOnLeader between calls) stays failed until its next one:
//     nothing shows that it could.
//   - abandoned_tasks: a task that ignored its cancelled context for the
//     grace period and was abandoned (lock.TaskAbandoned, from
//     lock.Session.Do or a runner; also lock.LeaseLost "abandoned" with
//     Err matching lock.ErrTaskDidNotStop, and the runner's lock.TermEnded
//     "task did not stop") still runs. The check fails until the task returns,
//     which its holder reports by releasing the lease's lock (lock.Released
//     with the same keeper, lock and fence): Go cannot stop a goroutine, so
//     a task that never returns keeps it failed until the process is
//     restarted.
//   - stalled_tasks: the runner's stall detection (runner.WithStallTimeout)
//     ended a term (lock.TermEnded "task stalled", Err runner.ErrStalled,
//     and lock.LeaseLost "abandoned" with that Err). The check
//     fails until the stalled task returned (lock.Released of that term)
//     and WithStallHold (default 1m) passed since the stall, so that a
//     probe sees it even when the task heeds its cancellation at once. A
//     stalled task that ignores its cancellation too is abandoned, above.
//   - scheduler (with a scheduler watched): a scheduler's loop is behind
//     its earliest due firing (scheduler.Scheduler.Lag) by more than
//     WithSchedulerLagLimit (default 30s). The loop dispatches due firings
//     at once, so a lag means it is blocked (by an observer, say).
//
// # Readiness
//
// Ready, ReadyHandler: the process should receive work. It fails while the
// database of a watched Session's lock.Locker does not answer a ping
// within WithCheckTimeout (CheckDatabase, at every probe; the migrations'
// status is not read then), and until
// every migration of each watched migrator is applied
// (migrations.StateApplied; migrations recorded by a newer program,
// migrations.StateUnknown, do not count) — pending, running, failed or
// changed ones are named — and while any liveness check fails, so an
// instance waiting to be restarted is sent nothing meanwhile. The status is
// read from the database at most once at a time (concurrent probes share a
// read), each read bounded by WithCheckTimeout (default 1s), and not any
// more once everything was found applied, unless a rollback is observed
// (lock.MigrationApplied "down"). With no migrator watched, the
// migrations checked are those of a migrator the Checker makes on that
// Locker's database (migrations.New, on the Locker's lock collection, with
// WithMigrationOptions): mongolock's own migrations, counted as applied
// once recorded so whatever options they were applied with, and your
// program's if named there. That is the README's setup, where the indexes
// are made at deploy and no migrator runs in the service: a forgotten
// `migrate up` keeps readiness failing, naming what is pending.
//
// Liveness never touches the database, on purpose (as Kubernetes intends
// liveness): a restart does not bring a database back, and failing every
// instance's liveness during an outage would restart them all at once.
// Readiness takes them out of the load balancer instead.
//
// # Leader
//
// Leader, LeaderHandler: 200 only while this instance leads the election
// of every watched runner, as the runner knows it without a
// round trip (runner.LeaderAwareRunner.IsLeader); the body names the
// leader last observed. It is independent of liveness. With no runner
// watched it fails.
//
// # What it does not promise
//
// A Checker knows only what it observed: have it watch every Session to
// check (ForSession, WatchSession, or lock.WithObserver), before the
// Session takes any lock. Events of a migrator that makes its own Sessions
// reach it only through migrations.WithObserver or migrations.WithSession. Liveness is about this
// process, not the database: an outage shows in it only where this
// process holds leases. Readiness pings only databases it knows of: a
// Session's store that is a lock.Locker (a Checker made with New and given
// to lock.WithObserver knows none).
package health
