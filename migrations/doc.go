// Package migrations applies versioned changes to a MongoDB database, such
// as index builds at deploy, exactly once and in order, even when several
// instances deploy at the same time.
//
// A Migration has a version, a description, a Definition whose checksum is
// recorded, an Up function and optionally a Down. EnsureIndex and DropIndex
// make index migrations declarative: EnsureIndex creates an index, changes
// expireAfterSeconds or hidden in place with collMod, and refuses to drop
// and re-create an index whose other options differ unless told it may.
// No helper ever drops an index the migration does not name. New registers
// mongolock's own migrations (Builtin: the lock collection's indexes, whose
// TTL index follows the configured lease TTL, and the scheduler's run
// history indexes, whose TTL index follows its retention) beside yours
// (WithMigrations).
//
// # Records
//
// Every attempt is recorded in a collection (DefaultCollection), one
// document per version: description, checksum, state (running, applied,
// failed) and error, keeper id and fencing token of the migrator, server
// times of start and outcome, and duration. Status reports them; Plan says
// what Up would do. A migration recorded as applied whose Definition has
// since changed is reported as changed, and Up refuses to run at all until
// the definition is restored (or the record removed by hand), rather than
// re-running it or running past it. Repeatable migrations are the
// exception: a changed definition makes them pending again.
//
// # Runs
//
// Up and Down hold a lock (package lock, id DefaultLockID) for the whole
// run and renew it halfway to its deadline. Another migrator that finds the
// lock taken waits, polling, until the work is done or the lock is free, up
// to WithWait. A migrator that dies leaves the lock to expire after its TTL;
// the next run repeats the migration it was in the middle of. A failing
// migration stops the run: the failure is recorded (the migration is not
// marked applied), the lock is released, and the error names the version.
// Migrations applied before it in that run stay recorded.
//
// Records are claimed with the lease's fencing token, so a migrator whose
// lease was taken over cannot record over its successor.
//
// # What it does not promise
//
// Up functions are not transactions. A migrator that crashes, or pauses past
// its lease (the lease is not a fence for what Up does), may leave a
// migration half done; the next run repeats it. Write Up functions that can
// run again, as the index helpers are. When the lease can no longer be
// trusted, the context given to Up is cancelled with cause lock.ErrLeaseLost;
// an Up that ignores its context cannot be stopped, and index builds the
// server has started go on regardless.
//
// On FerretDB, TTL indexes and collMod are not implemented: TTL indexes
// become plain indexes with a warning, hidden indexes and partial filters
// fail with ErrNotSupported, and sparse is accepted but ignored by the
// server.
package migrations
