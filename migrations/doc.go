// Package migrations applies versioned changes to a MongoDB database, such
// as index builds at deploy, exactly once and in order, even when several
// instances deploy at the same time.
//
//	m, _ := migrations.New(db,
//		migrations.WithSession(session), // the process's lock.Session
//		migrations.WithMigrations(migrations.EnsureIndex(1, migrations.Index{
//			Collection: "users", Keys: bson.D{{Key: "email", Value: 1}}, Unique: true,
//		})))
//	res, err := m.Up(ctx) // every instance runs it: one applies, the others wait
//
// A Migration has a version, a description, a Definition whose checksum is
// recorded, an Up function and optionally a Down. EnsureIndex and DropIndex
// make index migrations declarative: EnsureIndex creates an index, changes
// expireAfterSeconds or hidden in place with collMod, and refuses to drop
// and re-create an index whose other options differ unless told it may.
// No helper ever drops an index the migration does not name. New registers
// mongolock's own migrations (Builtin: the lock collection's indexes, the
// same whatever TTL the lockers use, and the scheduler's run history
// indexes, whose TTL index follows its retention) beside yours
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
// exception: a changed definition makes them pending again. A record that
// is not what a migrator writes (a hand edit, another tool: a state of
// another type, an _id that is no version) never fails Status: it is an
// entry of its own, StateUnreadable, naming the field (Entry.Bad, a
// lock.BadDocument). Up and Down refuse to run while a registered
// migration's record is unreadable (an error wrapping lock.ErrBadDocument
// that names it): whether it was applied cannot be told, and running it
// could apply it twice. Unreadable records of versions not registered are
// left alone.
//
// # Runs
//
// Up and Down hold a lock (package lock, id DefaultLockID) for the whole
// run, taken through a lock.Session: the one given with WithSession, whose
// keeper id the records carry, or else one that each call makes for itself
// on the lock collection and closes before it returns. Two calls exclude
// each other whether they are in two processes or on one Migrator. The
// Session's keep-alive renews the lease. A migrator that finds the lock
// taken waits, polling with pauses that grow up to the retry period, until
// the work is done or the lock is free, up to WithWait. A migrator that
// dies leaves the lock to expire after its TTL; the next run repeats the
// migration it was in the middle of. A failing migration stops the run:
// the failure is recorded (the migration is not marked applied), the lock
// is released, and the error names the version. Migrations applied before
// it in that run stay recorded.
//
// Records are claimed with the lease's fencing token, so a migrator whose
// lease was taken over cannot record over its successor. They are read
// from the primary, whatever the client's read preference, and so are the
// indexes the helpers compare: a lagging secondary would show an applied
// migration as pending. Your Up functions get the database as you gave it;
// read the primary there too for anything that decides what to change.
//
// # Events
//
// A migrator reports to the observers of its Session (lock.WithObserver;
// or WithObserver and WithLogger for the Sessions it makes itself), once
// each: lock.MigrationApplied for a migration applied or, Reason "down",
// rolled back, with how long it ran; lock.MigrationFailed for one that
// failed, with the error; lock.MigrationWaited when a wait for another
// migrator's lock ended, with how long it lasted, and Err if it ended the
// call. Event.Migration names the migration ("3 add index"), Fence is the
// lease's. The Session reports the lock's own events. Migrations log to
// the logger of the context given to Up and Down (zerolog.Ctx), as the
// built-in ones and the index helpers do their warnings.
//
// # What it does not promise
//
// Up functions are not transactions. A migrator that crashes, or pauses past
// its lease (the lease is not a fence for what Up does), may leave a
// migration half done; the next run repeats it. Write Up functions that can
// run again, as the index helpers are. When the Session stops trusting the
// lease, a safety margin before another migrator could take the lock over,
// the context given to Up is cancelled with cause lock.ErrLeaseLost; an Up
// that ignores its context cannot be stopped, and index builds the server
// has started go on regardless.
//
// # Backends
//
// On FerretDB 1.x, TTL indexes and collMod are not implemented: TTL
// indexes become plain indexes with a warning, hidden indexes and partial
// filters fail with ErrUnsupported, and sparse is accepted but ignored by
// the server. FerretDB 2.x has no hidden indexes either (ErrUnsupported:
// it answers with an InternalError saying so), and reports a duplicate key
// in its own way, which the claims of records recognise. A step that fails
// with ErrUnsupported changed nothing. MongoDB 4.4 and 5.0, and FerretDB
// 2.x, cannot make an existing plain index a TTL index with collMod (MongoDB
// can from 5.1 on): told by the server's buildInfo, EnsureIndex drops and
// re-creates it if Index.AllowRebuild allows, and otherwise fails with
// ErrIndexConflict, naming the server, before it changed anything.
package migrations
