package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
)

// The tests of claims.go: catch-up, pause, remove, trigger, retries,
// overlap and takeover, on the fake store in a synctest bubble. Clocks
// are shared in the bubble, so there is no skew here: the tests against
// a server (integration) cover it.

// twin is one instance of a cluster of Schedulers that share a fake store
// and a lock store, each with its own Session and keeper id.
type twin struct {
	keeper  string
	s       *Scheduler
	session *lock.Session
	obs     *recorder
	st      *twinStore
}

// twinStore is a twin's view of the shared fakeStore, with hooks of its
// own around claims.
type twinStore struct {
	*fakeStore
	hooks sync.Mutex
	// beforeClaim, if set, is called before each claim (it may sleep: a
	// slower instance); afterClaim after each claim won (it may block: an
	// instance stalled between its claim and its start).
	beforeClaim func(job string, f time.Time)
	afterClaim  func(job string, f time.Time)
	// failClaim, if set, fails the claims it returns an error for,
	// unapplied.
	failClaim func(job string, f time.Time) error
}

func (s *twinStore) claim(ctx context.Context, job, spec string, f time.Time, keeper string, catchUp bool) (*work, error) {
	s.hooks.Lock()
	before, after, fail := s.beforeClaim, s.afterClaim, s.failClaim
	s.hooks.Unlock()
	if before != nil {
		before(job, f)
	}
	if fail != nil {
		if err := fail(job, f); err != nil {
			return nil, err
		}
	}
	w, err := s.fakeStore.claim(ctx, job, spec, f, keeper, catchUp)
	if w != nil && after != nil {
		after(job, f)
	}
	return w, err
}

// claimTrigger has claim's hooks, f the trigger's time.
func (s *twinStore) claimTrigger(ctx context.Context, job string, t time.Time, keeper string) (*work, error) {
	s.hooks.Lock()
	before, after := s.beforeClaim, s.afterClaim
	s.hooks.Unlock()
	if before != nil {
		before(job, t)
	}
	w, err := s.fakeStore.claimTrigger(ctx, job, t, keeper)
	if w != nil && after != nil {
		after(job, t)
	}
	return w, err
}

// newTwin makes an instance on locks and store, keeper id keeper, at the
// start of the current synctest bubble. It is stopped, and its Session
// closed, when the test ends.
func newTwin(t *testing.T, locks *locktest.Store, store *fakeStore, keeper string, opts ...Option) *twin {
	t.Helper()
	return newTwinOn(t, locks, store, keeper, opts...)
}

// newTwinOn is newTwin on a lock store of the test's (wrapping the
// cluster's locktest.Store).
func newTwinOn(t *testing.T, locks lock.Store, store *fakeStore, keeper string, opts ...Option) *twin {
	t.Helper()
	tw := &twin{keeper: keeper, obs: newRecorder(), st: &twinStore{fakeStore: store}}
	var err error
	tw.session, err = lock.NewSession(locks, lock.WithKeeperID(keeper), lock.WithObserver(tw.obs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tw.session.Close() })
	cfg, err := buildConfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	if tw.s, err = newScheduler(tw.st, tw.session, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = tw.s.Stop(ctx)
	})
	return tw
}

// slowClaims makes tw claim a moment (1ms) after the others when lose
// says so: those claims lose to the other instances'.
func (tw *twin) slowClaims(lose func(f time.Time) bool) {
	tw.st.hooks.Lock()
	defer tw.st.hooks.Unlock()
	tw.st.beforeClaim = func(_ string, f time.Time) {
		if lose(f) {
			time.Sleep(time.Millisecond)
		}
	}
}

// failClaimsBefore makes tw's claims of firings before f fail (errBoom).
func (tw *twin) failClaimsBefore(f time.Time) {
	tw.st.hooks.Lock()
	defer tw.st.hooks.Unlock()
	tw.st.failClaim = func(_ string, at time.Time) error {
		if at.Before(f) {
			return errBoom
		}
		return nil
	}
}

// next waits, letting time pass, for tw's next event of one of kinds.
func (tw *twin) next(t *testing.T, kinds ...lock.EventKind) lock.Event {
	t.Helper()
	timeout := time.After(10 * time.Minute)
	for {
		select {
		case e := <-tw.obs.c:
			if slices.Contains(kinds, e.Kind) {
				return e
			}
		case <-timeout:
			t.Fatalf("%s: no %v event within 10 minutes", tw.keeper, kinds)
		}
	}
}

// events returns tw's events of kind for job j's firing f.
func (tw *twin) events(kind lock.EventKind, f time.Time) []lock.Event {
	var out []lock.Event
	for _, e := range tw.obs.all(kind) {
		if e.Scheduled.Equal(f) {
			out = append(out, e)
		}
	}
	return out
}

// ranRun is a call of a job, as the job saw it.
type ranRun struct {
	Run
	began, ended time.Time
	cause        error // of the job's context, if it ended so
}

// runLog records every call of the jobs it wraps, whichever instance
// makes it, and whether two ever overlapped.
type runLog struct {
	mu      sync.Mutex
	runs    []ranRun
	active  int
	overlap []string
	c       chan Run // each call's Run, as it begins
}

func newRunLog() *runLog { return &runLog{c: make(chan Run, 1000)} }

// job returns a job that runs body, and records the call.
func (l *runLog) job(body func(ctx context.Context, r Run) error) func(context.Context) error {
	return func(ctx context.Context) error {
		r, _ := RunFromContext(ctx)
		l.mu.Lock()
		l.active++
		if l.active > 1 {
			l.overlap = append(l.overlap, fmt.Sprintf("%s's run of %v began while another ran", r.Keeper, r.Scheduled.Sub(epoch)))
		}
		i := len(l.runs)
		l.runs = append(l.runs, ranRun{Run: r, began: time.Now()})
		l.mu.Unlock()
		l.c <- r
		var err error
		if body != nil {
			err = body(ctx, r)
		}
		l.mu.Lock()
		l.active--
		l.runs[i].ended = time.Now()
		l.runs[i].cause = context.Cause(ctx)
		l.mu.Unlock()
		return err
	}
}

func (l *runLog) all() []ranRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.runs)
}

// scheduled returns the firings of the calls so far, as offsets from the
// epoch, "T" marking a triggered run.
func (l *runLog) scheduled() []string {
	var out []string
	for _, r := range l.all() {
		s := r.Scheduled.Sub(epoch).String()
		if r.Triggered {
			s = "T" + s
		}
		out = append(out, s)
	}
	return out
}

// checkNoOverlap fails t if two calls ever ran at once.
func (l *runLog) checkNoOverlap(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.overlap) > 0 {
		t.Errorf("runs overlapped: %v", l.overlap)
	}
}

// hist describes a history record for comparisons: "ran 10s", "ran 10s
// #2 failed", "skipped 10s..30s x3: <reason>".
func hist(r Run) string {
	off := func(t time.Time) string { return t.Sub(epoch).String() }
	if r.Outcome == OutcomeSkipped {
		return fmt.Sprintf("skipped %s: %s", off(r.Scheduled), r.Reason)
	}
	s := "ran " + off(r.Scheduled)
	if r.Triggered {
		s = "ran T" + off(r.Scheduled)
	}
	if r.Attempt > 1 {
		s += fmt.Sprintf(" #%d", r.Attempt)
	}
	if r.Outcome != OutcomeSucceeded {
		s += " " + string(r.Outcome)
	}
	return s
}

func hists(runs []Run) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = hist(r)
	}
	return out
}

// sleepUntil lets the bubble's time pass until at.
func sleepUntil(at time.Time) { time.Sleep(time.Until(at)) }

// docOf returns a copy of job's document in s.
func (s *fakeStore) docOf(job string) jobDoc {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.docs[job]; d != nil {
		return *d
	}
	return jobDoc{}
}

// TestMisfiresAfterOutage: the job last ran at F0; every instance was
// down for the five firings after it; then one instance starts, 3s after
// the last of them, with a misfire threshold of 2s: the five are misfires.
// Each misfire policy runs exactly the misfires it promises, each once,
// oldest first, and records each of the others as not run (one record a
// firing, ReasonMisfired); the next firing runs as usual. A job never
// claimed before has missed nothing. With a threshold of 5s the latest
// firing, 3s late, is not a misfire: it runs whatever the policy.
func TestMisfiresAfterOutage(t *testing.T) {
	const period = 10 * time.Second
	// f(0) ran; f(1)..f(5) were missed, f(5) at the epoch; f(6) is the
	// first firing after the start.
	f := func(i int) time.Time { return epoch.Add(time.Duration(i-5) * period) }
	off := func(i int) string { return f(i).Sub(epoch).String() }
	ran := func(i int) []string { return []string{"ran " + off(i)} }
	skipped := func(from, through int, reason string) []string {
		var out []string
		for i := from; i <= through; i++ {
			out = append(out, fmt.Sprintf("skipped %s: %s", off(i), reason))
		}
		return out
	}
	cat := func(parts ...[]string) []string { return slices.Concat(parts...) }
	threshold := WithMisfireThreshold(2 * time.Second)
	startAt := epoch.Add(3 * time.Second)
	for _, tc := range []struct {
		name    string
		opts    []Option
		jopts   []JobOption
		seed    string // "ran": claimed and ran at F0; "registered": a document, never claimed; "": none
		atStart []int  // the firings run at Start, in order
		hist    []string
	}{
		{"skip", []Option{threshold, WithMisfirePolicy(MisfireSkip())}, nil, "ran", nil,
			cat(skipped(1, 5, ReasonMisfired), ran(6))},
		{"latest, the default", []Option{threshold}, nil, "ran", []int{5},
			cat(skipped(1, 4, ReasonMisfired), ran(5), ran(6))},
		{"all", []Option{threshold, WithMisfirePolicy(MisfireRunAll(time.Hour, 10))}, nil, "ran", []int{1, 2, 3, 4, 5},
			cat(ran(1), ran(2), ran(3), ran(4), ran(5), ran(6))},
		{"all, exactly as many as missed", []Option{threshold, WithMisfirePolicy(MisfireRunAll(time.Hour, 5))}, nil, "ran", []int{1, 2, 3, 4, 5},
			cat(ran(1), ran(2), ran(3), ran(4), ran(5), ran(6))},
		{"the newest two", []Option{threshold, WithMisfirePolicy(MisfireRunAll(time.Hour, 2))}, nil, "ran", []int{4, 5},
			cat(skipped(1, 3, ReasonMisfired), ran(4), ran(5), ran(6))},
		{"the job's policy over the scheduler's", []Option{threshold, WithMisfirePolicy(MisfireSkip())},
			[]JobOption{JobMisfirePolicy(MisfireRunAll(time.Hour, 2))}, "ran", []int{4, 5},
			cat(skipped(1, 3, ReasonMisfired), ran(4), ran(5), ran(6))},
		// At the start (3s), f(1) is 43s old and f(2) 33s: out of a 25s
		// window; f(3), 23s old, is in it.
		{"window", []Option{threshold, WithMisfirePolicy(MisfireRunAll(25*time.Second, 10))}, nil, "ran", []int{3, 4, 5},
			cat(skipped(1, 2, ReasonMisfired), ran(3), ran(4), ran(5), ran(6))},
		// The latest missed firing is 3s old at the start: out of a 2s
		// window and the threshold, so Start claims nothing, and the next
		// claim records them all.
		{"window passed for the latest", []Option{threshold, WithMisfirePolicy(MisfireRunLatest(2 * time.Second))}, nil, "ran", nil,
			cat(skipped(1, 5, ReasonMisfired), ran(6))},
		// f(5), 3s late, is within a 5s threshold: it runs, and the
		// policy (skip) drops the misfires before it.
		{"within the threshold", []Option{WithMisfireThreshold(5 * time.Second), WithMisfirePolicy(MisfireSkip())}, nil, "ran", []int{5},
			cat(skipped(1, 4, ReasonMisfired), ran(5), ran(6))},
		{"never claimed: registered", []Option{threshold, WithMisfirePolicy(MisfireRunAll(time.Hour, 10))}, nil, "registered", nil,
			ran(6)},
		{"never claimed: no document", []Option{threshold}, nil, "", nil, ran(6)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, time.Second, tc.opts...)
				switch tc.seed {
				case "ran":
					d := r.store.doc("j")
					d.Last, d.Done, d.By, d.At = f(0), f(0), "gone", f(0)
					d.Run = runDoc{Keeper: "gone", Scheduled: f(0), Start: f(0), End: f(0), Outcome: string(OutcomeSucceeded)}
				case "registered":
					r.store.doc("j")
				}
				log := newRunLog()
				if err := r.s.AddJob("j", "@every 10s", log.job(nil), tc.jopts...); err != nil {
					t.Fatal(err)
				}
				sleepUntil(startAt)
				if err := r.s.Start(); err != nil {
					t.Fatal(err)
				}
				r.idle()
				var want []string
				for _, i := range tc.atStart {
					want = append(want, off(i))
				}
				if got := log.scheduled(); !slices.Equal(got, want) {
					t.Fatalf("ran %v at the start, want %v", got, want)
				}
				for _, run := range log.all() {
					if !run.began.Equal(startAt) {
						t.Errorf("missed firing %v ran at %v, want at the start", run.Scheduled.Sub(epoch), run.began.Sub(epoch))
					}
				}
				if lost := r.obs.all(lock.FiringLost); len(lost) > 0 {
					t.Errorf("catch-up claims reported lost: %+v", lost)
				}
				sleepUntil(f(6).Add(time.Second))
				r.idle()
				if got, want := log.scheduled(), append(want, off(6)); !slices.Equal(got, want) {
					t.Fatalf("ran %v, want %v", got, want)
				}
				if runs := log.all(); !runs[len(runs)-1].began.Equal(f(6)) {
					t.Errorf("the next firing ran at %v, want on time", runs[len(runs)-1].began.Sub(epoch))
				}
				runs := r.store.runs()
				if got := hists(runs); !slices.Equal(got, tc.hist) {
					t.Fatalf("history\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.hist, "\n"))
				}
				// Each record of firings not run has its event, and only
				// those firings are reported skipped.
				var wantSkips []string
				for _, run := range runs {
					if run.Outcome == OutcomeSkipped {
						wantSkips = append(wantSkips, run.Scheduled.Sub(epoch).String()+" "+run.Reason)
					}
				}
				var gotSkips []string
				for _, e := range r.obs.all(lock.FiringSkipped) {
					reason, _, _ := strings.Cut(e.Reason, ":")
					gotSkips = append(gotSkips, e.Scheduled.Sub(epoch).String()+" "+reason)
				}
				for i := range wantSkips {
					wantSkips[i], _, _ = strings.Cut(wantSkips[i], ":")
				}
				if !slices.Equal(gotSkips, wantSkips) {
					t.Errorf("skipped events %v, want %v", gotSkips, wantSkips)
				}
				if d := r.store.docOf("j"); !d.Last.Equal(f(6)) || !d.Done.Equal(f(6)) || d.Pending {
					t.Errorf("document: last %v done %v pending %v, want all settled at %v",
						d.Last.Sub(epoch), d.Done.Sub(epoch), d.Pending, f(6).Sub(epoch))
				}
				r.stop()
			})
		})
	}
}

// TestMisfiresAfterLongOutage: after an outage of more firings than plan
// looks at one by one (maxEnumerated), the firings within the threshold
// and the latest misfire run, and the newest MaxRecorded misfires before
// them each have a record (ReasonMisfired), consecutive, the oldest saying
// that older ones were not recorded.
func TestMisfiresAfterLongOutage(t *testing.T) {
	for _, window := range []time.Duration{DefaultMisfireWindow, 3 * DefaultMisfireWindow} {
		t.Run(window.String(), func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, time.Second, WithMisfireThreshold(2*time.Second), WithMisfirePolicy(MisfireRunLatest(window)))
				const period = time.Second
				f0 := epoch.Add(-2 * DefaultMisfireWindow) // 172 800 firings ago
				d := r.store.doc("j")
				d.Last, d.Done, d.By, d.At = f0, f0, "gone", f0
				log := newRunLog()
				_ = r.s.AddJob("j", "@every 1s", log.job(nil))
				time.Sleep(500 * time.Millisecond)
				_ = r.s.Start()
				r.idle()
				// At 0.5s: 0s and -1s are within the threshold, -2s is the
				// latest misfire.
				if got := log.scheduled(); !slices.Equal(got, []string{"-2s", "-1s", "0s"}) {
					t.Fatalf("ran %v at the start, want the firings within the threshold and the latest misfire", got)
				}
				var skipped []Run
				for _, run := range r.store.runs() {
					if run.Outcome == OutcomeSkipped {
						skipped = append(skipped, run)
					}
				}
				if len(skipped) != MaxRecorded {
					t.Fatalf("%d records of firings not run, want %d", len(skipped), MaxRecorded)
				}
				next := epoch.Add(-time.Duration(MaxRecorded+2) * period)
				for i, run := range skipped {
					if !run.Scheduled.Equal(next) || !strings.HasPrefix(run.Reason, ReasonMisfired) ||
						(i == 0) != strings.Contains(run.Reason, "earlier firings, not recorded") {
						t.Errorf("record %d %s: want firing %v misfired", i, hist(run), next.Sub(epoch))
					}
					next = next.Add(period)
				}
				r.stop()
			})
		})
	}
}

// TestPauseSkipsFirings: while paused, each firing is claimed and recorded
// as not run (ReasonPaused) and the job is not called; once resumed it
// runs again from its next firing, without catching up the paused ones.
// A pause with an end runs again from the first firing at or after it; a
// pause whose end has passed pauses nothing.
func TestPauseSkipsFirings(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r, log, at := jobRig(t, nil)
		r.ctl(r.s.Pause(context.Background(), "j", Pause{Note: "maintenance"}))
		_ = r.s.Start()

		sleepUntil(at(25))
		r.idle()
		if got := log.scheduled(); len(got) != 0 {
			t.Fatalf("ran %v while paused", got)
		}
		if c := r.store.lastClaim("j"); !c.Equal(at(20)) {
			t.Errorf("last claim %v, want the paused firings claimed", c.Sub(epoch))
		}
		if n := len(r.obs.all(lock.FiringClaimed)); n != 2 {
			t.Errorf("%d claims, want 2", n)
		}
		for _, s := range []int{10, 20} {
			if e := (&twin{obs: r.obs}).events(lock.FiringSkipped, at(s)); len(e) != 1 || e[0].Reason != ReasonPaused {
				t.Errorf("firing %ds: skipped events %+v, want one: %s", s, e, ReasonPaused)
			}
		}

		r.ctl(r.s.Resume(context.Background(), "j"))
		sleepUntil(at(35))
		r.idle()
		// Paused until 50s: 40s is not run, 50s is.
		r.ctl(r.s.Pause(context.Background(), "j", Pause{Until: at(50)}))
		sleepUntil(at(55))
		r.idle()
		// Paused until 58s, which has passed at 60s: 60s runs.
		r.ctl(r.s.Pause(context.Background(), "j", Pause{Until: at(58)}))
		sleepUntil(at(65))
		r.idle()
		if n := len(r.obs.all(lock.JobPaused)); n != 3 {
			t.Errorf("%d pauses reported, want 3", n)
		}

		if got, want := log.scheduled(), []string{"30s", "50s", "1m0s"}; !slices.Equal(got, want) {
			t.Fatalf("ran %v, want %v", got, want)
		}
		want := []string{
			"skipped 10s: " + ReasonPaused,
			"skipped 20s: " + ReasonPaused,
			"ran 30s",
			"skipped 40s: " + ReasonPaused,
			"ran 50s",
			"ran 1m0s",
		}
		if got := hists(r.store.runs()); !slices.Equal(got, want) {
			t.Fatalf("history\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		r.stop()
	})
}

// TestRemovedJob: a firing of a removed job claimed before any poll saw
// the removal is recorded as not run (ReasonRemoved); once a poll saw it,
// firings are skipped here without a claim; once the removal is undone
// and a poll saw it, the job runs again.
func TestRemovedJob(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		// Polls only when the test asks for one (and at the start).
		r, log, at := jobRig(t, nil, WithPollInterval(time.Hour))
		poll := func() {
			r.s.pollSoon()
			synctest.Wait()
		}
		_ = r.s.Start()
		synctest.Wait()
		sleepUntil(at(5))
		// By another instance: no poll here sees it.
		r.ctl(r.store.removeJob(context.Background(), "j"))

		sleepUntil(at(15))
		r.idle()
		if c := r.store.lastClaim("j"); !c.Equal(at(10)) {
			t.Fatalf("last claim %v, want 10s: no poll saw the removal", c.Sub(epoch))
		}
		if got, want := hists(r.store.runs()), []string{"skipped 10s: " + ReasonRemoved}; !slices.Equal(got, want) {
			t.Fatalf("history %q, want %q", got, want)
		}

		poll()
		sleepUntil(at(25))
		r.idle()
		if c := r.store.lastClaim("j"); !c.Equal(at(10)) {
			t.Errorf("last claim %v: a firing of a job known removed was claimed", c.Sub(epoch))
		}
		tw := &twin{obs: r.obs}
		if e := tw.events(lock.FiringSkipped, at(20)); len(e) != 1 || e[0].Reason != ReasonRemoved {
			t.Errorf("firing 20s: skipped events %+v, want one: %s", e, ReasonRemoved)
		}
		if e := tw.events(lock.FiringClaimed, at(20)); len(e) != 0 {
			t.Errorf("firing 20s claimed: %+v", e)
		}

		r.ctl(r.store.resumeJob(context.Background(), "j"))
		poll()
		sleepUntil(at(35))
		r.idle()
		if got, want := log.scheduled(), []string{"30s"}; !slices.Equal(got, want) {
			t.Fatalf("ran %v, want %v", got, want)
		}
		runs := r.store.runs()
		if len(runs) != 3 || hist(runs[0]) != "skipped 10s: "+ReasonRemoved ||
			runs[1].Outcome != OutcomeSkipped || !runs[1].Scheduled.Equal(at(20)) ||
			hist(runs[2]) != "ran 30s" {
			t.Fatalf("history %q", hists(runs))
		}
		r.stop()
	})
}

// TestResumeAfterRemoveRunsNoFiringOfTheRemoval: firings that fell while
// the job was removed (skipped here without a claim) are not run once it
// is resumed (ResumeJob: "Firings skipped meanwhile are not run again"),
// whatever the catch-up policy, and are recorded as not run because the
// job was removed.
func TestResumeAfterRemoveRunsNoFiringOfTheRemoval(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r, log, at := jobRig(t, nil, WithPollInterval(time.Hour), WithMisfirePolicy(MisfireRunAll(time.Hour, 10)))
		_ = r.s.Start()
		sleepUntil(at(15))
		r.idle()
		r.ctl(r.s.Remove(context.Background(), "j")) // and polls
		synctest.Wait()
		sleepUntil(at(45)) // 20s, 30s and 40s fall while removed
		r.idle()
		r.ctl(r.s.Resume(context.Background(), "j"))
		synctest.Wait()
		sleepUntil(at(55))
		r.idle()
		if got, want := log.scheduled(), []string{"10s", "50s"}; !slices.Equal(got, want) {
			t.Errorf("ran %v, want %v: firings of the removal ran after the resume", got, want)
		}
		// 20s, 30s and 40s are recorded as not run because the job was
		// removed: in one record or several.
		removed := notRunAs(r.store.runs(), ReasonRemoved)
		if want := []string{"20s", "30s", "40s"}; !slices.Equal(removed, want) {
			t.Errorf("recorded as removed %v, want %v; history %q", removed, want, hists(r.store.runs()))
		}
		r.stop()
	})
}

// notRunAs returns the firings (offsets from the epoch) that runs record
// as not run for reason.
func notRunAs(runs []Run, reason string) []string {
	var out []string
	for _, run := range runs {
		if run.Outcome == OutcomeSkipped && run.Reason == reason {
			out = append(out, run.Scheduled.Sub(epoch).String())
		}
	}
	return out
}

// TestResumeAfterPauseRunsNoFiringOfThePause: firings that fell while the
// job was paused are not run once it is resumed, whatever the catch-up
// policy, even those no instance claimed during the pause (here the only
// instance was busy with a long run, and skipped them without a claim);
// they are recorded as not run because the job was paused.
func TestResumeAfterPauseRunsNoFiringOfThePause(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r, log, at := jobRig(t, longFirst, WithMisfirePolicy(MisfireRunAll(time.Hour, 10)))
		_ = r.s.Start()
		sleepUntil(at(15))
		r.ctl(r.s.Pause(context.Background(), "j", Pause{}))
		sleepUntil(at(37))
		r.ctl(r.s.Resume(context.Background(), "j"))
		sleepUntil(at(45))
		r.idle()
		if got, want := log.scheduled(), []string{"10s", "40s"}; !slices.Equal(got, want) {
			t.Errorf("ran %v, want %v: firings of the pause ran after the resume", got, want)
		}
		if got, want := notRunAs(r.store.runs(), ReasonPaused), []string{"20s", "30s"}; !slices.Equal(got, want) {
			t.Errorf("recorded as paused %v, want %v; history %q", got, want, hists(r.store.runs()))
		}
		r.stop()
	})
}

// TestResumeAfterPauseEnded: a pause with an end pauses the firings
// before the end only, whether or not the job is resumed after the end:
// here the firings after the end fell while the only instance was busy
// with the previous run (not claimed), and are recorded as such (the
// overlap policy), not as paused, whatever the catch-up policy.
func TestResumeAfterPauseEnded(t *testing.T) {
	for _, resumed := range []bool{false, true} {
		t.Run(fmt.Sprintf("resumed %v", resumed), func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			synctest.Test(t, func(t *testing.T) {
				r, log, at := jobRig(t, longFirst, WithMisfirePolicy(MisfireRunAll(time.Hour, 10)))
				_ = r.s.Start()
				sleepUntil(at(15))
				r.ctl(r.s.Pause(context.Background(), "j", Pause{Until: at(18)}))
				sleepUntil(at(37))
				if resumed {
					r.ctl(r.s.Resume(context.Background(), "j"))
				}
				sleepUntil(at(45))
				r.idle()
				if got, want := log.scheduled(), []string{"10s", "40s"}; !slices.Equal(got, want) {
					t.Errorf("ran %v, want %v; history %q", got, want, hists(r.store.runs()))
				}
				if got, want := notRunAs(r.store.runs(), ReasonRunGoing), []string{"20s", "30s"}; !slices.Equal(got, want) {
					t.Errorf("recorded as overlapping the previous run %v, want %v; history %q", got, want, hists(r.store.runs()))
				}
				r.stop()
			})
		})
	}
}

// jobRig is the setup of the tests of controls: a rig (TTL a second) with
// job j every 10s, registered in the store as by an instance before it,
// whose calls log records (body, if set, is what the job does), and at(s),
// the instant s seconds after the epoch. Its Scheduler is not started.
func jobRig(t *testing.T, body func(context.Context, Run) error, opts ...Option) (*rig, *runLog, func(int) time.Time) {
	t.Helper()
	r := newRig(t, time.Second, opts...)
	log := newRunLog()
	if err := r.s.AddJob("j", "@every 10s", log.job(body)); err != nil {
		t.Fatal(err)
	}
	if err := r.store.register(context.Background(), []regReq{{claimReq: claimReq{"j", "@every 10s"}}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	return r, log, func(s int) time.Time { return epoch.Add(time.Duration(s) * time.Second) }
}

// longFirst is a job body: the firing at 10s runs until 35s, so that 20s
// and 30s find it busy.
func longFirst(_ context.Context, run Run) error {
	if run.Scheduled.Equal(epoch.Add(10 * time.Second)) {
		time.Sleep(25 * time.Second)
	}
	return nil
}

// ctl fails the test if a control failed.
func (r *rig) ctl(err error) {
	r.t.Helper()
	if err != nil {
		r.t.Fatal(err)
	}
}

// TestTrigger: a trigger runs the job once, within a poll interval,
// through a claim (the request is cleared), as a triggered run scheduled
// at the trigger's time; paused or not. Two instances polling the same
// document run each trigger once between them.
func TestTrigger(t *testing.T) {
	t.Run("one instance", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, time.Second) // polls every 333ms
			log := newRunLog()
			_ = r.s.AddJob("j", "@every 1h", log.job(nil))
			_ = r.s.Start()
			time.Sleep(5 * time.Second)
			trig := time.Now()
			r.store.control("j", func(c *controlDoc) { c.Trigger = trig })
			run := recv(t, log.c, "the triggered run")
			if !run.Triggered || !run.Scheduled.Equal(trig) || run.Keeper != "me" || run.Fence == 0 {
				t.Fatalf("ran %+v, want the run triggered at %v", run, trig.Sub(epoch))
			}
			if d, poll := time.Since(trig), r.s.pollInterval(); d > poll {
				t.Errorf("triggered run began %v after the trigger, more than a poll interval (%v)", d, poll)
			}
			r.idle()
			d := r.store.docOf("j")
			if !d.Control.Trigger.IsZero() || !d.PTrig.IsZero() || d.Pending {
				t.Errorf("document after the run: trigger %v, pending trigger %v, pending %v", d.Control.Trigger, d.PTrig, d.Pending)
			}
			if got, want := hists(r.store.runs()), []string{"ran T5s"}; !slices.Equal(got, want) {
				t.Errorf("history %q, want %q", got, want)
			}
			if e := r.obs.all(lock.FiringClaimed); len(e) != 1 || e[0].Reason != "triggered" || !e[0].Scheduled.Equal(trig) {
				t.Errorf("claims %+v, want the trigger's", e)
			}
			time.Sleep(5 * time.Second)
			if got := log.scheduled(); len(got) != 1 {
				t.Errorf("ran %v, want the trigger once", got)
			}
			r.stop()
		})
	})
	t.Run("paused", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		synctest.Test(t, func(t *testing.T) {
			r, log, _ := jobRig(t, nil)
			r.ctl(r.s.Pause(context.Background(), "j", Pause{}))
			_ = r.s.Start()
			time.Sleep(12 * time.Second)
			if made, err := r.s.Trigger(context.Background(), "j"); err != nil || !made {
				t.Fatalf("trigger: %v %v", made, err)
			}
			sleepUntil(epoch.Add(25 * time.Second))
			r.idle()
			if got, want := log.scheduled(), []string{"T12s"}; !slices.Equal(got, want) {
				t.Fatalf("ran %v, want %v", got, want)
			}
			want := []string{"skipped 10s: " + ReasonPaused, "ran T12s", "skipped 20s: " + ReasonPaused}
			if got := hists(r.store.runs()); !slices.Equal(got, want) {
				t.Fatalf("history %q, want %q", got, want)
			}
			r.stop()
		})
	})
	t.Run("two instances", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		synctest.Test(t, func(t *testing.T) {
			locks := locktest.New(locktest.WithTTL(time.Second))
			store := newFakeStore(locks.Clock())
			log := newRunLog()
			a, b := newTwin(t, locks, store, "a"), newTwin(t, locks, store, "b")
			for _, tw := range []*twin{a, b} {
				_ = tw.s.AddJob("j", "@every 1h", log.job(nil))
				_ = tw.s.Start()
			}
			var trigs []time.Time
			for i := range 6 {
				time.Sleep(5*time.Second + time.Duration(i)*111*time.Millisecond) // at every phase of the polls
				trig := time.Now()
				trigs = append(trigs, trig)
				store.control("j", func(c *controlDoc) { c.Trigger = trig })
				run := recv(t, log.c, "a triggered run")
				if !run.Triggered || !run.Scheduled.Equal(trig) {
					t.Fatalf("ran %+v, want the run triggered at %v", run, trig.Sub(epoch))
				}
			}
			time.Sleep(5 * time.Second)
			synctest.Wait()
			runs := log.all()
			if len(runs) != len(trigs) {
				t.Fatalf("%d runs of %d triggers: %v", len(runs), len(trigs), log.scheduled())
			}
			claims := len(a.obs.all(lock.FiringClaimed)) + len(b.obs.all(lock.FiringClaimed))
			if claims != len(trigs) {
				t.Errorf("%d trigger claims won, want %d", claims, len(trigs))
			}
			log.checkNoOverlap(t)
		})
	})
}

// TestRetries: a failed run is tried again, under the same lease and
// fence, up to the job's retries, each attempt recorded in the history
// and reported (RunRetrying); an attempt that could not start before the
// job's next firing is not made.
func TestRetries(t *testing.T) {
	t.Run("fails twice then succeeds", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, time.Second)
			log := newRunLog()
			calls := 0
			_ = r.s.AddJob("j", "@every 10s", log.job(func(context.Context, Run) error {
				if calls++; calls <= 2 {
					return errBoom
				}
				return nil
			}), JobRetries(2, lock.Backoff{First: 100 * time.Millisecond, Max: 100 * time.Millisecond}))
			_ = r.s.Start()
			f := epoch.Add(10 * time.Second)
			e := r.end()
			if e.Kind != lock.RunEnded || e.Outcome != string(OutcomeSucceeded) || e.Attempt != 3 || !e.Scheduled.Equal(f) {
				t.Fatalf("firing ended with %+v, want succeeded at attempt 3", e)
			}
			r.idle()
			runs := log.all()
			if len(runs) != 3 {
				t.Fatalf("%d calls, want 3", len(runs))
			}
			for i, run := range runs {
				if !run.Scheduled.Equal(f) || run.Attempt != i+1 || run.Fence != runs[0].Fence || run.Fence == 0 {
					t.Errorf("call %d: %+v, want attempt %d of %v under fence %d", i+1, run.Run, i+1, f.Sub(epoch), runs[0].Fence)
				}
				if i > 0 {
					if gap := run.began.Sub(runs[i-1].ended); gap < 80*time.Millisecond || gap > 100*time.Millisecond {
						t.Errorf("attempt %d began %v after the last, want the backoff (80-100ms)", i+1, gap)
					}
				}
			}
			want := []string{"ran 10s failed", "ran 10s #2 failed", "ran 10s #3"}
			h := r.store.runs()
			if got := hists(h); !slices.Equal(got, want) {
				t.Fatalf("history %q, want %q", got, want)
			}
			for _, run := range h {
				if run.Fence != runs[0].Fence || run.Keeper != "me" {
					t.Errorf("history record %+v, want fence %d", run, runs[0].Fence)
				}
			}
			retrying := r.obs.all(lock.RunRetrying)
			if len(retrying) != 2 {
				t.Fatalf("retrying events %+v, want 2", retrying)
			}
			for i, e := range retrying {
				if e.Attempt != i+1 || !errors.Is(e.Err, errBoom) || e.Fence != runs[0].Fence || e.Took < 80*time.Millisecond || e.Took > 100*time.Millisecond {
					t.Errorf("retrying event %d: %+v", i+1, e)
				}
			}
			if d := r.store.docOf("j"); d.Run.Outcome != string(OutcomeSucceeded) || d.Run.Attempt != 3 || d.Control.Fails != 0 {
				t.Errorf("last run %+v, fails %d", d.Run, d.Control.Fails)
			}
			r.stop()
		})
	})
	t.Run("backoff past the next firing", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, time.Second)
			log := newRunLog()
			_ = r.s.AddJob("j", "@every 10s", log.job(func(context.Context, Run) error { return errBoom }),
				JobRetries(5, lock.Backoff{First: 20 * time.Second, Max: 20 * time.Second}))
			_ = r.s.Start()
			sleepUntil(epoch.Add(15 * time.Second))
			r.idle()
			if got := log.scheduled(); !slices.Equal(got, []string{"10s"}) {
				t.Fatalf("ran %v, want one attempt", got)
			}
			if e := r.obs.all(lock.RunRetrying); len(e) != 0 {
				t.Fatalf("retrying: %+v", e)
			}
			if got, want := hists(r.store.runs()), []string{"ran 10s failed"}; !slices.Equal(got, want) {
				t.Fatalf("history %q, want %q", got, want)
			}
			r.stop()
		})
	})
	t.Run("retries stop before the next firing", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, time.Second)
			log := newRunLog()
			_ = r.s.AddJob("j", "@every 10s", log.job(func(_ context.Context, run Run) error {
				if run.Scheduled.Equal(epoch.Add(10 * time.Second)) {
					return errBoom
				}
				return nil
			}), JobRetries(MaxRetries, lock.Backoff{First: 3 * time.Second, Max: 3 * time.Second}))
			_ = r.s.Start()
			sleepUntil(epoch.Add(25 * time.Second))
			r.idle()
			f, next := epoch.Add(10*time.Second), epoch.Add(20*time.Second)
			var last time.Time
			for _, run := range log.all() {
				if run.Scheduled.Equal(f) {
					if !run.began.Before(next) {
						t.Errorf("attempt %d began at %v, not before the next firing", run.Attempt, run.began.Sub(epoch))
					}
					last = run.began
				}
			}
			// Pauses are 2.4-3s: the last attempt was the last that could
			// start before the next firing.
			if last.Add(3 * time.Second).Before(next) {
				t.Errorf("last attempt at %v: retries stopped with time left before the next firing", last.Sub(epoch))
			}
			runs := log.all()
			if n := len(runs); n < 4 || !runs[n-1].Scheduled.Equal(next) || !runs[n-1].began.Equal(next) {
				t.Fatalf("calls %v: want attempts of 10s, then 20s on time", log.scheduled())
			}
			r.stop()
		})
	})
}

// TestPauseAfterFailures: JobPauseAfter(2) pauses the job, cluster-wide,
// once two firings in a row failed, with a note saying so, and reports
// it; a success in between starts the count again.
func TestPauseAfterFailures(t *testing.T) {
	for _, tc := range []struct {
		name     string
		outcomes []bool // of the firings at 10s, 20s...: true succeeds
		pausedAt int    // the firing after which the job is paused, 0 if never
	}{
		{"two failures", []bool{false, false}, 2},
		{"a success in between", []bool{false, true, false, true}, 0},
		{"a success, then two failures", []bool{false, true, false, false}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, time.Second)
				log := newRunLog()
				_ = r.s.AddJob("j", "@every 10s", log.job(func(_ context.Context, run Run) error {
					i := int(run.Scheduled.Sub(epoch)/(10*time.Second)) - 1
					if i < len(tc.outcomes) && !tc.outcomes[i] {
						return errBoom
					}
					return nil
				}), JobPauseAfter(2))
				_ = r.s.Start()
				n := len(tc.outcomes)
				sleepUntil(epoch.Add(time.Duration(n+1)*10*time.Second + 5*time.Second))
				r.idle()
				d := r.store.docOf("j")
				paused := r.obs.all(lock.JobPaused)
				runs := r.store.runs()
				if tc.pausedAt == 0 {
					if d.Control.Paused || len(paused) > 0 {
						t.Fatalf("paused (%+v) after %v", paused, hists(runs))
					}
					return
				}
				if !d.Control.Paused || d.Control.PauseNote != pauseNote(2) || !d.Control.PauseTill.IsZero() {
					t.Fatalf("control %+v, want paused with the note %q", d.Control, pauseNote(2))
				}
				f := epoch.Add(time.Duration(tc.pausedAt) * 10 * time.Second)
				if len(paused) != 1 || paused[0].Reason != pauseNote(2) || !paused[0].Scheduled.Equal(f) || paused[0].Job != "j" {
					t.Fatalf("paused events %+v, want one for the firing %v", paused, f.Sub(epoch))
				}
				// The firing after it is not run.
				if got := log.scheduled(); len(got) != n {
					t.Errorf("ran %v after the pause", got)
				}
				if last := runs[len(runs)-1]; last.Outcome != OutcomeSkipped || last.Reason != ReasonPaused {
					t.Errorf("history %q, want the firing after the pause skipped", hists(runs))
				}
				r.stop()
			})
		})
	}
}

// TestOverlap: the first firing (10s) runs until 27s unless cancelled;
// the second (20s) falls while it runs, claimed on the same instance or
// on another. Under every policy runs never overlap; OverlapSkip does not
// run the second, OverlapWait runs it once the first ended, OverlapCancel
// cancels the first (ErrOverlapCancelled) within a poll interval and then
// runs the second.
func TestOverlap(t *testing.T) {
	for _, tc := range []struct {
		policy Overlap
		other  bool // the second firing is claimed by another instance
	}{
		{OverlapSkip, false}, {OverlapSkip, true},
		{OverlapWait, false}, {OverlapWait, true},
		{OverlapCancel, false}, {OverlapCancel, true},
	} {
		where := "same instance"
		if tc.other {
			where = "other instance"
		}
		t.Run(tc.policy.String()+"/"+where, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			synctest.Test(t, func(t *testing.T) {
				at := func(s int) time.Time { return epoch.Add(time.Duration(s) * time.Second) }
				f1, f2, f3 := at(10), at(20), at(30)
				locks := locktest.New(locktest.WithTTL(time.Second))
				store := newFakeStore(locks.Clock())
				log := newRunLog()
				job := log.job(func(ctx context.Context, run Run) error {
					if !run.Scheduled.Equal(f1) {
						return nil
					}
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(time.Until(at(27))):
						return nil
					}
				})
				a, b := newTwin(t, locks, store, "a"), newTwin(t, locks, store, "b")
				// a wins every claim but the second firing's when b is to.
				a.slowClaims(func(f time.Time) bool { return tc.other && f.Equal(f2) })
				b.slowClaims(func(f time.Time) bool { return !tc.other || !f.Equal(f2) })
				for _, tw := range []*twin{a, b} {
					if err := tw.s.AddJob("j", "@every 10s", job, JobOverlap(tc.policy)); err != nil {
						t.Fatal(err)
					}
					_ = tw.s.Start()
				}
				sleepUntil(at(35))
				synctest.Wait()
				log.checkNoOverlap(t)
				runs := log.all()
				byFiring := map[time.Time][]ranRun{}
				for _, run := range runs {
					byFiring[run.Scheduled] = append(byFiring[run.Scheduled], run)
				}
				first := byFiring[f1]
				if len(first) != 1 || first[0].Keeper != "a" || len(byFiring[f3]) != 1 || !byFiring[f3][0].began.Equal(f3) {
					t.Fatalf("ran %v, want 10s on a and 30s on time", log.scheduled())
				}
				second := byFiring[f2]
				claimant := "a"
				if tc.other {
					claimant = "b"
				}
				poll := a.s.pollInterval()
				switch tc.policy {
				case OverlapSkip:
					if len(second) != 0 {
						t.Errorf("second firing ran: %+v", second)
					}
					if first[0].cause != nil || !first[0].ended.Equal(at(27)) {
						t.Errorf("first run ended at %v (cause %v), want at 27s", first[0].ended.Sub(epoch), first[0].cause)
					}
				case OverlapWait:
					if len(second) != 1 || second[0].Keeper != claimant {
						t.Fatalf("second firing ran %+v, want once on %s", second, claimant)
					}
					if first[0].cause != nil || !first[0].ended.Equal(at(27)) {
						t.Errorf("first run ended at %v (cause %v), want at 27s", first[0].ended.Sub(epoch), first[0].cause)
					}
					if d := second[0].began.Sub(first[0].ended); d < 0 || d > time.Second {
						t.Errorf("second run began %v after the first ended, want soon after", d)
					}
				case OverlapCancel:
					if !errors.Is(first[0].cause, ErrOverlapCancelled) {
						t.Errorf("first run ended at %v with cause %v, want %v", first[0].ended.Sub(epoch), first[0].cause, ErrOverlapCancelled)
					} else if d := first[0].ended.Sub(f2); d > poll {
						t.Errorf("first run cancelled %v after the second firing, more than a poll interval (%v)", d, poll)
					}
					if len(second) != 1 || second[0].Keeper != claimant {
						t.Fatalf("second firing ran %+v, want once on %s", second, claimant)
					}
					if !second[0].began.Before(at(27)) {
						t.Errorf("second run began at %v, not before the first would have ended", second[0].began.Sub(epoch))
					}
				}
				if tc.policy != OverlapSkip {
					// Never taken over: its claimant was alive throughout.
					for _, tw := range []*twin{a, b} {
						if e := tw.obs.all(lock.FiringTakenOver); len(e) > 0 {
							t.Errorf("%s took over: %+v", tw.keeper, e)
						}
					}
				}
			})
		})
	}
}

// TestOverlapCancelSparesItsOwnClaim: an OverlapCancel job catching up
// several missed firings of one claim runs them all, and the claim pending
// while they run is theirs, not a later one to make way for: its last run
// goes on. Each earlier one makes way for the next firing of the claim,
// due already, as it would had that firing been claimed on its own (seed
// 263: a job slower than its period, its backlog run to the end one run
// after the other, fell further behind with each claim and lost firings).
func TestOverlapCancelSparesItsOwnClaim(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second, WithMisfirePolicy(MisfireRunAll(time.Hour, 10))) // polls every 333ms
		f0 := epoch.Add(-50 * time.Second)
		d := r.store.doc("j")
		d.Last, d.Done, d.By, d.At = f0, f0, "gone", f0
		log := newRunLog()
		_ = r.s.AddJob("j", "@every 10s", log.job(func(ctx context.Context, _ Run) error {
			select { // a second each: three polls
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
				return nil
			}
		}), JobOverlap(OverlapCancel))
		_ = r.s.Start()
		sleepUntil(epoch.Add(15 * time.Second))
		r.idle()
		if got, want := log.scheduled(), []string{"-40s", "-30s", "-20s", "-10s", "0s", "10s"}; !slices.Equal(got, want) {
			t.Fatalf("ran %v, want %v", got, want)
		}
		for _, run := range log.all() {
			at := run.Scheduled.Sub(epoch)
			switch {
			case at < 0 && !errors.Is(run.cause, ErrOverlapCancelled):
				t.Errorf("run of %v, with later firings of its claim due, not cancelled for them: cause %v", at, run.cause)
			case at >= 0 && run.cause != nil:
				t.Errorf("run of %v cancelled: %v", at, run.cause)
			}
		}
		r.stop()
	})
}

// TestTakeOver: instance a claims a firing and stalls before starting it.
// If its presence lease lapses (a is dead, or frozen past its lease),
// instance b takes the claim over within a TTL and a poll interval and
// runs the firing, once: a, when it wakes up, does not start it. If a
// stops, b runs it within about a poll interval. While a is alive, its
// slow claim is never taken over.
func TestTakeOver(t *testing.T) {
	const ttl = time.Second
	at := func(ms int) time.Time { return epoch.Add(time.Duration(ms) * time.Millisecond) }
	f1 := at(10000)

	// setup makes a and b, both with job j, a winning every claim, and a
	// stalling after its claim of f1 until the returned gate is opened.
	setup := func(t *testing.T, opts ...Option) (locks *locktest.Store, a, b *twin, log *runLog, gate *closer) {
		locks = locktest.New(locktest.WithTTL(ttl))
		store := newFakeStore(locks.Clock())
		log = newRunLog()
		a, b = newTwin(t, locks, store, "a", opts...), newTwin(t, locks, store, "b", opts...)
		b.slowClaims(func(time.Time) bool { return true })
		gate = newCloser()
		t.Cleanup(gate.close)
		a.st.afterClaim = func(_ string, f time.Time) {
			if f.Equal(f1) {
				<-gate.c
			}
		}
		return locks, a, b, log, gate
	}
	// kill makes a's renewals fail from its claim of the firing stall
	// on (f1 unless set), and a stall there until gate opens; revive
	// lets them succeed again.
	kill := func(locks *locktest.Store, a *twin, gate *closer, stall *time.Time) (revive func()) {
		var dead atomic.Bool
		locks.BeforeCall(func(_ context.Context, c locktest.Call) error {
			if dead.Load() && c.KeeperID == "a" && c.Op == locktest.OpRenew {
				return errBoom
			}
			return nil
		})
		a.st.afterClaim = func(_ string, f time.Time) {
			if stall == nil && f.Equal(f1) || stall != nil && f.Equal(*stall) {
				dead.Store(true)
				<-gate.c
			}
		}
		return func() { dead.Store(false) }
	}
	start := func(t *testing.T, log *runLog, body func(context.Context, Run) error, opts []JobOption, tws ...*twin) {
		for _, tw := range tws {
			if err := tw.s.AddJob("j", "@every 10s", log.job(body), opts...); err != nil {
				t.Fatal(err)
			}
			_ = tw.s.Start()
		}
	}

	t.Run("claimant dead", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		synctest.Test(t, func(t *testing.T) {
			locks, a, b, log, gate := setup(t)
			// From its claim of f1 on, a's renewals fail: its leases lapse
			// on the store's clock.
			revive := kill(locks, a, gate, nil)
			start(t, log, nil, nil, a, b)
			run := recv(t, log.c, "the run taken over")
			if run.Keeper != "b" || !run.Scheduled.Equal(f1) {
				t.Fatalf("ran %+v, want f1 on b", run)
			}
			began := time.Now()
			poll := b.s.pollInterval()
			if late := began.Sub(f1); late > ttl+poll {
				t.Errorf("taken over run began %v late, more than a TTL and a poll interval (%v)", late, ttl+poll)
			}
			// Not before a stopped trusting its presence lease.
			var lastRenewed time.Time
			for _, c := range locks.Calls(locktest.OpRenew) {
				if c.KeeperID == "a" && c.Err == nil && slices.Contains(c.LockIDs, a.s.presenceID(a.s.claimant)) {
					lastRenewed = c.Start
				}
			}
			if trusted := lastRenewed.Add(a.session.Timings().RenewDeadline); began.Before(trusted) {
				t.Errorf("taken over at %v, while a still trusted its presence lease (until %v)", began.Sub(epoch), trusted.Sub(epoch))
			}
			e := b.events(lock.FiringTakenOver, f1)
			if len(e) != 1 || e[0].Leader != "a" || e[0].Job != "j" {
				t.Errorf("taken over events %+v, want one naming a", e)
			}
			synctest.Wait()
			// a wakes up, its connection back: it must not start f1.
			revive()
			gate.close()
			synctest.Wait()
			if e := a.events(lock.FiringSkipped, f1); len(e) != 1 || e[0].Reason != ReasonTakenOver {
				t.Errorf("a's skipped events for f1 %+v, want one: %s", e, ReasonTakenOver)
			}
			if e := a.events(lock.RunStarted, f1); len(e) != 0 {
				t.Errorf("a started f1: %+v", e)
			}
			sleepUntil(at(25000))
			synctest.Wait()
			n := 0
			for _, r := range log.all() {
				if r.Scheduled.Equal(f1) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("f1 ran %d times: %v", n, log.scheduled())
			}
			if got := log.scheduled(); !slices.Equal(got, []string{"10s", "20s"}) {
				t.Errorf("ran %v, want 10s then 20s", got)
			}
			var f1hist []string
			for _, r := range a.st.runs() {
				if r.Scheduled.Equal(f1) {
					f1hist = append(f1hist, hist(r)+" by "+r.Keeper)
				}
			}
			if want := []string{"ran 10s by b"}; !slices.Equal(f1hist, want) {
				t.Errorf("history of f1 %q, want %q", f1hist, want)
			}
			log.checkNoOverlap(t)
		})
	})

	// The takeover of a dead claimant's claim fits within the misfire
	// threshold: the firing runs, late, whatever the misfire policy.
	t.Run("claimant dead, policy skip", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		synctest.Test(t, func(t *testing.T) {
			locks, a, b, log, gate := setup(t, WithMisfirePolicy(MisfireSkip()))
			revive := kill(locks, a, gate, nil)
			start(t, log, nil, nil, a, b)
			b.next(t, lock.FiringTakenOver)
			synctest.Wait()
			revive()
			gate.close()
			sleepUntil(at(15000))
			synctest.Wait()
			if got, want := log.scheduled(), []string{"10s"}; !slices.Equal(got, want) {
				t.Fatalf("ran %v, want %v: taken over within the threshold", got, want)
			}
			if d := a.st.docOf("j"); d.Pending || !d.Done.Equal(f1) || d.By != b.s.claimant {
				t.Errorf("document %+v, want settled by b", d)
			}
		})
	})

	t.Run("claimant of a trigger dead", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		synctest.Test(t, func(t *testing.T) {
			locks, a, b, log, gate := setup(t)
			trig := at(5000)
			revive := kill(locks, a, gate, &trig)
			start(t, log, nil, nil, a, b)
			sleepUntil(trig)
			a.st.control("j", func(c *controlDoc) { c.Trigger = trig })
			run := recv(t, log.c, "the triggered run taken over")
			if run.Keeper != "b" || !run.Triggered || !run.Scheduled.Equal(trig) {
				t.Fatalf("ran %+v, want the trigger on b", run)
			}
			if late := time.Since(trig); late > ttl+2*b.s.pollInterval() {
				t.Errorf("taken over run began %v after the trigger", late)
			}
			synctest.Wait()
			revive()
			gate.close()
			sleepUntil(at(9000))
			synctest.Wait()
			if e := a.events(lock.FiringSkipped, trig); len(e) != 1 || e[0].Reason != ReasonTakenOver {
				t.Errorf("a's skipped events %+v, want one: %s", e, ReasonTakenOver)
			}
			if got := log.scheduled(); !slices.Equal(got, []string{"T5s"}) {
				t.Errorf("ran %v, want the trigger once", got)
			}
			if d := a.st.docOf("j"); d.Pending || !d.PTrig.IsZero() || !d.Control.Trigger.IsZero() {
				t.Errorf("document %+v, want the trigger settled", d)
			}
		})
	})

	t.Run("claimant stopped", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		synctest.Test(t, func(t *testing.T) {
			_, a, b, log, gate := setup(t)
			start(t, log, nil, nil, a, b)
			sleepUntil(f1.Add(50 * time.Millisecond))
			synctest.Wait()
			stopped := make(chan error, 1)
			go func() { stopped <- a.s.Stop(context.Background()) }()
			synctest.Wait()
			gate.close()
			if err := recv(t, stopped, "a's Stop"); err != nil {
				t.Fatal(err)
			}
			stoppedAt := time.Now()
			if e := a.events(lock.RunStarted, f1); len(e) != 0 {
				t.Fatalf("a started f1 while stopping: %+v", e)
			}
			run := recv(t, log.c, "the run taken over")
			if run.Keeper != "b" || !run.Scheduled.Equal(f1) {
				t.Fatalf("ran %+v, want f1 on b", run)
			}
			poll := b.s.pollInterval()
			// A claim is looked at once it is a poll old; then within a
			// poll interval.
			if d := time.Since(maxTime(stoppedAt, f1.Add(poll))); d > poll {
				t.Errorf("taken over %v after a stopped (and f1 was a poll old), more than a poll interval (%v)", d, poll)
			}
			if e := b.events(lock.FiringTakenOver, f1); len(e) != 1 || e[0].Leader != "a" {
				t.Errorf("taken over events %+v", e)
			}
			synctest.Wait()
			if got := log.scheduled(); !slices.Equal(got, []string{"10s"}) {
				t.Errorf("ran %v", got)
			}
		})
	})

	t.Run("claimant alive, stalled", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		synctest.Test(t, func(t *testing.T) {
			locks, a, b, log, gate := setup(t)
			start(t, log, nil, nil, a, b)
			sleepUntil(f1.Add(3 * ttl)) // three TTLs, a's presence renewed
			synctest.Wait()
			if len(log.all()) != 0 {
				t.Fatalf("ran %v while a stalled", log.scheduled())
			}
			looked := false
			for _, c := range locks.Calls(locktest.OpAcquire) {
				if c.KeeperID == "b" && slices.Contains(c.LockIDs, a.s.presenceID(a.s.claimant)) {
					looked = true
					if len(c.Acquisition.Granted) > 0 {
						t.Fatalf("b took a's presence lock while a renewed it: %+v", c)
					}
				}
			}
			if !looked {
				t.Errorf("b never tried to take a's pending claim over")
			}
			gate.close()
			run := recv(t, log.c, "a's run")
			if run.Keeper != "a" || !run.Scheduled.Equal(f1) {
				t.Fatalf("ran %+v, want f1 on a", run)
			}
			synctest.Wait()
			if e := b.obs.all(lock.FiringTakenOver); len(e) > 0 {
				t.Errorf("b took over: %+v", e)
			}
			if got := log.scheduled(); !slices.Equal(got, []string{"10s"}) {
				t.Errorf("ran %v", got)
			}
		})
	})

	t.Run("claimant alive, waiting for a long run", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		synctest.Test(t, func(t *testing.T) {
			_, a, b, log, gate := setup(t)
			gate.close() // no stall: the claim of 20s waits for 10s's lock
			long := func(_ context.Context, run Run) error {
				if run.Scheduled.Equal(f1) {
					time.Sleep(25 * time.Second) // until 35s
				}
				return nil
			}
			start(t, log, long, []JobOption{JobOverlap(OverlapWait)}, a, b)
			sleepUntil(at(36000))
			synctest.Wait()
			runs := log.all()
			if len(runs) != 2 || runs[1].Keeper != "a" || !runs[1].Scheduled.Equal(at(20000)) {
				t.Fatalf("ran %v, want 20s on a", log.scheduled())
			}
			// Within a retry period of the lock's release.
			if d := runs[1].began.Sub(runs[0].ended); d < 0 || d > a.session.Timings().RetryPeriod {
				t.Errorf("20s began %v after 10s ended, want within the retry period", d)
			}
			for _, tw := range []*twin{a, b} {
				if e := tw.obs.all(lock.FiringTakenOver); len(e) > 0 {
					t.Errorf("%s took over: %+v", tw.keeper, e)
				}
			}
			log.checkNoOverlap(t)
		})
	})
}

// TestJobsPauseEnded: a job paused until U is reported paused (Jobs)
// before U and not from U on, when its firings run again.
func TestJobsPauseEnded(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r, log, at := jobRig(t, nil)
		r.ctl(r.s.Pause(context.Background(), "j", Pause{Until: at(15)}))
		_ = r.s.Start()
		paused := func() *Pause {
			t.Helper()
			infos, err := r.s.Jobs(context.Background())
			if err != nil || len(infos) != 1 {
				t.Fatalf("jobs: %+v %v", infos, err)
			}
			return infos[0].Paused
		}
		sleepUntil(at(5))
		if p := paused(); p == nil || !p.Until.Equal(at(15)) {
			t.Errorf("before the pause's end: %+v, want paused until 15s", p)
		}
		sleepUntil(at(15))
		if p := paused(); p != nil {
			t.Errorf("at the pause's end: %+v, want not paused", p)
		}
		sleepUntil(at(25))
		r.idle()
		if got, want := log.scheduled(), []string{"20s"}; !slices.Equal(got, want) {
			t.Errorf("ran %v, want %v", got, want)
		}
		r.stop()
	})
}

// TestControlsOnFakeStore: the Scheduler's controls go through its store,
// with the checks and outcomes of PauseJob, ResumeJob, TriggerJob and
// RemoveJob, and report what they did once each.
func TestControlsOnFakeStore(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r, _, at := jobRig(t, nil)
		_ = r.s.AddJob("new", "@every 10s", func(context.Context) error { return nil })
		ctx := context.Background()
		for name, err := range map[string]error{
			"long note":    r.s.Pause(ctx, "j", Pause{Note: strings.Repeat("x", MaxPauseNote+1)}),
			"ended pause":  r.s.Pause(ctx, "j", Pause{Until: at(0)}),
			"unregistered": r.s.Pause(ctx, "other", Pause{}),
			"no document":  r.s.Resume(ctx, "new"),
		} {
			want := ErrInvalidOption
			if name == "unregistered" || name == "no document" {
				want = ErrUnknownJob
			}
			if !errors.Is(err, want) {
				t.Errorf("%s: %v, want %v", name, err, want)
			}
		}
		if d := r.store.docOf("j"); d.Control.Paused {
			t.Fatalf("a refused pause was written: %+v", d.Control)
		}
		r.ctl(r.s.Pause(ctx, "j", Pause{Note: "n", Until: at(60)}))
		if d := r.store.docOf("j"); !d.Control.Paused || d.Control.PauseNote != "n" || !d.Control.PauseTill.Equal(at(60)) {
			t.Errorf("paused: %+v", d.Control)
		}
		for i, want := range []bool{true, false} {
			if made, err := r.s.Trigger(ctx, "j"); err != nil || made != want {
				t.Errorf("trigger %d: %v %v, want %v", i, made, err, want)
			}
		}
		r.ctl(r.s.Remove(ctx, "j"))
		if made, err := r.s.Trigger(ctx, "j"); made || !errors.Is(err, ErrJobRemoved) {
			t.Errorf("trigger of a removed job: %v %v, want ErrJobRemoved", made, err)
		}
		r.ctl(r.s.Resume(ctx, "j"))
		if d := r.store.docOf("j"); d.Control.Paused || d.Control.Removed || !d.Control.Trigger.IsZero() {
			t.Errorf("resumed: %+v", d.Control)
		}
		for _, k := range []lock.EventKind{lock.JobPaused, lock.JobTriggered, lock.JobRemoved, lock.JobResumed} {
			if e := r.obs.all(k); len(e) != 1 || e[0].Job != "j" {
				t.Errorf("%v events %+v, want one", k, e)
			}
		}
	})
}

// TestNotRunRecordedBeforeTheJob: the records of the firings a claim
// covers that do not run are written once the start of the firing that
// runs settled them, before its job is called: an instance killed during
// that run does not take them along. (Found by the integration suite
// under load: a firing skipped by the overlap policy left no record when
// its claimant was killed mid-run.)
func TestNotRunRecordedBeforeTheJob(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		const period = 10 * time.Second
		f := func(i int) time.Time { return epoch.Add(time.Duration(i-5) * period) }
		r := newRig(t, time.Second, WithMisfireThreshold(2*time.Second))
		d := r.store.doc("j")
		d.Last, d.Done, d.By, d.At = f(0), f(0), "gone", f(0)
		d.Run = runDoc{Keeper: "gone", Scheduled: f(0), Start: f(0), End: f(0), Outcome: string(OutcomeSucceeded)}
		seen := make(chan []Run, 1)
		_ = r.s.AddJob("j", "@every 10s", func(ctx context.Context) error {
			if run, _ := RunFromContext(ctx); run.Scheduled.Equal(f(5)) {
				seen <- r.store.runs()
			}
			return nil
		})
		sleepUntil(epoch.Add(3 * time.Second))
		_ = r.s.Start()
		runs := recv(t, seen, "the run of the latest missed firing")
		if got, want := hists(runs), []string{"skipped -40s: misfired", "skipped -30s: misfired", "skipped -20s: misfired",
			"skipped -10s: misfired"}; !slices.Equal(got, want) {
			t.Fatalf("history when the job was called: %q, want %q: the records of the 4 firings missed before it", got, want)
		}
		r.idle()
		r.stop()
	})
}

// TestPauseKeepsOwedFirings: firings that fell while an instance was up
// and the job was not paused, still owed when it is paused (their claim
// was left pending by failed starts), run after the pause ends, late and
// in order; only the firings that fell during the pause are recorded
// paused. (Found by the simulation, seed 1228.)
func TestPauseKeepsOwedFirings(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second)
		at := func(s int) time.Time { return epoch.Add(time.Duration(s) * time.Second) }
		var failing atomic.Bool
		failing.Store(true)
		r.store.onStart = func(context.Context, Run) (bool, error) {
			if failing.Load() {
				return false, errBoom
			}
			return true, nil
		}
		log := newRunLog()
		_ = r.s.AddJob("j", "@every 10s", log.job(nil))
		_ = r.s.Start()
		sleepUntil(at(25)) // 10s and 20s fell; their starts failed
		if err := r.s.Pause(context.Background(), "j", Pause{Note: "incident"}); err != nil {
			t.Fatal(err)
		}
		failing.Store(false)
		before := len(r.obs.all(lock.FiringClaimed, lock.FiringSkipped))
		sleepUntil(at(45)) // 30s and 40s fall during the pause
		if got := log.scheduled(); len(got) != 0 {
			t.Fatalf("ran %v while paused", got)
		}
		if n := len(r.obs.all(lock.FiringClaimed, lock.FiringSkipped)) - before; n > 2 {
			t.Errorf("%d events while the owed firings waited for the pause's end: %+v", n, r.obs.all(lock.FiringClaimed, lock.FiringSkipped)[before:])
		}
		if err := r.s.Resume(context.Background(), "j"); err != nil {
			t.Fatal(err)
		}
		sleepUntil(at(61))
		r.idle()
		if got, want := log.scheduled(), []string{"10s", "20s", "50s", "1m0s"}; !slices.Equal(got, want) {
			t.Fatalf("ran %v, want %v: the owed firings late, then on time", got, want)
		}
		paused := 0
		for _, h := range r.store.runs() {
			if h.Outcome == OutcomeSkipped && h.Reason == ReasonPaused {
				if h.Scheduled.Before(at(25)) {
					t.Errorf("firing %v, from before the pause, recorded paused", h.Scheduled.Sub(epoch))
				}
				paused += max(h.Count, 1)
			}
		}
		if paused != 2 {
			t.Errorf("%d firings recorded paused, want 2 (30s and 40s)", paused)
		}
		r.stop()
	})
}

// TestNotRunRecordKeepsRun: a record of firings as not run never replaces
// a record of a run. An instance's decision not to run a firing can be
// superseded (its claim taken over, and the taker ran it), and the write
// of its record, retried while the database could not be reached, can
// land after the taker's (seed 1510: a run left with no record). Nor does
// a run's record replace a record of several firings not run that begins
// with its firing: the others would lose theirs.
func TestNotRunRecordKeepsRun(t *testing.T) {
	at := func(s int) time.Time { return epoch.Add(time.Duration(s) * time.Second) }
	for _, tc := range []struct {
		name     string
		done     int // the firing settled before the claim
		ran      int // the firing another instance ran
		runFirst bool
		want     []string
	}{
		{"one firing", 10, 20, true, []string{"ran 20s by other", "ran 30s by a"}},
		{"first of several", 0, 10, true,
			[]string{"ran 10s by other", "skipped 20s: " + ReasonMisfired + " by a", "ran 30s by a"}},
		{"run recorded after", 0, 10, false,
			[]string{"ran 10s by other", "skipped 20s: " + ReasonMisfired + " by a", "ran 30s by a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			synctest.Test(t, func(t *testing.T) {
				locks := locktest.New(locktest.WithTTL(time.Second))
				store := newFakeStore(locks.Clock())
				store.settledThrough("j", at(tc.done))
				other := Run{Job: "j", Keeper: "other", Scheduled: at(tc.ran), Start: at(tc.ran + 1), Outcome: OutcomeSucceeded}
				if tc.runFirst {
					store.hist = []Run{other}
				}
				log := newRunLog()
				a := newTwin(t, locks, store, "a", WithMisfireThreshold(2*time.Second))
				if err := a.s.AddJob("j", "@every 10s", log.job(nil)); err != nil {
					t.Fatal(err)
				}
				sleepUntil(at(35))
				_ = a.s.Start() // claims 30s: those before fell while no instance was up
				sleepUntil(at(38))
				synctest.Wait()
				if !tc.runFirst {
					_ = store.addHistory(context.Background(), other)
				}
				if got, want := log.scheduled(), []string{"30s"}; !slices.Equal(got, want) {
					t.Fatalf("ran %v, want %v", got, want)
				}
				var got []string
				for _, r := range store.runs() {
					got = append(got, hist(r)+" by "+r.Keeper)
				}
				if !slices.Equal(got, tc.want) {
					t.Fatalf("history %q, want %q", got, tc.want)
				}
				_ = a.s.Stop(context.Background())
			})
		})
	}
}
