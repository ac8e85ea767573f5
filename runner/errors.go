package runner

import (
	"errors"
	"fmt"

	"github.com/mongolock/mongolock/lock"
)

// Sentinel errors. Check them with errors.Is.
var (
	// ErrInvalidOption reports a bad option, or options that disagree, passed
	// to New. The message names the option.
	ErrInvalidOption = errors.New("runner: invalid option")

	// ErrTaskDidNotStop reports a task that had not returned a grace period
	// (WithGracePeriod) after its context was cancelled. The runner stopped
	// waiting for it: its goroutine is abandoned and may still be running.
	// Until it returns the runner does not campaign, and RunTaskOnLeader
	// returns an error wrapping this one.
	ErrTaskDidNotStop = errors.New("runner: task did not stop")

	// ErrStalled is part of the cause given to a task's context when the task
	// did not call Heartbeat within the stall timeout (WithStallTimeout).
	// That cause also matches lock.ErrLeaseLost.
	ErrStalled = errors.New("runner: task stalled")

	// ErrBusy reports a RunTaskOnLeader or Resign made while Run runs on the
	// same runner, or a Run made while any call is in progress.
	ErrBusy = errors.New("runner: busy")
)

// errStalledCause is the cause of a stalled task's context: the runner gave
// the lease up, so it matches both ErrStalled and lock.ErrLeaseLost.
var errStalledCause = fmt.Errorf("%w: %w", ErrStalled, lock.ErrLeaseLost)
