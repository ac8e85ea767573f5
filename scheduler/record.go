package scheduler

import (
	"time"
)

// Outcome is how a run ended.
type Outcome string

// Outcomes of a run.
const (
	// OutcomeRunning: the run started and has not been recorded as ended.
	// A run whose instance died stays so until the job's next run, which
	// records it as spent (OutcomeSpent).
	OutcomeRunning Outcome = "running"
	// OutcomeSucceeded: the job returned nil.
	OutcomeSucceeded Outcome = "succeeded"
	// OutcomeFailed: the job returned an error or panicked; Run.Error says
	// which.
	OutcomeFailed Outcome = "failed"
	// OutcomeSkipped: a record of firings that were not run, from
	// Scheduled through Through (Count of them); Reason says why.
	OutcomeSkipped Outcome = "skipped"
	// OutcomeSpent: the run's start was recorded, but its instance lost
	// the job's lock without recording an end (it died, froze, or lost
	// the database past its lease); the job's next run, which replaced
	// the job's record of it, recorded it so. Whether the job ran, and
	// how far, is not known; its firing does not run again (at most
	// once). Should its instance record the run after all, its record
	// replaces this one.
	OutcomeSpent Outcome = "spent"
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
	// Attempt is the attempt of the firing this run was (Retry), from 1.
	Attempt int
	// Triggered: the run was asked for by Trigger; Scheduled is when.
	Triggered bool
	// Of a record of firings not run (OutcomeSkipped): the last firing it
	// covers, how many (0 when too many to count), and why (one of the
	// Reason constants).
	Through time.Time
	Count   int
	Reason  string
}

// Pause is how a job was paused.
type Pause struct {
	Note  string
	Until time.Time // zero: until resumed
	At    time.Time // server time of the pause
	// By names who paused it, as the tool that paused it was told (the
	// dashboard's authorisation hook names the operator); empty if it did
	// not say. It is a label, not a proof.
	By string
}

// Record is what MongoDB knows of a job, whichever instance wrote it.
type Record struct {
	Name string
	// Spec is the spec the cluster follows: the one the newest registration
	// gave the job (an instance's Start, or AddJob on a started Scheduler).
	// Instances that registered another do not fire the job (see "One spec
	// per job" in the package documentation). SpecSince is when it became
	// the job's, by the server's clock: zero if no other spec came before.
	Spec      string
	SpecSince time.Time
	// LastClaimed is the last firing claimed by any instance, and ClaimedBy
	// that instance's keeper id. A claimed firing that did not run (the
	// previous run was still going, or the claimant died) has no Run.
	LastClaimed time.Time
	ClaimedBy   string
	// LastRun is the last run that started, nil if none did.
	LastRun *Run
	// Pending: the last claim's work (a firing, or firings missed before
	// it, or a triggered run) has not all started or been recorded as not
	// run yet.
	Pending bool
	// Paused is set while the job is paused (Pause): not from the
	// pause's end (Until) on, by the server's clock, when its firings run
	// again. Removed once it is removed (Remove), Triggered while a
	// Trigger waits to be claimed.
	Paused    *Pause
	Removed   bool
	Triggered time.Time
	// FailedInARow counts the job's failed firings since its last success.
	FailedInARow int
	// Specs are the specs instances registered the job with, one entry a
	// spec, each with the keeper that last registered it (sorted by spec):
	// more than one, with their keepers up, means instances disagree on the
	// job's firings.
	Specs []RegisteredSpec
}

// RegisteredSpec is a spec an instance registered a job with (AddJob), and
// the keeper id of the last instance that registered it.
type RegisteredSpec struct {
	Spec string
	By   string
}

// JobInfo describes a job registered with a Scheduler: what MongoDB knows
// of it, cluster-wide (Record, whose Spec is this instance's), and when
// this instance will next try it.
type JobInfo struct {
	Record
	// Registered is this instance's spec of the job, and Superseded true
	// if it is not the spec the cluster follows (Record.Spec), as this
	// instance's last poll read: then it does not fire the job.
	Registered string
	Superseded bool
	LockID     string
	// Next is the next firing this instance will try to claim (zero if the
	// schedule has no further firings).
	Next time.Time
}
