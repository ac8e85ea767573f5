// Package scheduler runs cron jobs on a cluster of instances: each firing of
// a job runs on the instance that wins that firing's claim and holds that
// job's lock. Any instance may run any job; there is no leader. Its promise,
// in one sentence:
//
//	Every firing runs at most once; a firing that can start within the
//	job's misfire threshold of its time runs (late if need be, in order);
//	one that cannot is a misfire, and the job's misfire policy decides.
//
// Lateness is judged by the server's clock. The default threshold
// (MisfireThresholdFor) is a lease TTL plus three poll intervals plus two
// op timeouts, 80s with the default timings: the longest a claim whose
// claimant died can wait to be taken over, so that no firing misfires
// while an instance is up and reaches the database. The misfire policy
// (MisfirePolicy) skips misfires, runs the latest of each claim (the
// default), or runs them all up to a maximum.
//
//	locker, _ := lock.New(db)
//	session, _ := lock.NewSession(locker) // this process's keeper; keeps the leases alive
//	defer session.Close()
//	s, _ := scheduler.New(db, session)
//	_ = s.AddJob("nightly-report", "0 2 * * *", report)
//	_ = s.Start()
//	defer s.Stop(ctx) // before session.Close
//
// Specs are parsed by github.com/robfig/cron/v3: five fields (minute first,
// as in crontab) or six (a leading seconds field), whichever a spec has;
// descriptors such as @daily and "@every 10m"; and a CRON_TZ= prefix. A
// step larger than the range it steps through ("*/75" seconds, "*/25"
// hours), which would fire at the range's first value only, is refused, as
// is CRON_TZ=Local. A spec without CRON_TZ= is read in UTC unless
// WithLocation says otherwise: instances configured with different local
// zones would otherwise disagree on the firings; with WithLocation, the
// spec is registered with the zone's IANA name (time.Local's is looked
// up), so that instances in different zones do not count as agreeing. "@every D" fires at the multiples of D since the
// Unix epoch, not D after each process started, so that every instance
// computes the same firings; D must be a whole number of seconds.
//
// # One spec per job
//
// Instances may register one job with different specs: a rolling deploy
// that changes it runs old and new instances side by side for a while, and
// a misconfigured instance may disagree for good. The job's firings still
// follow one spec at any time, cluster-wide, and it is one that a live
// instance registers:
//
//	A job never stops while an instance that registers it is up: the
//	cluster follows the newest registration among the live instances.
//
// A Scheduler registers its jobs when it starts (and a job added to a
// started Scheduler at once); the registration writes the spec, read in
// the Scheduler's time zone (WithLocation, unless the spec has CRON_TZ=),
// into the job's document with a hash of it and the job's name, and, if
// the spec changed, the server's time (Record.Spec, Record.SpecSince). It
// also records, for that spec, the registering Scheduler (its keeper, as
// Record.Specs shows it, and its ClaimantID) and the time, by its clock,
// it first registered the job.
// Claims and takeovers match the hash, so from that write on an instance
// with another spec claims nothing of the job: it does not fire it, says so
// once (the event lock.JobSpecSuperseded, logged as a warning; the metric
// mongolock_job_spec_superseded; JobInfo.Superseded; the CLI's jobs command
// and the dashboard show the spec the cluster follows), and fires it again
// once its spec is the job's again (lock.JobSpecRestored). A firing of the
// new spec before its registration is none of the job's: neither the claim
// covering the firings since nor a late firing runs it. A claim made under
// the old spec is done as it was claimed.
//
// Live means holding its presence lease (see Taking over), which a
// Scheduler takes when it registers jobs (at its first poll), in
// leader-only mode too, and takes again, if it lapsed, at its next claim
// or registration. At each poll a superseded instance registers its spec
// again if the last registrant of the spec followed is not live (stopped,
// died, or cut off past its lease), or registered the job before it did (a
// registration again keeps the time of the first): so when a stale or
// rolled-back instance stops, the instances still up take the job back
// within a poll or two, and two live instances with different specs agree,
// poll after poll, on the newer one. Registrations are ordered by the
// registrants' clocks, so two made within the instances' clock skew of
// each other may be ordered either way, the same way on every instance.
// This costs nothing while no job is superseded, and a read of one
// presence lease a poll while some are (one for each registrant they
// name). If the last registrant of the spec followed stops while an older
// instance with another spec and a newer one with the followed spec are
// up, the older takes the job until the newer takes it back, at its next
// poll. In leader-only mode the leader's spec wins: a superseded leader
// registers its spec again at its next poll.
//
// So the newest deployment's spec wins once its first instance starts; an
// old instance restarted in the middle of a rolling deploy takes the job
// until it stops, or until a newer instance starts. A job whose instances
// registered different specs shows them in Record.Specs, and
// Record.Orphaned tells a job that no instance up is known to register (by
// the last registrant of each spec and the last claimant): it fires nothing
// until one registers it (the dashboard and the CLI's jobs command flag
// it).
//
// # Firings and claims
//
// A firing is identified by its scheduled time F, a function of the spec
// alone: every instance computes the same firings, and tries F once the
// server's clock reaches F (see Clocks). Each job has one document in the
// jobs collection, {_id: name, last: F', pend, done, cid, ...}, F' being the
// last firing anyone claimed. An instance claims F with one conditional
// upsert, filter {_id: name, sh: H, last: {$not: {$gte: F}}, pend: {$ne:
// true}} (H the hash of its spec: see One spec per job), update {$set:
// {last: F, by: K, pend: true, cid: C}}, K being the claimant (the
// Scheduler's ClaimantID) and C the claim's token, new for each claim. If
// some firing at or after F was claimed before, or the last claim's work
// is still pending, the filter matches nothing and the upsert's insert
// collides with the existing _id (duplicate key): the claim is lost. Jobs
// firing at F together share one update ({_id: {$in: names}}). "last"
// only grows and each write is atomic on its document, so F is claimed at
// most once, ever, whatever the instances' clocks say.
//
// Every later write of the claim's work (its starts, its settling, a
// takeover, a resume) matches its token, and a takeover and a resume give
// it a new one: a former holder's write, however late, matches nothing.
//
// A claim is work: the firings after "done" (the last firing settled) up
// to F. Normally that is F alone; it also covers the firings nobody
// claimed in between, and the claimant decides, oldest first, what each
// does (see Misfires). The work stays pending, and no later firing of the
// job can be claimed, until its last firing starts or is recorded as not
// run: the claims of a job are settled one at a time, in order.
//
// # Order of operations
//
// For each firing F of job J, once the server's clock reaches F by this
// instance's estimate (see Clocks):
//
//  1. skips F if a firing of J is still in progress on this instance
//     (with OverlapWait and OverlapCancel, if one also waits for it); the
//     latest firing so skipped is claimed once J is idle here (unless one
//     waited for the other: those that fell meanwhile are not run);
//  2. claims F as above, and gives up if it lost. It claims only while it
//     holds its presence lease (see Taking over);
//  3. for each firing G of the claim's work that runs (see Misfires;
//     lateness is judged again at G's turn: a backlog that fell behind
//     runs the policy's misfires only), oldest first, acquires J's lock
//     through the Session. If another keeper holds it,
//     the previous run is still going there, or recording its end. With
//     OverlapSkip (the default) the instance tries again, at pauses
//     doubling from 20ms up to the Session's retry period, until G plus
//     half the time to J's next firing or plus a lease TTL, whichever
//     comes first (from now, for a late firing); it waits on for a holder
//     found gone (until its lease lapses) and for an earlier firing's late
//     run, which G comes after in order (until G's misfire threshold, then
//     ReasonMisfired), and otherwise records G as not run (ReasonLockHeld).
//     A lock got only after waiting, from a run that went on at G past
//     that wait, records G as not run too (ReasonRunGoing). OverlapWait
//     waits as long as it takes; OverlapCancel also has the previous run
//     cancelled. A lease granted too late for the Session to trust is
//     released, and G recorded as not run. A run that the job's document
//     still says is running, by another claim, once G holds the lock is
//     recorded in the history as spent (OutcomeSpent): its instance lost
//     the lock without recording an end;
//  4. records the start of the run, on condition that the claim is still
//     this instance's and no firing at or after G was settled; the write
//     settles G (done = G), and the claim's work if G is its last. It is
//     idempotent and final (nothing undoes it), and carries a deadline by
//     the server's clock, the end of the lease's trust, so it cannot apply
//     later (docs/design.md, "final starts"). If the condition fails, the
//     claim was taken over, and the taker does the rest; a start too late
//     for its deadline leaves the claim pending;
//  5. runs the job, if its lease can still be trusted (lock.Lease.Err,
//     checked just before the call). A lease lost before the start is
//     written leaves the claim pending, for the next poll to resume or
//     another instance to take over; one lost once the start applied
//     spends the firing: recorded as failed "not run: ...", and not run
//     again. A failing job runs again after a pause, up to its retries
//     (JobRetries). Its context is bound to the lease (lock.Lease.Bind),
//     cancelled with cause lock.ErrLeaseLost a safety margin before anyone
//     else could take the lock over; the Session alone decides when a
//     lease is lost, and its timings (lock.Timings) are the scheduler's;
//  6. records the end of the run in the job document (outcome, error
//     text, attempt, failures in a row; its end is the server's time the
//     job returned, however late the write applies), releases the lock
//     (retried within the Session's release timeout), and then adds the
//     run, and the records of the firings before it that did not run, to
//     the history.
//
// If the work's last firing does not start, the instance settles the work
// (pend: false, done: F) if it is still its own, then records the rest.
//
// Step 2 alone makes a second claim of F impossible; step 4 a second
// start of any firing, whoever claimed or took over what. Step 3 makes
// runs of J never overlap while leases hold: a run only starts
// under J's lock, and a lock is only taken over after its lease expired by
// the server's clock, which is after the holder's deadline. A run is
// recorded (job document and history) only if its start was written. Why
// the steps are so, and how a wait for the lock reads its holder:
// docs/design.md, "The scheduler's claim protocol".
//
// # Taking over
//
// Every Scheduler holds a presence lease through its Session (as
// `mongolock locks` shows it), renewed with its other leases. Its lapsing,
// on the server's clock, is how the others know that a claim it left
// pending will never start: every poll interval
// (WithPollInterval; the Session's renew interval by default) each
// instance reads, in one query, the documents of its jobs with pending
// work, and for a claim older than a poll interval tries to acquire its
// claimant's presence lock. It gets it only once the claimant's lease has
// lapsed (the claimant died, was cut off or paused past its lease) or was
// released (it stopped), and while it holds it the claimant cannot take it
// back. It then makes the pending work its own in one conditional write
// ({pend: true, by: claimant}), releases the presence lock and does the
// work as if it had claimed it (a FiringTakenOver event first).
//
// So a firing whose claimant dies between claiming and starting it runs
// anyway, late: at most a lease TTL after the claimant's last renewal,
// plus a poll interval, plus the lock package's safety margins, plus the
// wait for the job's lock; within a poll interval or two after a clean
// Stop, which releases the presence lease once every firing of the
// Scheduler is gone. In leader-only mode the election's lease stands for
// presence: claims of a leader that stopped scheduling but still leads
// wait for the next leader. All of it fits in the default misfire
// threshold.
//
// # Misfires
//
// The firings a claim covers besides its own fell without being claimed.
// When the claim is made, resumed or taken over, its plan judges each of
// them, oldest first, by the server's clock at that reply (decide, in
// misfire.go, is the one place that does):
//   - a firing that fell while the job was paused or removed is recorded
//     as not run (ReasonPaused, ReasonRemoved); nothing starts while a job
//     is paused: a firing that fell before the pause and would run waits
//     for its end (the claim stays pending), then runs late;
//   - one that fell while one of the job's previous runs was still going,
//     past its lock wait, is skipped (ReasonRunGoing: the overlap policy;
//     the job's document keeps up to 16 spans of a backlog's runs);
//   - a misfire skipped so, or paused or removed, counts among the
//     policy's newest: an older misfire does not run in its stead;
//   - one at most the misfire threshold late runs, late, in order;
//   - the others are misfires: the newest MisfirePolicy.Max of them at most
//     MisfirePolicy.Window late run, oldest first, and the rest are
//     recorded as not run (ReasonMisfired).
//
// Each firing not run has a record of its own, written only where the
// firing has none (a run's record replaces it); of a very long outage, the
// newest MaxRecorded per claim, the oldest of them saying how many older
// ones were not recorded. A job's registration is its first firing
// settled, so its first claim covers every firing since. Start claims the
// latest firing before it (a new leader too, when it starts to lead), so
// the firings since the last claim are run or recorded at once.
//
// # Control
//
// PauseJob, ResumeJob, TriggerJob and RemoveJob (and the Scheduler's
// methods Pause, Resume, Trigger and Remove, and `mongolock jobs pause|resume|trigger|remove`)
// write the job's document, from any instance or tool; every claim reads
// it. A paused job's firings are claimed as usual and recorded as not run
// (ReasonPaused), until the pause's end if it has one; firings still owed
// from before the pause run after it, late. A removed job's
// firings are not claimed once an instance's poll saw the removal, and
// recorded as not run if claimed before. A trigger is claimed, by one
// instance, through the same claim, lock, fence and overlap rule as a
// firing, within a poll interval; its run's Scheduled is the trigger's
// server time, and Run.Triggered is set; like a firing's, the run skips the
// firings that fall while it goes on past their lock wait (OverlapSkip),
// and keeps the job's earlier runs for the firings after it. A second
// trigger before the first
// is claimed is not another run. JobPauseAfter pauses a job after failed
// firings in a row.
//
// # Clocks
//
// At most once per firing does not depend on clocks, and neither does when
// a firing is tried: firings fall due by the server's clock. Each
// instance's Session's Locker estimates it from the server's answers to its
// lock commands and carries it forward on the local monotonic clock; an
// instance tries F when the estimate's lower bound reaches F, so never
// before the server's clock does, and at most the estimate's uncertainty
// (a round trip, plus drift) after. An instance's own clock may be wrong by
// any amount: it neither starts firings early or late nor does the others'
// work by being ahead. Before the Locker's first reading (its Session's
// first lock command, normally the presence lease at the first poll,
// within a round trip of Start) nothing falls due: an instance fires and
// claims nothing, and the start's catch-up waits for it too (a clock
// minutes ahead would otherwise claim a firing minutes away, and no
// instance could claim the job's firings before it). At that reading, and
// whenever the server's clock is found stepped back, it queues its jobs
// again by the server's time, from Start's.
// Lateness (against the misfire threshold, and RunStarted.Lateness)
// is judged by the server's clock. A firing claimed past one that no claim
// reached yet covers it: it runs late, or is a misfire, as its lateness
// says. A new job (no document before its first registration) has no
// firings before that registration's server time.
//
// # Load
//
// Alone, a firing costs the instance that runs it six round trips (claim,
// lock, start, end, release, history; five without history) and every
// other instance one (its losing claim). Each instance also polls, one
// query per poll interval for all its jobs. While jobs run, the Session renews
// all their leases, and its other ones, in one command per renew interval
// (TTL/3 by default), however many there are. Jobs that fire together
// share commands, group-commit style: a write is sent at once if no
// command of its kind is in flight, and otherwise goes in the next one
// with every write that came meanwhile; a command that stalls (out four
// times as long as the median of the last replies, 200ms at least) holds
// none back, the next goes beside it (four at most), so one slow reply
// delays no other job. So the first of the jobs due at
// one time is usually claimed alone, and the others together in one update
// and one read; locks and start records likewise (a bulk write and a read
// each), and ends, history records and lock releases in one command per
// batch, whatever the jobs. Batching adds no delay to an idle scheduler. A
// claimant that finds the lock held spends one or two more round trips per
// attempt: at most lockWait/RetryPeriod × 1.25 + 5 attempts, 25 with the
// default timings. A server that cannot keep up delays claims; firings
// then run late, never twice, and each instance tries at most one
// firing per job at a time (two with OverlapWait and OverlapCancel; work
// taken over, resumed or triggered aside), and limits how many firings it
// sets up at once (admission: additive increase, multiplicative decrease
// on how long a claim, lock and start take); those it does not try are
// reported here (ReasonOverloaded) and run late by the claim after them.
//
// # What is not promised
//
// Every firing runs at most once, whatever the clocks say. Every firing
// that can start within the misfire threshold runs: on time, or late if
// its claimant died (taken over), or if it fell while an earlier claim was
// pending or while the instances up were busy, behind or overloaded;
// unless the operator paused or removed the job, or the overlap policy
// skips it (the previous run still goes). Instances' clocks may be wrong
// by any amount (see Clocks); they must tick at the same rate within
// 0.1 %, as for the locks. A firing whose run had started (its start
// recorded) on an instance that then died, or that lost its lease before
// calling the job while another claim came, is spent: it is not run
// again, and its record says so (failed "not run: ..."; or "running" until
// the job's next run, which records it as spent: OutcomeSpent). Every firing not run is recorded, with its
// reason, by the instance whose claim covered it, once that claim is
// settled. An instance that falls behind its own schedule (suspended,
// overloaded) tries only the latest due firing; the claim of it covers the
// others.
//
// These promises are checked by a seeded simulation of whole clusters
// (internal/sim, run by the module's tests): crashes, pauses, suspends,
// restarts, clock skew and steps, lost, late and slow commands, failovers
// and an operator's controls, and every promise checked over the whole
// history of each run, by the simulation's ground truth. At most once is
// held in every run. The misfire promise is checked and its violations
// reported, not yet failing: in about one run in twenty (50 to 54 of the 1000
// default seeds) some firing that the check judges could have started
// within the threshold did not run (issue 27).
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
// Every instance must register a job name with the same spec and options;
// claims are compared by firing time only. Records written by an instance
// that died mid-run stay "running" until the job's next run, which finds
// the run still running once it holds the job's lock and records it in the
// history as spent (OutcomeSpent; a record its instance writes after all
// replaces it); the run is not retried elsewhere (it started, so it may
// have done its work).
//
// Instances of versions before the claim's pending work existed do not
// respect it: upgrade every instance together.
//
// Single-document atomicity of updates is assumed, as in package lock.
// MongoDB provides it; FerretDB 1.x does not.
//
// # Events
//
// The Scheduler reports what happens to each firing through its Session's
// observers (lock.WithObserver; lock.WithSessionSlog or
// lock.WithSessionLogger logs them). Every event carries Job, Scheduled
// (the firing), LockID and the Session's
// KeeperID, and Fence once the job's lock is taken. Each firing this
// instance tries ends in one of FiringLost, FiringSkipped or RunEnded (a
// lost claim of a trigger, or of a catch-up at Start, emits nothing; work
// left pending, and resumed by a poll, is tried again); a claim taken
// over is reported under the claim's firing, the one the taker's
// FiringTakenOver names; a firing recorded as not run has its
// FiringSkipped event on the instance that recorded it (so a firing
// skipped here because this instance was busy, and then recorded as
// missed by the claim after it, has two):
//
//   - lock.FiringClaimed: this instance won the claim (step 2), or (Reason
//     "triggered") the claim of a triggered run.
//   - lock.FiringTakenOver: this instance took over the claim of Leader,
//     whose presence lease lapsed; what follows is as if claimed here.
//   - lock.FiringLost: the firing was claimed elsewhere, or a later one
//     was, or an earlier claim's work is pending. A catch-up claim at
//     Start that loses emits nothing.
//   - lock.FiringSkipped: the firing was not run here. Reason says why, and
//     Err holds the error, if any:
//     "previous run still going on this instance" (step 1, not claimed);
//     "claim failed: <error>"; "previous run still going: lock held
//     elsewhere" (step 3, after the wait; Took is the wait, Attempt the
//     attempts); "lock not acquired: <error>" (step 3; also a grant too
//     late to trust, Err lock.ErrNotTrusted: not final, the claim stays
//     pending and the next poll resumes it);
//     "lease could not be trusted" (step 5, lost once the start applied:
//     spent, Err its cause); "claim taken over by another instance" (step
//     4, or settling); "start not recorded" (step 4, Err the write's
//     error, or lock.ErrLeaseLost when the lease was lost before the
//     start, or the start came too late for its deadline; also when
//     settling failed: not final, the next poll resumes the work, and the
//     firing may still run; where Reason adds "the start applied: spent",
//     the write's fate was learnt as applied, and the firing is recorded
//     as failed "not run: start not recorded"); "stopping"
//     (Stop began, or the Session closed, before the job was called: the
//     claim is left to be taken over); "presence lease not held" (step 2);
//     "misfired", "paused", "removed", "previous run still going"
//     (records of firings not run, one a firing; the oldest of a claim
//     whose older misfires were not recorded adds how many).
//     One more does not end a firing tried here: when the instance fell
//     behind (suspended, overloaded), one event, Scheduled the first
//     firing missed, Reason "this instance fell behind: N firings from
//     this one on not tried here".
//   - lock.RunStarted: the job was called (step 5); Lateness is how long
//     after Scheduled, by the server's clock (see Clocks), and Attempt
//     how many attempts taking the job's lock took (step 3), or which
//     retry this is.
//   - lock.RunRetrying: attempt Attempt failed with Err; the next starts
//     after Took.
//   - lock.RunEnded: the job returned. At is when, Took how long it ran,
//     Outcome the recorded outcome and Err its error. If the job's context
//     was cancelled, Err also wraps the cause ("<error> (context:
//     <cause>)", as recorded) and Reason says "context cancelled: <cause>";
//     after a panic, Reason holds the stack. It is emitted once the end is
//     recorded, the lock released and the history written; a failure of
//     those writes is added to Reason. Attempt is the attempt (JobRetries).
//   - lock.JobPaused, JobResumed, JobTriggered, JobRemoved: this instance
//     paused (also by JobPauseAfter), resumed, triggered or removed the
//     job.
//   - lock.JobSpecSuperseded, JobSpecRestored: another instance registered
//     the job with another spec since this one (Reason names both), so
//     this instance no longer fires it; or its spec is the job's again
//     (see One spec per job).
//   - lock.DocumentUnreadable: a read of Jobs or History (or of the
//     documents before a registration) skipped a document it could not
//     read, or a claim met a field of a job document it could not read
//     and repaired it; Err is the lock.BadDocument, Reason its text
//     (collection, _id, field, what is wrong; see Records). Logged as a
//     warning.
//
// With no observer, lock.Session.Emit returns at once.
//
// With a tracer (lock.WithTracer; the tracing package traces with
// OpenTelemetry), each firing this instance runs or tries to is a span
// (lock.OpRun) from taking the job's lock to its last event, which gets
// the events above from RunStarted on. The job's context carries it, so the job's own spans are
// its children, and so are the acquisition and release of the job's lock
// and the writes recording the run.
//
// # Records
//
// Every run is reported (Events) and persisted: the job document holds the
// last claim and the last run, the runs collection the history
// (WithHistory). Jobs, History, LoadRecords, LoadRecordsPage, LoadHistory
// and LoadHistoryPage read them from any instance or tool. A document one
// of them cannot read (a field of the wrong type, such as outcome: 7 or
// last: "x"; a run record without scheduled) is skipped and reported as a
// lock.BadDocument naming its collection, _id and field: returned beside
// the others by the Load functions (in bad, or the page's Bad), and as the
// event lock.DocumentUnreadable by a Scheduler's. It never fails the whole
// read, nor panics it. A Scheduler's own reads and claims of a job
// document never skip it: they read what they can, report each field they
// cannot (lock.DocumentUnreadable, its problem ending "repaired"), and
// remove it from the document with a write conditional on the value read
// (a last claim that is not a date becomes the last firing settled; a
// spec hash is made again from the spec; a pending claim whose own fields
// are bad is settled, its firings not run). A bad field never stops a job,
// nor the other jobs claimed with it. All writes use write concern majority with
// journal, so a claim survives a failover. A run's end and history are
// written however long the database cannot be reached while the Scheduler
// runs (the job's lock stays held meanwhile, so its next run waits). Each
// record is tried for up to about twice the op timeout more once the
// Scheduler stops or its Session closes, or when the server refuses the
// write itself; then the RunEnded event's Reason says "end not recorded"
// (or "not recorded in the history"), and the job document says
// "running" until the job's next run records it as spent. The records of the
// firings a claim covers that do not run are written once the start of
// the firing it runs settled them, before its job is called: an instance
// killed between that start and those writes (about a round trip) leaves
// them unwritten, and those firings have no record. (They cannot be
// written before the start: until it applies, the claim may have been
// taken over and those firings run by the taker.)
package scheduler
