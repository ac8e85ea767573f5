package scheduler

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
	"go.uber.org/goleak"
)

// TestDecide: the promise's one decision, without a store or a clock. Of
// the firings of a claim's work, those at most the threshold late run;
// the misfires before them run as the policy says, the newest first; a
// pause, a removal or a run still going says otherwise first.
func TestDecide(t *testing.T) {
	at := func(s int) time.Time { return epoch.Add(time.Duration(s) * time.Second) }
	firings := []time.Time{at(10), at(20), at(30), at(40), at(50)}
	now := at(55) // 45s, 35s, 25s, 15s, 5s late
	const threshold = 20 * time.Second
	mis := ReasonMisfired
	for _, tc := range []struct {
		name     string
		policy   MisfirePolicy
		control  controlDoc
		runGoing func(time.Time) bool
		want     []string
		held     bool
	}{
		{"skip", MisfireSkip(), controlDoc{}, nil, []string{mis, mis, mis, "", ""}, false},
		{"latest", MisfireRunLatest(time.Hour), controlDoc{}, nil, []string{mis, mis, "", "", ""}, false},
		{"all", MisfireRunAll(time.Hour, 10), controlDoc{}, nil, []string{"", "", "", "", ""}, false},
		{"the newest two", MisfireRunAll(time.Hour, 2), controlDoc{}, nil, []string{mis, "", "", "", ""}, false},
		// 35s and 45s late: past a 30s window.
		{"window", MisfireRunAll(30*time.Second, 10), controlDoc{}, nil, []string{mis, mis, "", "", ""}, false},
		{"paused between 15s and 35s", MisfireRunAll(time.Hour, 10),
			controlDoc{PausedAt: at(15), ResumedAt: at(35)}, nil, []string{"", ReasonPaused, ReasonPaused, "", ""}, false},
		{"removed", MisfireRunAll(time.Hour, 10), controlDoc{Removed: true},
			nil, []string{ReasonRemoved, ReasonRemoved, ReasonRemoved, ReasonRemoved, ReasonRemoved}, false},
		// The claimed firing is the lock wait's to decide.
		{"previous run going", MisfireRunAll(time.Hour, 10), controlDoc{},
			func(f time.Time) bool { return f.After(at(25)) }, []string{"", "", ReasonRunGoing, ReasonRunGoing, ""}, false},
		// The latest misfire (25s late) fell while the previous run went
		// on: it is the overlap policy's, and the older misfire does not
		// run in its stead (simulation seeds 145, 320: run the latest ran
		// an older one).
		{"latest misfire skipped by the run going", MisfireRunLatest(time.Hour), controlDoc{},
			func(f time.Time) bool { return f.Equal(at(30)) }, []string{mis, mis, ReasonRunGoing, "", ""}, false},
		// So does one the job's pause skipped: the latest misfire was
		// paused, and the older one does not run in its stead (simulation
		// seed 108: run the latest ran a misfire from before a pause).
		{"latest misfire paused", MisfireRunLatest(time.Hour), controlDoc{PausedAt: at(25), ResumedAt: at(35)},
			nil, []string{mis, mis, ReasonPaused, "", ""}, false},
		// A pause now holds the work while firings from before it would
		// run; those after it are paused.
		{"paused now", MisfireSkip(), controlDoc{Paused: true, PausedAt: at(45)}, nil,
			[]string{mis, mis, mis, "", ReasonPaused}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, held := decide(fates{firings: firings, now: now, threshold: threshold, policy: tc.policy,
				control: tc.control, runGoing: tc.runGoing})
			if !slices.Equal(got, tc.want) || held != tc.held {
				t.Errorf("decide = %q held %v, want %q held %v", got, held, tc.want, tc.held)
			}
		})
	}
}

// TestMisfireThreshold: the default threshold is derived from the
// Session's timings, and New refuses one too short for a takeover.
func TestMisfireThreshold(t *testing.T) {
	d := lock.DefaultTimings(30 * time.Second)
	if got, want := MisfireThresholdFor(d, d.RenewInterval, DefaultOpTimeout), 80*time.Second; got != want {
		t.Errorf("MisfireThresholdFor(the defaults) = %v, want %v", got, want)
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) { testMisfireThreshold(t) })
}

func testMisfireThreshold(t *testing.T) {
	r := newRig(t, time.Second)
	if got, want := r.s.MisfireThreshold(), time.Second+3*r.s.pollInterval()+2*DefaultOpTimeout; got != want {
		t.Errorf("MisfireThreshold() = %v, want %v", got, want)
	}
	if _, err := newScheduler(r.store, r.session, mustConfig(t, WithMisfireThreshold(time.Second))); err == nil {
		t.Error("New accepted a misfire threshold of 1s with a 1s TTL")
	}
	if _, err := newScheduler(r.store, r.session, mustConfig(t, WithMisfireThreshold(2*time.Second))); err != nil {
		t.Errorf("New refused a threshold of a TTL and two polls: %v", err)
	}
	r.stop()
}

func mustConfig(t *testing.T, opts ...Option) config {
	t.Helper()
	cfg, err := buildConfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestSetupPendingNamed: a firing due while this instance's previous
// firing of the job still waits for its claim is skipped with a reason
// that says so, not "previous run still going" (nothing runs).
func TestSetupPendingNamed(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second)
		stuck := make(chan struct{})
		r.store.onClaim = func(_ string, f time.Time) {
			if f.Equal(epoch.Add(time.Second)) {
				<-stuck
			}
		}
		_ = r.s.AddJob("j", "@every 1s", func(context.Context) error { return nil })
		_ = r.s.Start()
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		var reasons []string
		for _, e := range r.obs.all(lock.FiringSkipped) {
			if e.Scheduled.Equal(epoch.Add(2 * time.Second)) {
				reasons = append(reasons, e.Reason)
			}
		}
		if !slices.Equal(reasons, []string{ReasonSetupPending}) {
			t.Errorf("firing 2s skipped for %q, want %q", reasons, ReasonSetupPending)
		}
		close(stuck)
		r.stop()
	})
}

// TestResumedInThePausesMillisecond: a job removed (or paused) and resumed
// within one millisecond of the server's clock (its pause's and its
// resume's $currentDate equal) fires again after the resume. It was taken
// for a suspension with no end, and every later firing was recorded
// "removed" for good (simulation seed 468: the operator's remove and
// resume, sent during an election, applied in one millisecond after it).
func TestResumedInThePausesMillisecond(t *testing.T) {
	at := epoch.Add(time.Minute)
	for _, reason := range []string{ReasonRemoved, ReasonPaused} {
		c := controlDoc{Suspended: reason, PausedAt: at, ResumedAt: at}
		for _, f := range []time.Time{at.Add(-time.Second), at, at.Add(time.Second), at.Add(time.Hour)} {
			if got := c.suspendedAt(f, at.Add(2*time.Hour)); got != "" {
				t.Errorf("%s and resumed at %v: firing at %v judged %q, want it run", reason, at.Sub(epoch), f.Sub(epoch), got)
			}
		}
	}
}

// TestPreviousRunBySameClockAsFirings: the previous run a claim found and
// the firings after it are compared by the server's clock, which firings
// fall due by, however far this instance's own clock is off (here its
// claim's reply came 10 minutes behind the server's stamp). A run from
// 12:00:00 to 12:00:08 was going at 12:00:05, past a 2 s lock wait, and
// not at 12:00:07; a spec changed at 12:00:06 leaves the firings from then
// on.
func TestPreviousRunBySameClockAsFirings(t *testing.T) {
	srv := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return srv.Add(time.Duration(s) * time.Second) }
	w := &work{stamped: at(9), got: at(9).Add(-10 * time.Minute),
		prevRun: runDoc{Scheduled: at(0), Start: at(0), End: at(8)}}
	if !w.runGoing(at(5), 2*time.Second) {
		t.Errorf("runGoing(12:00:05): false, want true: the run went on from 12:00:00 to 12:00:08")
	}
	if w.runGoing(at(7), 2*time.Second) {
		t.Errorf("runGoing(12:00:07): true, want false: the run ended within the lock wait")
	}
	if got := w.prevRunSpans(); len(got) != 1 || !got[0].from.Equal(at(0)) || !got[0].to.Equal(at(8)) {
		t.Errorf("prevRunSpans: %v, want [12:00:00, 12:00:08]", got)
	}
}

// TestBacklogKeepsItsRuns: a backlog of firings run one after the other
// keeps, in the job's document, the spans of its earlier runs (Went), so
// that the next claim skips a firing that fell while any one of them went
// on past its lock wait, not only the last (seeds 153 and 323: with the
// last run alone, the firings that fell during the runs before it were
// run, late, or recorded as misfired). A backlog of runs shorter than the
// wait skips nothing: no one run went on past a firing's wait, however
// long the backlog as a whole (TestLeaderOnlyLeaderKilled lost a firing
// so to a union of the backlog's runs).
func TestBacklogKeepsItsRuns(t *testing.T) {
	srv := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return srv.Add(time.Duration(ms) * time.Millisecond) }
	wait := time.Second
	// Runs of 12:00:00, :04 and :07, back to back, the last still going
	// when the next claim was made.
	first := runDoc{Scheduled: at(0), Start: at(0), End: at(8000)}
	second := runDoc{Scheduled: at(4000), Start: at(8010), End: at(14000), Went: first.wentBefore(at(4000), wait)}
	third := runDoc{Scheduled: at(7000), Start: at(14010), Went: second.wentBefore(at(7000), wait)}
	if len(third.Went) != 2 {
		t.Fatalf("the third run keeps %v, want the spans of the two before it", third.Went)
	}
	w := &work{prevRun: third}
	for _, c := range []struct {
		f    time.Time
		want bool
		why  string
	}{
		{at(8500), true, "fell while the second run went on until 12:00:14"},
		{at(6000), true, "fell while the first run went on until 12:00:08"},
		{at(7500), false, "the first run ended within its wait, and the second began after it fell: no one run went on past its wait"},
		{at(13500), false, "the second run ended within its wait; the third's end is not known"},
	} {
		if got := w.runGoing(c.f, wait); got != c.want {
			t.Errorf("runGoing(%s): %v, want %v: %s", c.f.Format("15:04:05.000"), got, c.want, c.why)
		}
	}
	if got := (&runDoc{Start: at(0), End: at(8000)}).wentBefore(at(9000), wait); len(got) != 0 {
		t.Errorf("wentBefore a firing after the run ended: %v, want none: it can skip no later firing", got)
	}
	// A triggered run holds the job's lock as a firing's does: its span
	// is kept, and skips the firings that fell while it went on.
	if got := (&runDoc{Start: at(0), End: at(8000), Trigger: true}).wentBefore(at(5000), wait); len(got) != 1 {
		t.Errorf("wentBefore after a triggered run: %v, want its span", got)
	}

	// A start written whose job was not called (its lease lost) went on
	// not at all (seed 45: its record's span skipped two firings).
	notRun := runDoc{Scheduled: at(0), Start: at(0), End: at(8000), Outcome: string(OutcomeFailed), Error: notRunError + "lease lost"}
	if got := (&work{prevRun: notRun}).runGoing(at(3000), wait); got {
		t.Errorf("runGoing after a start whose job was not called: true, want false")
	}

	// A fast job's backlog: runs of 400ms back to back, from 12:00:00.
	prev := runDoc{}
	for i := range 10 {
		prev = runDoc{Scheduled: at(i * 100), Start: at(i * 400), End: at(i*400 + 390), Went: prev.wentBefore(at(i*100), wait)}
	}
	if got := (&work{prevRun: prev}).runGoing(at(2000), wait); got {
		t.Errorf("runGoing(12:00:02) after a backlog of 400ms runs: true, want false: no run went on past its wait")
	}
	if len(prev.Went) != 0 {
		t.Errorf("a backlog of runs shorter than the wait keeps %v, want none", prev.Went)
	}

	// At most maxWent spans, the newest.
	prev = runDoc{}
	for i := range 3 * maxWent {
		prev = runDoc{Scheduled: at(i * 1000), Start: at(i * 3000), End: at(i*3000 + 2900), Went: prev.wentBefore(at(i*1000), wait)}
	}
	if len(prev.Went) != maxWent || !prev.Went[maxWent-1].From.Equal(at((3*maxWent-2)*3000)) {
		t.Errorf("a long backlog keeps %d spans, the newest from %v; want %d, the newest the run before the last", len(prev.Went), prev.Went[len(prev.Went)-1].From, maxWent)
	}
}

// historyOf returns the history's outcome (and reason, if not run) of each
// firing of job, by its time since epoch.
func historyOf(s *fakeStore, job string) map[time.Duration]string {
	out := map[time.Duration]string{}
	for _, r := range s.runs() {
		if r.Job != job || r.Triggered {
			continue
		}
		what := string(r.Outcome)
		if r.Outcome == OutcomeSkipped {
			what += ": " + r.Reason
		}
		out[r.Scheduled.Sub(epoch)] = what
	}
	return out
}

// TestOwedFiringClaimedOnceIdle: a firing skipped because this instance's
// previous firing of the job still waited for the database is claimed as
// soon as that firing is done, not at the next firing: a job whose period
// is longer than the misfire threshold would otherwise misfire it (sim
// seed 70: a claim made a period late, in a storm). The claim of the
// 10s firing waits 11s; the 20s firing, skipped meanwhile, must run
// within the 5s threshold, not be recorded misfired at 30s.
func TestOwedFiringClaimedOnceIdle(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second, WithMisfireThreshold(5*time.Second), WithOpTimeout(30*time.Second))
		r.store.onClaim = func(_ string, f time.Time) {
			if f.Equal(epoch.Add(10 * time.Second)) {
				time.Sleep(11 * time.Second)
			}
		}
		if err := r.s.AddJob("j", "@every 10s", func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := r.s.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(25 * time.Second)
		r.idle()
		got := historyOf(r.store, "j")
		if got[10*time.Second] != string(OutcomeSucceeded) || got[20*time.Second] != string(OutcomeSucceeded) {
			t.Errorf("history %v: want the 10s and 20s firings run (20s skipped while the 10s one's claim waited, then claimed at once)", got)
		}
		r.stop()
	})
}

// TestBacklogMisfiresAtItsTurn: lateness is judged again when a backlog's
// firing comes to run, not only when its claim was made. A claim covers
// the firings 2s to 5s, all within the 5s threshold; the start of the 2s
// one waits until 12s. Then 3s and 4s are misfires, and so is 5s: the
// policy (run the latest) runs only 5s, and records 3s and 4s misfired,
// rather than run all three late, each pushing the next further past the
// threshold.
func TestBacklogMisfiresAtItsTurn(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second, WithMisfireThreshold(5*time.Second), WithOpTimeout(30*time.Second))
		r.store.onClaim = func(_ string, f time.Time) {
			if f.Equal(epoch.Add(time.Second)) {
				time.Sleep(4500 * time.Millisecond) // until 5.5s: 2s to 5s skipped meanwhile
			}
		}
		r.store.onStart = func(_ context.Context, run Run) (bool, error) {
			if run.Scheduled.Equal(epoch.Add(2 * time.Second)) {
				time.Sleep(12*time.Second - time.Since(epoch))
			}
			return true, nil
		}
		if err := r.s.AddJob("j", "@every 1s", func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := r.s.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(14500 * time.Millisecond)
		r.idle()
		got := historyOf(r.store, "j")
		want := map[time.Duration]string{
			2 * time.Second: string(OutcomeSucceeded),
			3 * time.Second: "skipped: " + ReasonMisfired,
			4 * time.Second: "skipped: " + ReasonMisfired,
			5 * time.Second: string(OutcomeSucceeded),
		}
		for f, w := range want {
			if got[f] != w {
				t.Errorf("firing %v: %q, want %q (history %v)", f, got[f], w, got)
			}
		}
		r.stop()
	})
}

// TestOwnPendingClaimResumedBesideFirings: a claim this instance left
// pending (the database failed its lock) is resumed once a poll interval
// has seen it pending, even though every poll comes while the claim of
// the job's next firing is in flight here: that claim loses while the
// pending one is pending, works on nothing, and must not hold it back
// (sim seed 1000: an @every 1s job's firings fell in the polls'
// milliseconds; its claim stayed pending 6.5s, and the backlog misfired).
func TestOwnPendingClaimResumedBesideFirings(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 3*time.Second, WithPollInterval(time.Second))
		r.store.claimLatency, r.store.pollLatency = 50*time.Millisecond, 10*time.Millisecond
		f1 := epoch.Add(5 * time.Second)
		r.locks.BeforeCall(func(_ context.Context, c locktest.Call) error {
			if now := time.Now(); c.Op == locktest.OpAcquire && jobCall(c) && !now.Before(f1) && now.Before(f1.Add(time.Second)) {
				return errors.New("connection reset")
			}
			return nil
		})
		if err := r.s.AddJob("j", "@every 1s", func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := r.s.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(f1.Add(4*time.Second + 500*time.Millisecond).Sub(time.Now()))
		r.idle()
		if got := historyOf(r.store, "j"); got[5*time.Second] != string(OutcomeSucceeded) {
			t.Errorf("history %v: want the 5s firing, left pending when its lock failed, resumed and run", got)
		}
		r.stop()
	})
}

// TestLateClaimReplyNotResumed: a claim that applied, its reply late past
// a poll interval, is pending, stale and this instance's; but the firing
// still claiming it will work on it, so the poll must not resume it too
// (the claimant would then find its claim's token changed, and report it
// taken over).
func TestLateClaimReplyNotResumed(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 3*time.Second, WithPollInterval(time.Second))
		f1 := epoch.Add(10 * time.Second)
		r.store.onClaim = func(_ string, f time.Time) {
			if f.Equal(f1) {
				time.Sleep(2500 * time.Millisecond) // applied; its reply late
			}
		}
		var resumes atomic.Int32
		r.store.onResume = func(string) { resumes.Add(1) }
		if err := r.s.AddJob("j", "@every 10s", func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := r.s.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(f1.Add(5 * time.Second).Sub(time.Now()))
		r.idle()
		if n := resumes.Load(); n > 0 {
			t.Errorf("%d resumes of a claim whose claimant's reply was merely late", n)
		}
		if got := historyOf(r.store, "j"); got[10*time.Second] != string(OutcomeSucceeded) {
			t.Errorf("history %v: want the 10s firing run by its claimant", got)
		}
		r.stop()
	})
}
