// Package metrics exports Prometheus metrics of mongolock's locks,
// elections, scheduled jobs and migrations, built on the lock.Observer hook.
//
//	session, err := lock.NewSession(locker)
//	if err != nil { ... }
//	m, err := metrics.Register(reg, session) // reg: your registry; the package never uses the global one
//
// Register covers the Session's locks, its Locker's server-clock
// uncertainty, and every runner, scheduler and migrator built on the
// Session, before or after the call: a job's series are present from its
// scheduler's first scrape, an election's from its runner's. Call it
// before the Session takes locks: events before it are not counted. The
// finer calls remain for a Metrics made with New: lock.WithObserver(m) or
// WatchSession, WatchLocker, WatchScheduler, AddJobs, AddElections.
//
// A Metrics counts what the Sessions it observes see: the figures are
// those of this process. Sum them across instances (sum by (job_name) of a
// job's firings, max by (job_name) of its last success) for the cluster's
// view. One Metrics may observe several Sessions (WatchSession).
//
// Observe is synchronous and cheap (a few atomic additions, a map lookup
// for jobs and elections, a mutex for leases taken and let go); it does no
// I/O. Collect reads the watched Lockers' clock estimates, schedulers' job
// names and Sessions' components, none of which does I/O either.
//
// # Labels
//
// Lock metrics carry no lock id: a program taking a lock per entity would
// make a series per entity. Elections are labelled by their lock id
// (election), jobs by their name (job_name: not "job", which Prometheus
// gives the scrape job and would rename ours to exported_job); a name or
// id that is not valid UTF-8 is exported with each bad byte as \xNN. Every other
// label has a fixed set of values, all present at zero from the start; a
// job's series are all present as soon as it is added (AddJobs,
// WatchScheduler, a scheduler built on a watched Session) or seen, so
// "never ran" alerts work, and an election's once it is added
// (AddElections, a runner built on a watched Session) or seen.
//
// # Metrics
//
// With the default namespace, mongolock:
//
//	name                                          type       labels                    meaning
//	mongolock_lock_acquisitions_total             counter    result                    acquisitions: acquired, held_elsewhere (another keeper or another holder in the Session), too_late (granted too late to trust), error (failed, or the Session closed meanwhile)
//	mongolock_lock_renewals_total                 counter    result                    lease renewals, one per lease a keep-alive round covers: renewed, failed (the lease is still trusted and the renewal retried)
//	mongolock_lock_leases_lost_total              counter    cause                     leases lost before their release: taken_over (a renewal found it taken over or expired), renew_deadline (no renewal succeeded in time), abandoned (Lease.Abandon: a task that ignored cancellation, or stalled), other
//	mongolock_lock_releases_total                 counter    result                    releases: released, error (the lock expires with its lease)
//	mongolock_lock_acquire_duration_seconds       histogram                            round trip of acquisitions, whatever their result
//	mongolock_lock_renew_duration_seconds         histogram                            round trip of successful renewals, per lease renewed
//	mongolock_lock_leases_held                    gauge                                leases this process holds: +1 when acquired, -1 at the first of their loss or release
//	mongolock_lock_tasks_abandoned_total          counter                              work under a lease (Session.Do, a runner's task) abandoned because it ignored its cancelled context (lock.TaskAbandoned)
//	mongolock_lock_keeper_id_shared_total         counter                              Sessions of this process refused a lock held by another live Session with their keeper id (lock.KeeperIDShared, once per Session): two processes given one WithKeeperID; they exclude each other, but nothing that reads keeper ids can tell them apart
//	mongolock_election_leader                     gauge      election                  1 while this process leads the election, else 0
//	mongolock_election_terms_total                counter    election                  terms this process started as leader
//	mongolock_election_failover_gap_seconds       histogram  election                  failover gap of those terms, on the server's clock: from the previous term's last renewal or release to this term's start (only when a previous term was seen)
//	mongolock_election_leader_changes_total       counter    election                  changes of leader this process observed, itself included
//	mongolock_job_firings_total                   counter    job_name, outcome, reason firings tried here: succeeded, failed, claimed_elsewhere, skipped (reason below; "" otherwise)
//	mongolock_job_run_duration_seconds            histogram  job_name                  duration of runs
//	mongolock_job_start_lateness_seconds          histogram  job_name                  start of runs minus their scheduled time; its _count is the runs started
//	mongolock_job_last_success_timestamp_seconds  gauge      job_name                  Unix time of the end of the last successful run here; 0 if none since the process started
//	mongolock_job_consecutive_failures            gauge      job_name                  runs here that failed since the last success
//	mongolock_job_retries_total                   counter    job_name                  failed attempts of firings here that were retried under the same lease (lock.RunRetrying)
//	mongolock_job_takeovers_total                 counter    job_name                  claims this process took over from a claimant that did not start their work before its lease lapsed (lock.FiringTakenOver)
//	mongolock_job_spec_superseded                 gauge      job_name                  1 while another instance registered the job with another spec since this process did: the cluster follows that one, and this process does not fire the job (lock.JobSpecSuperseded)
//	mongolock_job_control_total                   counter    job_name, action          pause (also JobPauseAfter's), resume, trigger (a request made) and remove through this process's scheduler (lock.JobPaused...); the CLI's are not seen
//	mongolock_migrations_applied_total            counter    direction                 migrations applied (up) or rolled back (down)
//	mongolock_migrations_failed_total             counter    direction                 migrations that failed
//	mongolock_migrations_lock_wait_seconds        histogram                            time a migrator waited for the lock another migrator held
//	mongolock_server_clock_uncertainty_seconds    gauge                                width of the interval the server's time is known to be in (widest of the watched Lockers); absent until there is an estimate
//
// The reason of a skipped firing is one of busy (the previous run is
// still going here), setup_pending (the previous firing here has not
// started: the database has not answered its claim, lock or start),
// lock_held (still going elsewhere: the job's lock was
// held past the wait), untrusted, no_lock (acquiring the lock failed),
// no_start (the start was not recorded), no_claim (the claim failed),
// stopping, behind (this instance fell behind and did not try some
// firings), misfired (it could not start within the misfire threshold,
// and the misfire policy does not run it), paused, removed, taken_over (this instance's claim was taken
// over by another, which runs it), absent (this instance's presence lease
// could not be held): the scheduler.Reason* constants in that order; and
// other.
//
// Histograms of round trips use DefaultLatencyBuckets, the others
// DefaultDurationBuckets (WithLatencyBuckets, WithDurationBuckets).
//
// # What it does not do
//
// Renewal latency counts successful renewals only: a failed renewal
// (lock.RenewFailed) carries no round trip. The failover gap is the
// runner's reading of the lock document before its takeover; a term whose
// predecessor it did not read (it was not campaigning then) has none. The
// deploy directory of the repository has Prometheus alert rules and a
// Grafana dashboard built on these names.
package metrics
