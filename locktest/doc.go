// Package locktest is an in-memory lock.Store for tests: Sessions,
// Mutexes, runners, scheduled jobs and migrations take their locks from it
// as from a *lock.Locker, without a database, on a clock the test controls.
//
//	clk := clockwork.NewFakeClock()
//	store := locktest.New(locktest.WithClock(clk)) // TTL 30s: renew every 10s, trust 20s
//	session, _ := lock.NewSession(store)
//	defer session.Close()
//	// ... the code under test takes its locks through session ...
//	store.Fail(locktest.OpRenew, locktest.Always, nil) // the database goes away
//	// ... move clk past the renew deadline: leases end with lock.ErrLeaseLost
//
// The scheduler and the migrator keep their own records in MongoDB: give
// them a database (devserver.ForTest starts one in the test's process)
// and a Session on a Store, and the test controls the lock side.
//
// # Contract
//
// A Store keeps the contract of *lock.Locker (lock.Store and the Locker's
// methods): a lock is taken if it is free, released, already the caller's
// or expired, each time as a new term with a larger fencing token; Renew
// extends live leases, reports the others lost and re-creates none;
// ReleaseTerms with a fencing token releases only that term; Holder reports
// free, released and expired locks with lock.ErrNotHeld, describing the
// last term of the latter two. RunConformance checks a Store and the
// Locker against the same suite. The differences are of degree: expiry is
// judged by the Store's clock, which is also its "server" time (Holder's
// times are its instants); every lease lasts the Store's TTL; a lease is
// live until, and not at, its last acquisition or renewal plus the TTL;
// fencing tokens count 1, 2, 3... per lock id.
//
// # Faults and levers
//
// Fail and FailAfter make calls fail before or after they take effect (a
// write refused; a write whose reply was lost). Delay makes calls slow,
// Pause makes them hang until Resume or until their context ends. Expire
// ends a lease as if its TTL had passed, TakeOver hands a lock to another
// keeper, ForceRelease frees it, HeldBy tells who holds it. BeforeCall and
// AfterCall hook every call, and Calls lists them.
//
// # Time
//
// With a *clockwork.FakeClock, advance it only while the code under test
// waits on it (clockwork's BlockUntilContext, or events it reports to a
// Session observer), as the examples do. Inside a testing/synctest bubble
// the default clock, the real one, reads the bubble's time, which moves
// exactly when every goroutine waits: there the test only sleeps.
//
// It is not a lock for production: it excludes only within one process.
// New panics on an invalid option, as httptest.NewServer does on a
// failure: it is for tests, where a panic is a failure with a stack.
package locktest
