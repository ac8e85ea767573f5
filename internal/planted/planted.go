// Package planted holds the bugs the simulation's oracle must catch
// (internal/sim, TestPlantedBugsCaught): production code asks On at the
// exact place each bug would live, and behaves wrongly while a test has
// planted it. Nothing is planted outside tests; asking costs one atomic
// load.
package planted

import "sync/atomic"

// Bug names one planted bug.
type Bug string

// The bugs, each at the place named in its comment.
const (
	// DropFiring: a firing's job is not called, and the run is recorded
	// as if it had run (scheduler, fire.go attempt).
	DropFiring Bug = "drop a firing silently"
	// RunTwice: a firing another instance claimed is run here too
	// (scheduler, fire.go fire, where the claim found it claimed
	// elsewhere).
	RunTwice Bug = "run a firing on two instances"
	// RecordNotRun: a run is recorded in the history as not run
	// (scheduler, fire.go addHistory).
	RecordNotRun Bug = "record a run as not run"
	// SpentUnstarted: a run recorded as spent is of a firing one second
	// after the displaced run's, which never started (scheduler, fire.go
	// displaced).
	SpentUnstarted Bug = "record a firing that never started as spent"
	// RunMisfire: every misfire a claim covers runs, not the latest only
	// (scheduler, claims.go plan).
	RunMisfire Bug = "run a misfire the policy drops"
	// NoTakeOver: a dead claimant's claim is never taken over
	// (scheduler, claims.go takeOverFrom).
	NoTakeOver Bug = "never take over a dead claimant's claim"
	// TrustExpired: a lease is trusted past its deadline (lock,
	// lease.go Lease.Err).
	TrustExpired Bug = "trust a lease past its deadline"
	// ReleaseOther: a release ends the lock whatever its term and holder
	// (lock, lock.go ReleaseTerms's filter).
	ReleaseOther Bug = "release another term's lock"
	// SmallerFence: a new term writes a smaller fence than the last
	// (lock, lock.go acquireUpdate).
	SmallerFence Bug = "write a smaller fence"
	// MigrateTwice: an applied migration is applied again (migrations,
	// migrator.go pending, and records.go claim, which would otherwise
	// refuse it).
	MigrateTwice Bug = "apply a migration twice"
	// SlotBeyondN: a semaphore tries one slot more than it has (lock,
	// semaphore.go Semaphore.tried).
	SlotBeyondN Bug = "take a semaphore slot beyond n"
	// KeepValue: a new term keeps the value of the term before (lock,
	// lock.go acquireUpdate).
	KeepValue Bug = "keep the last term's value"
	// StaleValue: a value is written whatever the lock's term and holder
	// (lock, value.go setValueAs's filter).
	StaleValue Bug = "write a value into another holder's term"
	// ReleaseUnderTask: a leader lets its lock go as soon as it tells its
	// task to stop, not once the task returned (runner, term.go lead).
	ReleaseUnderTask Bug = "release a leader's lock under its running task"
	// NeverLeadCampaigns: an observer campaigns (runner, runner.go Run
	// and RunTaskOnLeader).
	NeverLeadCampaigns Bug = "a never-lead candidate campaigns"
	// StepDownAtOnce: a leader steps down for a higher-priority candidate
	// as soon as it sees it, without the preference grace (runner,
	// candidates.go preferred).
	StepDownAtOnce Bug = "step down for a preferred candidate at once"
)

// All are the planted bugs, in the order the test plants them.
var All = []Bug{DropFiring, RunTwice, RecordNotRun, SpentUnstarted, RunMisfire, NoTakeOver, TrustExpired, ReleaseOther, SmallerFence, MigrateTwice,
	SlotBeyondN, ReleaseUnderTask, NeverLeadCampaigns, StepDownAtOnce}

// ValueBugs are the bugs of leases' values, planted by the simulation's
// TestValuePlantedBugsCaught in worlds whose leaders publish values: the
// default worlds publish none, so they are not in All.
var ValueBugs = []Bug{KeepValue, StaleValue}

var planted atomic.Pointer[Bug]

// Plant makes b live until undo is called. One bug at a time: planting
// another replaces it.
func Plant(b Bug) (undo func()) {
	planted.Store(&b)
	return func() { planted.CompareAndSwap(&b, nil) }
}

// On reports whether b is planted.
func On(b Bug) bool {
	p := planted.Load()
	return p != nil && *p == b
}
