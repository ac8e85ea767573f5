// Package scheduler runs cron jobs on a cluster of instances: each job runs
// on the instance that holds the job's lock, at most once per firing across
// the whole cluster.
//
//	lk, _ := lock.New(db)
//	s, _ := scheduler.New(db, lk, lock.NewKeeperID())
//	_ = s.AddJob("nightly-report", "0 2 * * *", report)
//	_ = s.Start()
//	defer s.Stop(ctx)
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
// "last" only grows and each write is atomic on its document, so F is claimed
// at most once, ever, whatever the instances' clocks say.
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
//  3. acquires J's lock; if another keeper holds it, the previous run is still
//     going there and F is skipped (claimed, never run);
//  4. records the start of the run, on condition that no run of a later
//     firing has started; otherwise this instance stalled between steps 2
//     and 4 while a later firing ran, and F is skipped;
//  5. runs the job. From step 3 on the lease is renewed every TTL/3
//     (WithRenewInterval); if it cannot be renewed until the lease deadline
//     minus a margin (WithLeaseMargin), the job's context is cancelled with
//     cause lock.ErrLeaseLost, before anyone else could take the lock over;
//  6. records the end of the run (outcome, error text), then releases the
//     lock.
//
// Step 2 alone makes a second run of F impossible; step 4 would refuse a
// second start of F too. Step 3 makes runs of J
// never overlap while leases hold: a run only starts under J's lock, and a
// lock is only taken over after its lease expired by the server's clock,
// which is after the holder's deadline. Step 4 happens under the lock and
// compares against the latest started run, so runs start in firing order;
// it does not compare against the latest claim, because under load claims
// of later firings would keep overtaking each claimant and nothing would
// run. Step 6
// records before releasing, so the next run never overwrites a record that
// is still being written. Claiming before locking lets a losing instance
// spend one round trip per firing, and makes the first instance to reach F
// decide F's fate, rather than whichever instance happens to find the lock
// free.
//
// # Clock skew
//
// At most once per firing does not depend on clocks. Skew decides who runs
// and when: F is claimed by the first instance whose clock reaches F, so it
// runs up to s early or late where s is that instance's skew, and the
// instance whose clock is most ahead does most of the work while the others
// stand by. With skews within half the period, the windows [F-s, F+s] of
// consecutive firings do not overlap. While instances are up, every firing
// runs (unless the previous run still holds the lock) provided that claims
// reach the server in less than a period: the instance most ahead claims F
// before anyone can claim F's successor. When an instance whose clock is s
// ahead stops, the others skip the firings it had already claimed, those
// within s of real time.
//
// # Load
//
// A firing costs the instance that runs it six round trips (claim, lock,
// start, end, history, release; five without history) and every other
// instance one (its losing claim), plus a renewal per TTL/3 of running time.
// A server that cannot keep up delays claims; firings are then skipped,
// never run twice, and each instance keeps at most one firing per job in
// flight.
//
// # What is not promised
//
// Firings are at most once, not exactly once. A firing that falls while no
// instance is up is skipped, not replayed; so is a firing whose claimant
// dies, loses its connection or fails between claiming and running, and one
// that falls while the previous run still goes. An instance that falls
// behind its own schedule (suspended, overloaded) tries only the latest due
// firing.
//
// A lease is not a fence. A job that ignores its context, or whose instance
// pauses past its lease, may still run when another instance starts the
// next firing. RunFromContext gives the job its lease's fencing token, to
// pass to resources that can reject stale writers.
//
// Every instance must register a job name with the same spec; claims are
// compared by firing time only. Records written by an instance that died
// mid-run stay "running" until the job's next run.
//
// Single-document atomicity of updates is assumed, as in package lock.
// MongoDB provides it; FerretDB 1.x does not.
//
// # Records
//
// Every run is logged (job, firing, keeper, fencing token, duration,
// outcome) and persisted: the job document holds the last claim and the last
// run, the runs collection the history (WithHistory). Jobs, History,
// LoadRecords and LoadHistory read them from any instance or tool. All
// writes use write concern majority with journal, so a claim survives a
// failover.
package scheduler
