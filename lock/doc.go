// Package lock implements leases on MongoDB: pessimistic locks that expire
// unless their holder renews them, with fencing tokens.
//
//	locker, _ := lock.New(db)                 // the store: one collection
//	session, _ := lock.NewSession(locker)     // one per process suffices: keeper id and keep-alive
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
//
// Two Sessions exclude each other as two processes do, whatever their
// keeper ids: two Sessions of one process, two replicas given one
// WithKeeperID, or a process restarted with its old keeper id, which takes
// the leases of its previous run only once they lapse. Each lease carries
// a random token of its Session (tok) that renewals and releases must
// match; the keeper id only names the holder, in Holder, logs and the
// command line, which cannot tell such Sessions apart. A Session refused a
// lock held by another with its keeper id reports it (KeeperIDShared).
//
// Lock ids are any non-empty UTF-8 strings without NUL (ValidateID). The
// module's packages take theirs through the same API, under ids that
// application code must leave alone: "scheduler/" (scheduler's
// DefaultLockPrefix: a job's lock, and presence locks under
// "scheduler/@instance/"), and "mongolock.migrations" (migrations'
// DefaultLockID); another prefix or id where they are set otherwise
// (WithLockPrefix, WithLockID). A lock taken under them makes the job or
// the migrations wait or skip as if another instance held it. They are
// not refused: an operator, or a test, may take one on purpose, and the
// packages are ordinary callers of the same Session API.
//
// # Semaphores
//
// A Semaphore is an n-slot lock (Session.Semaphore, Session.DoSemaphore):
// at most n holders at once, by the server's clock. Each slot is an
// ordinary lock, id SlotID(name, k) = "<name>#<k>" for k below n, so each
// holder has its own lease, fencing token (slot k's tokens only grow;
// tokens of different slots are not comparable), renewal by the Session's
// keep-alive, events and row in Locks. An attempt tries one slot drawn
// from the keeper id, the name and the clock (one round trip when it is
// free); if that one is held it reads the slots' documents and tries
// those free or lapsed. n is at most MaxSlots. Callers should agree on n:
// each tries only the slots below its own, so while they differ at most
// the largest n hold at once, and a caller with a smaller n waits for a
// slot below it. Do not take "<name>#<k>" locks through a Mutex unless
// you mean to take that slot.
//
// Events of everything built on a Session go to its observers
// (WithObserver, AddObserver); logging is one of them (WithSessionSlog for
// log/slog, WithSessionLogger for zerolog). What is built on a Session is
// listed by Components, so that the metrics and health packages cover it
// with one call on the Session. A Tracer
// (WithTracer; the tracing package implements one with OpenTelemetry) gets
// a span for each acquisition, renewal and release, term and run.
//
// The Locker underneath is the store: one document {_id: lockID, kid:
// keeperID, tok: the Session's token, ts: server time of the last acquire
// or renew, at, epoch, seq, ttl} per lock in one collection. Acquiring is one
// write-concern-majority findAndModify upsert keyed on the lock id and
// the holder (keeper id and token): a duplicate-key error means another
// holder has a live lease. The Locker's own methods, which take a keeper
// id, act as that keeper id whatever the token: they are for operators
// and tools, not a second way to hold locks. A lease
// whose time is up by the server's clock is taken over in that same round
// trip, without waiting for MongoDB's TTL monitor. Many locks are taken in
// one bulk write and a read, renewed in one update and released in one
// update: a released lock keeps its document, without kid, until the TTL
// index removes it Retention after its last renewal. Lockers with
// different TTLs may share a collection: a lease lapses its own TTL after
// its last renewal, whoever takes it over.
//
// A document that is not what this module writes (a hand edit, another
// tool's, a damaged one: BadDocument) never keeps a lock from everyone.
// Without a server time (ts missing, or not a date) it is no lease; a ttl
// that is not a whole number of milliseconds up to MaxTTL counts as the
// taker's; a fence that is not one (epoch or seq negative, out of range,
// not a whole number) is written again above whatever can be read of it
// and above the server's time in seconds, so fences still only grow. A
// live lease with a bad fence or keeper still excludes until it lapses.
// Readers (Locks, LocksWithPrefix, LocksPage) skip a bad document and report it,
// with its collection, _id and field (WithBadDocuments; by default a
// warning in the log); Holder returns an error wrapping ErrBadDocument.
//
// Every lease rests on the keep-alive's renewal arriving in time, and a
// mongo.Client's connection pool is shared by all of its commands: a burst
// of the application's own can leave the renewal waiting for a connection
// until every lease is lost. Give the keep-alive a client of its own,
// connected with the same URI and a pool of two:
//
//	ka, _ := mongo.Connect(options.Client().ApplyURI(uri).SetMaxPoolSize(2))
//	locker, _ := lock.New(db, lock.WithKeepAliveDatabase(ka.Database(db.Name())))
//
// # Values and watching
//
// A lease can carry a value of at most MaxValueSize bytes that its holder
// publishes (Lease.SetValue, Locker.SetValue): how to reach the leader,
// say. The write is fenced, so only the lock's current term, live, by its
// holder can write it (ErrStaleTerm otherwise), and every new term and
// every release clears it; it is a second round trip after the
// acquisition, so a reader may see a new term without its value first.
// Holder returns it. Watch follows a lock's holder as it changes, for any
// number of watchers in a process through one reader per lock, which
// polls every WithWatchPeriod (DefaultWatchPeriod, 1s): a change is seen
// at most a period plus a read's round trip after it was stored. It does
// not use change streams, which FerretDB does not have; polling works on
// every deployment this module supports.
//
// # Time
//
// Expiry is judged by the database server's clock only. A Locker estimates
// the server's clock from server times it reads and bounds its error by the
// round trip, so instances' wall clocks may be wrong by any amount. Every
// acquisition returns one; when the estimate is old (WithClockRefresh),
// after a failed command, and when a TopologyWatch saw a new primary, a
// $currentDate write to a clock document in the lock collection reads the
// clock of the node that stamps the leases (behind mongos, hello would
// answer with mongos's own). Only elapsed times of the local clocks are
// used, never their readings. A lease is trusted until its renew deadline,
// measured from the sending of its last successful acquire or renew, which
// passes at least max(MinSafetyMargin, TTL/10) before anyone else can take
// over. The time left is measured on the monotonic clock and on the wall
// clock, and the smaller counts: the monotonic clock Go reads stops while
// the host is suspended (and often while a hypervisor pauses a VM), so a
// lease that lapsed during a suspend would otherwise be trusted after it,
// beside its next holder. A wall clock stepped forward therefore ends
// leases early. On Linux the boot clock (CLOCK_BOOTTIME), which counts
// the time suspended and which steps do not move, is read as well, so a
// suspend is seen even when the wall clock was stepped back across it
// (BootClock). A pause that stops every clock of the host (a VM whose wall
// clock is set right only later) cannot be seen, nor, elsewhere than
// Linux, a suspend that a step back hid. The keep-alive checks at least
// every retry period, so a lease outlasted by a suspend ends (Done) within
// a retry period of the resume; Err and Remaining read the clocks at once.
// Clocks are assumed to run at the same rate within 0.1%, and the clocks of
// the nodes that can become primary to agree within a session's safety
// margin (TTL minus renew deadline) less the time work needs to stop: after
// a failover the new primary stamps leases with its own clock while a
// contender may still use an estimate of the old one's.
//
// # What a lease does not promise
//
// A lease is not a fence. A holder that pauses (GC, swap, SIGSTOP) past its
// deadline may act after another keeper took over, and work that ignores its
// cancelled context cannot be stopped. Every acquisition gets a fencing
// token that strictly increases for a lock id, across releases, expiries,
// failovers and server restarts; a resource that rejects requests carrying
// a token smaller than the largest it has seen is safe even then. The
// token is kept in the lock's document (epoch << 32 + seq: seq +1 per term,
// epoch the server's seconds, never lowered), not taken from the server's
// timestamps, which tie or go backwards on some servers. Tokens of
// different locks are not comparable. Its limits: after the TTL index
// removed a document (no renewal for Retention), a server clock set back by
// more than Retention could repeat a token; tokens of documents written by
// earlier versions are server timestamps, and such a lock is left alone
// until EnsureIndexes converts its document (UpgradeDocuments); and on a
// server without single-document atomicity (FerretDB 1.x without the
// serializing proxy) two takeovers can read the same seq.
//
// The server's clock may be stepped, and then leases promise less. A
// reading that contradicts a Locker's estimate replaces it, but until the
// next reading the Locker works with the old estimate, and leases are
// stamped with whatever the server's clock says. A step forward larger
// than the safety margin ages every lease by the step at once: a contender
// that reads the clock after it can take over a lease its holder still
// trusts, so two hold at once until the holder's deadline. A step back
// larger than the margin lets a contender whose estimate predates it judge
// a live lease lapsed (two holders), and can end a lease early. An
// acquisition refreshes an estimate older than the TTL first (a contender
// refused again and again gets no reading from its refusals), so a
// contender misjudges a step back for at most a TTL after it. Keep the
// clocks of the servers slewed (NTP's slew mode, chrony's makestep
// disabled after boot), not stepped, by more than the safety margin.
//
// # Deployments
//
// Mutual exclusion rests on single-document atomicity of findAndModify,
// update and delete, which MongoDB (replica set, standalone, sharded
// cluster) and FerretDB 2.x provide. Behind mongos the lock collection must
// be unsharded: a sharded one is refused (ErrUnsupportedDeployment), and
// renewals are read back, since a multi-document update can count orphans
// there. FerretDB 2.x answers a colliding findAndModify upsert with an
// InternalError carrying PostgreSQL's unique-violation message, which counts
// as a duplicate key; its PostgreSQL locks the documents of a bulk write in
// the order written and breaks a cycle of such locks by rolling a write back
// ("deadlock detected", code 16908292), which MongoDB never does: AcquireLocks
// writes locks in the order of their ids, so two of its calls never wait for
// each other, and sends a write rolled back for another command's sake again
// a few times before it gives up with that error. FerretDB 2.x runs an
// upsert whose filter is the _id alone as an insert that replaces a
// document a racer inserted meanwhile, so no upsert this module sends is
// keyed on its _id alone (docs/deployments.md lists them): the clock
// document's has the condition that it holds a time. FerretDB 1.x is not atomic (it reads, then writes by
// _id), so two contenders can both take over the same expired lease there;
// this module's tests, and devserver, run it behind a proxy that serializes
// commands. A Locker learns what it talks to once, on first use: a hello,
// then a buildInfo (not behind mongos); FerretDB 1.x reports
// ferretdbVersion there (2.x a ferretdb document instead) and gets one more
// command, {mongolockSerialized: 1}, which the serializing proxy answers
// itself with {ok: 1} and FerretDB refuses. Without that answer the Locker
// logs once, at warning level (WithLogger), that mutual exclusion is not
// guaranteed, and each Session on it reports a DeploymentWarning event. A
// proxy of your own that serializes commands may answer it too. FerretDB
// 1.x has no TTL indexes: EnsureIndexes makes a plain index and warns, and
// Purge deletes what the TTL index would. It stops an unordered bulk write
// at its first failed write, so AcquireLocks spends two more round trips
// there when some lock was held.
package lock
