package scheduler

import (
	"errors"

	"github.com/mongolock/mongolock/internal/errs"
	"github.com/mongolock/mongolock/lock"
)

// Sentinel errors. Check them with errors.Is; returned errors wrap them with
// context.
var (
	// ErrInvalidOption reports a bad option or argument passed to New,
	// AddJob or PauseJob. It also matches lock.ErrInvalidOption.
	ErrInvalidOption error = errs.Kind("scheduler: invalid option", lock.ErrInvalidOption)

	// ErrInvalidJob reports a job AddJob cannot accept: an empty name, a
	// name that makes no valid lock id, or a nil function. It also matches
	// lock.ErrInvalidArgument.
	ErrInvalidJob error = errs.Kind("scheduler: invalid job", lock.ErrInvalidArgument)

	// ErrDuplicateJob reports a job name that is already registered.
	ErrDuplicateJob = errors.New("scheduler: duplicate job")

	// ErrInvalidSpec reports a cron spec that does not parse or never fires.
	ErrInvalidSpec = errors.New("scheduler: invalid spec")

	// ErrUnknownJob reports a job name that is not registered, or, from
	// PauseJob, ResumeJob, TriggerJob and RemoveJob, that has no document
	// in the jobs collection.
	ErrUnknownJob = errors.New("scheduler: unknown job")

	// ErrJobRemoved reports a trigger of a job that was removed (RemoveJob).
	ErrJobRemoved = errors.New("scheduler: job removed")

	// ErrStarted reports a second call to Start.
	ErrStarted = errors.New("scheduler: already started")

	// ErrStopped reports a call on a stopped Scheduler. It is also the cause
	// given to the context of a job cancelled by Stop.
	ErrStopped = errors.New("scheduler: stopped")

	// ErrJobTimeout is the cause given to the context of a job that ran
	// longer than its JobTimeout.
	ErrJobTimeout = errors.New("scheduler: job timed out")

	// ErrOverlapCancelled is the cause given to the context of a run
	// cancelled because a later firing of an OverlapCancel job waits for
	// its lock.
	ErrOverlapCancelled = errors.New("scheduler: cancelled by a later firing")

	// ErrPanic is wrapped by the error recorded for a job that panicked.
	ErrPanic = errors.New("scheduler: job panicked")
)
