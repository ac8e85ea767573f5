// Package lock implements leases on MongoDB: pessimistic locks that expire
// unless their holder renews them.
//
// A lock is one document {_id: lockID, kid: keeperID, ts: server time of the
// last acquire or renew, at, fence, ttl} in one collection. Acquiring is one
// write-concern-majority findAndModify upsert keyed on the lock id and the
// keeper id: a duplicate-key error means another keeper holds a live lease.
// A lease whose time is up by the server's clock is taken over in that same
// round trip, without waiting for MongoDB's TTL monitor. AcquireLocks sends
// the same upserts for many locks in one bulk write, then reads which it
// took.
//
// # Time
//
// Expiry is judged by the database server's clock only. A Locker estimates
// the server's clock from server times it reads (every acquisition returns
// one; a hello refreshes it when old) and bounds its error by the round trip,
// so instances' wall clocks may be wrong by any amount. Only elapsed times of
// the local monotonic clock are used. Lease.Deadline tells the holder when to
// stop trusting its lease: it is measured from the sending of the last
// successful acquire or renew, so it passes before anyone else can take over.
// Clocks are assumed to run at the same rate within 0.1%, and the clocks of
// a replica set's members to agree (expiry is judged by whichever is primary).
//
// # What a lease does not promise
//
// A lease is not a fence. A holder that pauses (GC, swap, SIGSTOP) past its
// deadline may act after another keeper took over. Every acquisition returns
// a fencing token that strictly increases for a lock id, across releases and
// expiries; a resource that rejects requests carrying a token smaller than
// the largest it has seen is safe even then. The token is a timestamp the
// server issues ($currentDate with $type timestamp): on MongoDB a cluster-time
// tick, unique and increasing across a replica set. (FerretDB issues it from
// its wall clock and a per-process counter, so a restart within one second
// could issue a smaller one.)
//
// The server's clock may be stepped: a reading that contradicts a Locker's
// estimate replaces it, but until the next reading the Locker works with the
// old estimate, so a step back larger than the safety margins can end a lease
// early. Keep server clocks slewed, not stepped.
//
// Mutual exclusion rests on single-document atomicity of findAndModify,
// update and delete. MongoDB provides it. FerretDB 1.x does not (it reads,
// then writes by _id), so on FerretDB two contenders can both take over the
// same expired lease; its tests here run it behind a proxy that serializes
// commands.
package lock
