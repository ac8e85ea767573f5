// Package lock implements leases on MongoDB: pessimistic locks that expire
// unless their holder renews them, with fencing tokens.
//
//	locker, _ := lock.New(db)                 // the store: one collection
//	session, _ := lock.NewSession(locker)     // one per process: keeper id and keep-alive
//	defer session.Close()                     // releases everything still held
//	err := session.Do(ctx, "nightly-report", func(ctx context.Context) error {
//		fence, _ := lock.FenceFrom(ctx) // pass it to what you write to
//		return report(ctx, fence)       // stop when ctx is cancelled
//	})
//
// # Sessions, mutexes and leases
//
// A Session owns a keeper id and the one keep-alive: every lease it holds
// is renewed in one round trip per renew interval, and a lease that cannot
// be renewed ends (Lease.Done, cause ErrLeaseLost) a safety margin before
// anyone else could take its lock over. Take locks through a Session:
// Do runs a function under a lock; a Mutex is a handle on one lock, with
// Lock (wait), AcquireLock (one attempt) and ReleaseLock; AcquireLocks and
// ReleaseLocks take and release many at once. A Mutex is not re-entrant:
// two Mutexes on one lock exclude each other even in one Session. The
// runner, scheduler and migrations packages take their locks through a
// Session too, so one Session per process keeps all of its leases alive.
// Events of everything built on a Session go to its observers
// (WithObserver); logging is one of them (WithSessionLogger).
//
// The Locker underneath is the store: one document {_id: lockID, kid:
// keeperID, ts: server time of the last acquire or renew, at, fence, ttl}
// per lock in one collection. Acquiring is one write-concern-majority
// findAndModify upsert keyed on the lock id and the keeper id: a
// duplicate-key error means another keeper holds a live lease. A lease
// whose time is up by the server's clock is taken over in that same round
// trip, without waiting for MongoDB's TTL monitor. Many locks are taken in
// one bulk write and a read, renewed in one update and released in one
// delete.
//
// # Time
//
// Expiry is judged by the database server's clock only. A Locker estimates
// the server's clock from server times it reads (every acquisition returns
// one; a hello refreshes it when old) and bounds its error by the round trip,
// so instances' wall clocks may be wrong by any amount. Only elapsed times of
// the local monotonic clock are used. A lease is trusted until its renew
// deadline, measured from the sending of its last successful acquire or
// renew, which passes at least max(MinSafetyMargin, TTL/10) before anyone
// else can take over. Clocks are assumed to run at the same rate within
// 0.1%, and the clocks of a replica set's members to agree (expiry is judged
// by whichever is primary).
//
// # What a lease does not promise
//
// A lease is not a fence. A holder that pauses (GC, swap, SIGSTOP) past its
// deadline may act after another keeper took over, and work that ignores its
// cancelled context cannot be stopped. Every acquisition gets a fencing
// token that strictly increases for a lock id, across releases and
// expiries; a resource that rejects requests carrying a token smaller than
// the largest it has seen is safe even then. The token is a timestamp the
// server issues ($currentDate with $type timestamp): on MongoDB a
// cluster-time tick, unique and increasing across a replica set.
//
// The server's clock may be stepped: a reading that contradicts a Locker's
// estimate replaces it, but until the next reading the Locker works with the
// old estimate, so a step back larger than the safety margins can end a lease
// early. Keep server clocks slewed, not stepped.
//
// # Backends
//
// Mutual exclusion rests on single-document atomicity of findAndModify,
// update and delete, which MongoDB provides. FerretDB 1.x does not (it
// reads, then writes by _id), so two contenders can both take over the same
// expired lease there; this module's tests run it behind a proxy that
// serializes commands. FerretDB issues fencing tokens from its wall clock and
// a per-process counter, so a restart within one second could issue a
// smaller one. It has no TTL indexes: EnsureIndexes makes a plain index and
// warns, and Purge deletes expired leases. It stops an unordered bulk write
// at its first failed write, so AcquireLocks spends two more round trips
// there when some lock was held.
package lock
