package scheduler

import (
	"time"
)

// Outcome is how a run ended.
type Outcome string

// Outcomes of a run.
const (
	// OutcomeRunning: the run started and has not been recorded as ended.
	// A run whose instance died stays so until the job's next run.
	OutcomeRunning Outcome = "running"
	// OutcomeSucceeded: the job returned nil.
	OutcomeSucceeded Outcome = "succeeded"
	// OutcomeFailed: the job returned an error or panicked; Run.Error says
	// which.
	OutcomeFailed Outcome = "failed"
)

// Run is one run of a job, as persisted in MongoDB. Start and End are the
// server's times.
type Run struct {
	Job       string
	Keeper    string
	Scheduled time.Time // the firing, computed from the spec
	Start     time.Time
	End       time.Time // zero while running
	Fence     uint64    // fencing token of the job's lease for this run
	Outcome   Outcome
	Error     string
}

// Record is what MongoDB knows of a job, whichever instance wrote it.
type Record struct {
	Name string
	// Spec is the spec of the instance that made the last claim.
	Spec string
	// LastClaimed is the last firing claimed by any instance, and ClaimedBy
	// that instance's keeper id. A claimed firing that did not run (the
	// previous run was still going, or the claimant died) has no Run.
	LastClaimed time.Time
	ClaimedBy   string
	// LastRun is the last run that started, nil if none did.
	LastRun *Run
}

// JobInfo describes a job registered with a Scheduler.
type JobInfo struct {
	Name   string
	Spec   string
	LockID string
	// Next is the next firing this instance will try to claim (zero if the
	// schedule has no further firings).
	Next time.Time
	// LastClaimed, ClaimedBy and LastRun are as in Record, cluster-wide.
	LastClaimed time.Time
	ClaimedBy   string
	LastRun     *Run
}
