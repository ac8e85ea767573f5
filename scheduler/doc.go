// Package scheduler runs cron jobs on a cluster of instances: each firing of
// a job runs on the instance that wins that firing's claim and holds that
// job's lock, at most once across the whole cluster. Any instance may run
// any job; there is no leader.
//
//	locker, _ := lock.New(db)
//	session, _ := lock.NewSession(locker) // this process's keeper; keeps the leases alive
//	defer session.Close()
//	s, _ := scheduler.New(db, session)
//	_ = s.AddJob("nightly-report", "0 2 * * *", report)
//	_ = s.Start()
//	defer s.Stop(ctx) // before session.Close
//
// Specs are parsed by github.com/robfig/cron/v3: five fields (six with
// WithSeconds), descriptors such as @daily and "@every 10m", and a CRON_TZ=
// prefix. A spec without CRON_TZ= is read in UTC unless WithLocation says
// otherwise: instances configured with different local zones would otherwise
// disagree on the firings. "@every D" fires at the multiples of D since the
// Unix epoch, not D after each process started, so that every instance
// computes the same firings; D must be a whole number of seconds.
//
// # Firings and claims
//
// A firing is identified by its scheduled time F, a function of the spec
// alone: every instance computes the same firings, and a wrong clock only
// changes when an instance tries F. Each job has one document in the jobs
// collection, {_id: name, last: F', ...}, F' being the last firing anyone
// claimed. An instance claims F with one conditional upsert, filter
// {_id: name, last: {$lt: F}}, update {$set: {last: F}}. If some firing at or
// after F was claimed before, the filter matches nothing and the upsert's
// insert collides with the existing _id (duplicate key): the claim is lost.
// When several jobs fire at F together, their claims share one update,
// {_id: {$in: names}, last: {$lt: F}} with {$set: {last: F, cid: C}}, C new
// for each batch, and a read of which documents now carry C. "last" only
// grows and each write is atomic on its document, so F is claimed at most
// once, ever, whatever the instances' clocks say.
//
// That is what makes the fast job harmless: instance A, whose clock is
// ahead, claims F, runs a job that takes a millisecond and releases the lock;
// instance B, whose clock is behind, tries F later, finds the lock free, but
// cannot claim F. Waiting before releasing (ShedLock's lockAtLeastFor) is not
// needed.
//
// # Order of operations
//
// For each firing F of job J, an instance whose clock reads F:
//
//  1. skips F if a firing of J is still in progress on this instance;
//  2. claims F as above, and gives up if it lost;
//  3. acquires J's lock through the Session. If another keeper holds it, the
//     previous run is still going there, or still recording its end; the
//     instance tries again, at pauses doubling from 20ms up to the Session's
//     retry period (lock.Backoff, as a waiting lock.Mutex), until F plus half
//     the time to J's next firing or plus a lease TTL, whichever comes
//     first, and then skips F (claimed, never run). A lease granted so late
//     that the Session cannot trust it is released by the Session, and F
//     skipped;
//  4. records the start of the run, on condition that no run of a later
//     firing has started; otherwise this instance stalled between steps 2
//     and 4 while a later firing ran, and F is skipped. The write is
//     idempotent, so a retried write does not mistake itself for a later
//     run;
//  5. runs the job, if its lease can still be trusted (lock.Lease.Err, which
//     reads the clock: checked just before the call, since the keep-alive
//     that ends a lease runs alongside). From step 3 on the Session's
//     keep-alive renews the lease with every other lease the Session holds,
//     one command per renew interval. The job's context is bound to the
//     lease (lock.Lease.Bind): if the lease cannot be renewed before its
//     renew deadline, or a renewal finds it taken over, the context is
//     cancelled with cause lock.ErrLeaseLost, a safety margin before anyone
//     else could take the lock over. One place, the Session, decides when a
//     lease is lost, for the scheduler as for every other user of the
//     Session; its timings (lock.Timings) are the scheduler's;
//  6. records the end of the run in the job document (outcome, error
//     text), releases the lock (the Session tries again, within its release
//     timeout, if that fails), and then adds the run to the history.
//
// Step 2 alone makes a second run of F impossible; step 4 would refuse a
// second start of F too. Step 3 makes runs of J never overlap while leases
// hold: a run only starts under J's lock, and a lock is only taken over
// after its lease expired by the server's clock, which is after the
// holder's deadline. Waiting for the lock in step 3 is safe because the
// claim already made F this instance's alone and step 4 keeps runs in
// order; it is needed because the instance whose clock is most ahead may
// claim F a moment after the instance most behind ran F's predecessor, and
// find the lock still held while that run records its end. Step 4 happens
// under the lock and compares against the latest started run, so runs
// start in firing order; it does not compare against the latest claim,
// because under load claims of later firings would keep overtaking each
// claimant and nothing would run. Step 6 records the end in the job
// document before releasing, so the next run never overwrites a record that
// is still being written; the history, which the next run does not touch,
// is written after, so as not to hold the lock for it. Claiming before
// locking lets a losing instance spend one round trip per firing, and makes
// the first instance to reach F decide F's fate, rather than whichever
// instance happens to find the lock free.
//
// A run is recorded (job document and history) only if its start was
// written. One whose job was then not called, because its lease lapsed or
// Stop began while the start was being written, is recorded as failed with
// an error beginning "not run:".
//
// # Clock skew
//
// At most once per firing does not depend on clocks. Skew decides who runs
// and when: F is claimed by the first instance whose clock reaches F, so it
// runs up to s early or late where s is that instance's skew, and the
// instance whose clock is most ahead does most of the work while the others
// stand by. With skews within half the period, the windows [F-s, F+s] of
// consecutive firings do not overlap. While instances are up, every firing
// runs (unless the previous run still holds the lock when the wait of step
// 3 ends) provided that claims reach the server in less than a period: the
// instance most ahead claims F before anyone can claim F's successor. When
// an instance whose clock is s ahead stops, the others skip the firings it
// had already claimed, those within s of real time.
//
// # Load
//
// Alone, a firing costs the instance that runs it six round trips (claim,
// lock, start, end, release, history; five without history) and every
// other instance one (its losing claim). While jobs run, the Session renews
// all their leases, and its other ones, in one command per renew interval
// (TTL/3 by default), however many there are. Jobs that fire together
// share commands, group-commit style: a write is sent at once if no
// command of its kind is in flight, and otherwise goes in the next one
// with every write that came meanwhile. So the first of the jobs due at
// one time is usually claimed alone, and the others together in one update
// and one read; locks and start records likewise (a bulk write and a read
// each), and ends, history records and lock releases in one command per
// batch, whatever the jobs. Batching adds no delay to an idle scheduler. A
// claimant that finds the lock held spends one or two more round trips per
// attempt: at most lockWait/RetryPeriod × 1.25 + 5 attempts, 25 with the
// default timings. A server that cannot keep up delays claims; firings are
// then skipped, never run twice, and each instance keeps at most one
// firing per job in flight.
//
// # What is not promised
//
// Firings are at most once, not exactly once. A firing that falls while no
// instance is up is skipped, not replayed; so is a firing whose claimant
// dies, loses its connection or fails between claiming and running, and one
// that falls while the previous run still goes (beyond the wait of step 3:
// such a firing runs late rather than not at all). An instance that falls
// behind its own schedule (suspended, overloaded) tries only the latest due
// firing.
//
// A lease is not a fence. A job that ignores its context, or whose instance
// pauses past its lease, may still run when another instance starts the
// next firing. RunFromContext (and lock.FenceFrom) gives the job its
// lease's fencing token, to pass to resources that can reject stale
// writers.
//
// The Scheduler does not own its Session: Stop it before closing the
// Session. Closing the Session first ends the leases of running jobs
// (their contexts are cancelled with cause lock.ErrSessionClosed), and a
// Scheduler whose Session is closed stops claiming firings: it could not
// run them, and its claims would keep every other instance from running
// them.
//
// Every instance must register a job name with the same spec; claims are
// compared by firing time only. Records written by an instance that died
// mid-run stay "running" until the job's next run.
//
// Single-document atomicity of updates is assumed, as in package lock.
// MongoDB provides it; FerretDB 1.x does not.
//
// # Events
//
// The Scheduler reports what happens to each firing through its Session's
// observers (lock.WithObserver; lock.WithSessionLogger logs them). Every
// event carries Job, Scheduled (the firing), LockID and the Session's
// KeeperID, and Fence once the job's lock is taken. Each firing this
// instance tries ends in exactly one of FiringLost, FiringSkipped and
// RunEnded:
//
//   - lock.FiringClaimed: this instance won the claim (step 2).
//   - lock.FiringLost: the firing was claimed elsewhere, or a later one was.
//   - lock.FiringSkipped: the firing was not run here. Reason says why, and
//     Err holds the error, if any:
//     "previous run still going on this instance" (step 1, not claimed);
//     "claim failed: <error>"; "previous run still going: lock held
//     elsewhere" (step 3, after the wait; Took is the wait, Attempt the
//     attempts); "lock not acquired: <error>" (step 3);
//     "lease could not be trusted" (step 3, granted too late, Err
//     lock.ErrNotTrusted; or step 5, lost while the start was recorded,
//     Err its cause); "a later firing ran" (step 4); "start not recorded"
//     (step 4, Err the write's error); "stopping" (Stop began, or the
//     Session closed, before the job was called).
//     One more does not end a firing tried here: when the instance fell
//     behind (suspended, overloaded), one event, Scheduled the first
//     firing missed, Reason "this instance fell behind: N firings from
//     this one on not tried here".
//   - lock.RunStarted: the job was called (step 5); Lateness is how long
//     after Scheduled, by this instance's clock, and Attempt how many
//     attempts taking the job's lock took (step 3).
//   - lock.RunEnded: the job returned. At is when, Took how long it ran,
//     Outcome the recorded outcome and Err its error. If the job's context
//     was cancelled, Err also wraps the cause ("<error> (context:
//     <cause>)", as recorded) and Reason says "context cancelled: <cause>";
//     after a panic, Reason holds the stack. It is emitted once the end is
//     recorded, the lock released and the history written; a failure of
//     those writes is added to Reason.
//
// With no observer, lock.Session.Emit returns at once.
//
// With a tracer (lock.WithTracer; the tracing package traces with
// OpenTelemetry), each firing this instance claimed is a span (lock.OpRun)
// from the claim won to its last event, which gets the events above from
// RunStarted on. The job's context carries it, so the job's own spans are
// its children, and so are the acquisition and release of the job's lock
// and the writes recording the run.
//
// # Records
//
// Every run is reported (Events) and persisted: the job document holds the
// last claim and the last run, the runs collection the history
// (WithHistory). Jobs, History, LoadRecords and LoadHistory read them from
// any instance or tool. All writes use write concern majority with
// journal, so a claim survives a failover.
package scheduler
