package lock

import "errors"

// Sentinel errors. Check them with errors.Is; returned errors wrap them with
// the lock id and operation.
var (
	// ErrNotHeld reports that a lock is free, expired, or held by another keeper.
	ErrNotHeld = errors.New("lock: not held")

	// ErrLeaseLost is the cause given to contexts cancelled because a lease
	// could no longer be trusted. lock itself never cancels anything; the
	// runner and scheduler packages use it.
	ErrLeaseLost = errors.New("lock: lease lost")

	// ErrInvalidArgument reports a bad lock or keeper id; nothing was written.
	ErrInvalidArgument = errors.New("lock: invalid argument")

	// ErrLeaseTooLong reports a lock whose lease outlasts the TTL index that
	// EnsureIndexes would make; see CheckLeasesFit.
	ErrLeaseTooLong = errors.New("lock: lease longer than the TTL index keeps it")

	// ErrInvalidOption reports a bad option passed to New.
	ErrInvalidOption = errors.New("lock: invalid option")
)
