package lock

import "errors"

// Sentinel errors. Check them with errors.Is; returned errors wrap them with
// the lock id and operation.
var (
	// ErrNotHeld reports that a lock is free, expired, or held by another keeper.
	ErrNotHeld = errors.New("lock: not held")

	// ErrLeaseLost is the cause of a Lease's end when it could no longer
	// be trusted: a renewal found it taken over or expired, or none
	// succeeded before the renew deadline. Contexts of work under the lease
	// are cancelled with it, a safety margin before anyone else could take
	// the lock.
	ErrLeaseLost = errors.New("lock: lease lost")

	// ErrNotTrusted reports a lock granted too late to trust: its lease
	// had passed its renew deadline when the answer came (the server or
	// the network was slow). It was released again.
	ErrNotTrusted = errors.New("lock: acquired too late to trust the lease")

	// ErrSessionClosed reports a call on a closed Session, and is the cause
	// of the end of the leases it held.
	ErrSessionClosed = errors.New("lock: session closed")

	// ErrAlreadyHeld reports an acquisition through a Mutex that already
	// holds its lock: a Mutex is not re-entrant.
	ErrAlreadyHeld = errors.New("lock: already held by this mutex")

	// ErrTaskDidNotStop reports work that ignored its cancelled context for
	// a grace period and was abandoned (Session.Do).
	ErrTaskDidNotStop = errors.New("lock: task did not stop after its context was cancelled")

	// ErrInvalidArgument reports a bad lock or keeper id, a nil function,
	// or a nil context; nothing was written.
	ErrInvalidArgument = errors.New("lock: invalid argument")

	// ErrUnsupportedDeployment reports a deployment a Locker refuses to
	// work on, for good: a sharded lock collection.
	ErrUnsupportedDeployment = errors.New("lock: unsupported deployment")

	// ErrInvalidOption reports a bad option passed to New or NewSession.
	ErrInvalidOption = errors.New("lock: invalid option")
)
