package sim

import (
	"flag"
	"testing"
)

// regressions are seeds that broke a promise while the code was wrong,
// each with what it showed. A seed replays its world (cluster, workload,
// faults) exactly; goroutines that wake at the same instant may run in
// another order, so each is run a few times.
var regressions = []struct {
	seed uint64
	what string
}{
	{51, "two holders of a lock after a suspend: the monotonic clock had stopped (issue 20, finding 6)"},
	{142, "two leaders after a suspend (finding 6)"},
	{83, "two Schedulers on one Session and one jobs collection: the second ran nothing (finding 2)"},
	{209, "two Schedulers on one Session and one jobs collection (finding 2)"},
	{946, "one job's firing waiting for its lock held the only admission slot: other jobs' firings lost"},
	{34, "firings that fell while another instance was up, covered by a claimant started after them, recorded as missed"},
	{8, "firings that fell while another instance was up, recorded as missed"},
	{939, "a start whose reply was lost, its claim taken over before the undo: record left running, no history (TestStartNotRecordedTakenOver)"},
	{76, "two holders of a lock after a suspend that a wall clock step back hid from the wall-versus-monotonic check (TestSuspendHiddenByStepBack)"},
	{670, "an end write failed for twice the op timeout while the database was unreachable: record left running (TestEndRecordedAfterOutage)"},
	{733, "a start applied late, after its claim moved on to a later firing: the firing spent with no record of it (TestStartNotRecordedClaimMovedOn)"},
	{1510, "a record of a firing not run, written late (its write retried through an outage) after the taker of its claim ran the firing, replaced the run's record (TestNotRunRecordKeepsRun)"},
	{266, "leader-only: firings that fell in the leader's own earlier term, recorded as missed after a lease blip"},
	{3917, "a resume of a job no longer paused moved the pause's end: a firing after the first resume recorded as paused (TestResumeOfRunningJobKeepsResumeTime)"},
}

// open are seeds that still break a promise now and then (their replays
// differ in the order of goroutines that wake together): known bugs, not
// yet fixed. Run them with -sim.open.
var open = []struct {
	seed uint64
	what string
}{
	// Once a regression: a firing skipped as the lock was held, by a run
	// whose end record was slow (fixed). Until the release fix, also about
	// 1 replay in 40 (3 in 340): a release retried after a lost reply
	// kept the lock held in its Session, and the next firing there was
	// skipped as "lock held elsewhere" (fixed:
	// TestReleasingLockTakenAgain, TestSlowRecordsDoNotSkipNextFiring).
	{1253, "rare (3 in 1360 replays since the release fixes, none in the last 200): twice a firing with no record at all (once skipped while a catch-up run at Start held the job's lock: its not-run record never landed); once firings skipped as \"lock held elsewhere\", the lock free on the server, behind this instance's own lost lease of a catch-up firing whose start was still being written. Before the release fixes, about 1 replay in 110 (3 in 340); before NoteSince, also firings recorded as missed after a presence lease lapsed (2 in 960)"},
	// Once also: a taker recorded as missed a firing its dead claimant
	// had decided to run late (fixed: TestTakerRunsClaimantsLateFirings),
	// or could not read the presence locks (fixed:
	// TestPresenceUnreadDecidesNothing).
	{1296, "about 1 replay in 250 (2 in 500): a start write of a killed instance, applied after its death, spent a firing that never ran. Until each Scheduler recorded when it came up in its presence lock (lock.Locker.NoteSince), about 1 replay in 25 (24 in 600): a firing an overloaded instance skipped recorded as missed by the next claimant, that instance's presence lease having lapsed and been taken again since (0 in 200 after)"},
}

var openFlag = flag.Bool("sim.open", false, "also run the seeds of known open bugs (TestSimOpen)")

// TestSimOpen replays the seeds of known open bugs, ten times each.
func TestSimOpen(t *testing.T) {
	if !*openFlag {
		t.Skip("the seeds of known open bugs run with -sim.open")
	}
	for _, r := range open {
		failed := 0
		for range 10 {
			if res := runSeed(t, r.seed); res.Failed() {
				failed++
				t.Logf("seed %d (%s): whole trace: %s", r.seed, r.what, saveReport(res))
			}
		}
		if failed > 0 {
			t.Errorf("seed %d broke a promise in %d of 10 replays: %s", r.seed, failed, r.what)
		}
	}
}

func TestSimRegressions(t *testing.T) {
	for _, r := range regressions {
		for range 3 {
			if res := runSeed(t, r.seed); res.Failed() {
				t.Errorf("seed %d (once: %s) broke %d promises; whole trace: %s\n%s",
					r.seed, r.what, len(res.Violations), saveReport(res), res.Report(100))
				break
			}
		}
	}
}
