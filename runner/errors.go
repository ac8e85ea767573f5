package runner

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/errs"
	"github.com/mongolock/mongolock/lock"
)

// Sentinel errors. Check them with errors.Is. Bad arguments (a nil session,
// task, context or collection, a bad lock id) return errors wrapping
// lock.ErrInvalidArgument.
var (
	// ErrInvalidOption reports a bad option passed to New; the message
	// names the option. It matches lock.ErrInvalidOption too.
	ErrInvalidOption error = errs.Kind("runner: invalid option", lock.ErrInvalidOption)

	// ErrTaskDidNotStop reports a task that had not returned a grace period
	// (WithGracePeriod) after its context was cancelled. The runner stopped
	// waiting for it: its goroutine is abandoned and may still be running.
	// Until it returns the runner does not campaign and RunTaskOnLeader
	// returns an error wrapping this one; its lease is not renewed, so the
	// lock expires and another instance may lead. It matches
	// lock.ErrTaskDidNotStop too.
	ErrTaskDidNotStop error = errs.Kind("runner: task did not stop", lock.ErrTaskDidNotStop)

	// ErrStalled is the cause given to a task's context when the task did
	// not call Heartbeat within the stall timeout (WithStallTimeout). The
	// runner gave the term up, so it matches lock.ErrLeaseLost too.
	ErrStalled error = errs.Kind("runner: task stalled", lock.ErrLeaseLost)

	// ErrTaskPanicked is wrapped by the error of the lock.TermEnded event
	// of a term whose task panicked; the panic itself is raised again in
	// the goroutine of Run or RunTaskOnLeader.
	ErrTaskPanicked = errors.New("runner: task panicked")

	// ErrSteppedDown is the cause given to a task's context when its
	// runner steps down while the lease is still good: for a preferred
	// candidate (WithPriority), or because Resign was called while a
	// RunTaskOnLeader task ran. The message says why (for example
	// "preferred candidate k2 (priority 3) waiting"). The lock is released
	// once the task returned; it is not lost, so it does not match
	// lock.ErrLeaseLost.
	ErrSteppedDown = errors.New("runner: stepped down")

	// ErrBusy reports a RunTaskOnLeader or Resign made while Run runs on the
	// same runner, or a Run made while any call is in progress.
	ErrBusy = errors.New("runner: busy")
)

// checkArgs returns an error wrapping lock.ErrInvalidArgument, naming call,
// if ctx is nil or one of colls is: the package's entry points check them
// first, so that a nil argument is an error, never a panic.
func checkArgs(call string, ctx context.Context, colls ...*mongo.Collection) error {
	if ctx == nil {
		return fmt.Errorf("%s: %w: nil context", call, lock.ErrInvalidArgument)
	}
	for _, c := range colls {
		if c == nil {
			return fmt.Errorf("%s: %w: nil collection", call, lock.ErrInvalidArgument)
		}
	}
	return nil
}
