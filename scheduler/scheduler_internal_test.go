package scheduler

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
)

func TestEveryAlignedToEpoch(t *testing.T) {
	for _, d := range []time.Duration{time.Second, 7 * time.Second, time.Minute, 36 * time.Hour} {
		e := everySchedule{d}
		for _, at := range []time.Time{
			epoch, epoch.Add(time.Nanosecond), epoch.Add(3500 * time.Millisecond), epoch.Add(-time.Nanosecond),
			time.Date(1969, 12, 31, 23, 59, 59, 500, time.UTC), time.Unix(0, 0),
		} {
			n := e.Next(at)
			if !n.After(at) || n.Sub(at) > d || n.UnixNano()%int64(d) != 0 {
				t.Errorf("every %v: Next(%v) = %v, want the first multiple of %v since the epoch after it", d, at, n, d)
			}
		}
	}
	// Two instances started at different moments compute the same firings.
	e := everySchedule{10 * time.Second}
	a, b := e.Next(epoch.Add(1234*time.Millisecond)), e.Next(epoch.Add(7*time.Second))
	if !a.Equal(b) || !a.Equal(epoch.Add(10*time.Second)) {
		t.Fatalf("firings differ by start time: %v %v", a, b)
	}
}

func TestAddJobRejects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second)
		noop := func(context.Context) error { return nil }
		if err := r.s.AddJob("dup", "@every 1s", noop); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name, jobName, spec string
			fn                  func(context.Context) error
			opts                []JobOption
			want, lockWant      error // lockWant: the lock sentinel it also matches, if any
		}{
			{"empty name", "", "@daily", noop, nil, ErrInvalidJob, lock.ErrInvalidArgument},
			{"NUL in name", "a\x00b", "@daily", noop, nil, ErrInvalidJob, lock.ErrInvalidArgument},
			{"name too long", strings.Repeat("x", lock.MaxIDLength), "@daily", noop, nil, ErrInvalidJob, lock.ErrInvalidArgument},
			{"invalid UTF-8 name", "\xff", "@daily", noop, nil, ErrInvalidJob, lock.ErrInvalidArgument},
			{"nil func", "f", "@daily", nil, nil, ErrInvalidJob, lock.ErrInvalidArgument},
			{"duplicate", "dup", "@daily", noop, nil, ErrDuplicateJob, nil},
			{"empty spec", "s", "", noop, nil, ErrInvalidSpec, nil},
			{"too few fields", "s", "* * *", noop, nil, ErrInvalidSpec, nil},
			{"step over the seconds", "s", "*/75 * * * * *", noop, nil, ErrInvalidSpec, nil},
			{"step over the hours", "s", "0 */25 * * *", noop, nil, ErrInvalidSpec, nil},
			{"each host's zone", "s", "CRON_TZ=Local 0 2 * * *", noop, nil, ErrInvalidSpec, nil},
			{"out of range", "s", "61 * * * *", noop, nil, ErrInvalidSpec, nil},
			{"bad step", "s", "*/0 * * * *", noop, nil, ErrInvalidSpec, nil},
			{"unknown descriptor", "s", "@fortnightly", noop, nil, ErrInvalidSpec, nil},
			{"zone without schedule", "s", "CRON_TZ=UTC", noop, nil, ErrInvalidSpec, nil},
			{"unknown zone", "s", "CRON_TZ=Nowhere/Land 0 2 * * *", noop, nil, ErrInvalidSpec, nil},
			{"every sub-second", "s", "@every 500ms", noop, nil, ErrInvalidSpec, nil},
			{"every fractional", "s", "@every 1500ms", noop, nil, ErrInvalidSpec, nil},
			{"every negative", "s", "@every -1s", noop, nil, ErrInvalidSpec, nil},
			{"every garbage", "s", "@every soon", noop, nil, ErrInvalidSpec, nil},
			{"never fires", "s", "0 0 30 2 *", noop, nil, ErrInvalidSpec, nil},
			{"nil job option", "o", "@daily", noop, []JobOption{nil}, ErrInvalidOption, lock.ErrInvalidOption},
			{"zero timeout", "o", "@daily", noop, []JobOption{JobTimeout(0)}, ErrInvalidOption, lock.ErrInvalidOption},
		} {
			err := r.s.AddJob(tc.jobName, tc.spec, tc.fn, tc.opts...)
			switch {
			case !errors.Is(err, tc.want):
				t.Errorf("%s: AddJob(%q, %q) = %v, want %v", tc.name, tc.jobName, tc.spec, err, tc.want)
			case tc.lockWant != nil && !errors.Is(err, tc.lockWant):
				t.Errorf("%s: AddJob(%q, %q) = %v, want it to match %v too", tc.name, tc.jobName, tc.spec, err, tc.lockWant)
			case tc.lockWant == nil && (errors.Is(err, lock.ErrInvalidArgument) || errors.Is(err, lock.ErrInvalidOption)):
				t.Errorf("%s: AddJob(%q, %q) = %v, matches a lock sentinel", tc.name, tc.jobName, tc.spec, err)
			case strings.Count(err.Error(), "scheduler:") != 1 || strings.Count(err.Error(), "lock:") > 1:
				t.Errorf("%s: AddJob(%q, %q) = %q: a prefix is repeated", tc.name, tc.jobName, tc.spec, err)
			}
		}
		for i, spec := range []string{"*/5 * * * *", "@daily", "@every 90s", "CRON_TZ=Europe/Paris 0 2 * * *", "TZ=UTC @every 1h", "0 0 29 2 *"} {
			if err := r.s.AddJob(string(rune('a'+i)), spec, noop); err != nil {
				t.Errorf("AddJob(%q): %v", spec, err)
			}
		}
		r.stop()
		if err := r.s.AddJob("late", "@daily", noop); !errors.Is(err, ErrStopped) {
			t.Fatalf("AddJob after Stop: %v, want ErrStopped", err)
		}
		if err := r.s.Start(); !errors.Is(err, ErrStopped) {
			t.Fatalf("Start after Stop: %v, want ErrStopped", err)
		}
	})
}

// TestFiveOrSixFields: a spec has five fields (minute first) or six (a
// leading seconds field), with no option to choose.
func TestFiveOrSixFields(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second)
		noop := func(context.Context) error { return nil }
		for i, spec := range []string{"*/2 * * * * *", "*/5 * * * *", "@every 1s"} {
			if err := r.s.AddJob(string(rune('a'+i)), spec, noop); err != nil {
				t.Errorf("AddJob(%q): %v", spec, err)
			}
		}
		if err := r.s.AddJob("x", "* * * * * * *", noop); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("seven fields: %v", err)
		}
		infos, err := r.s.Jobs(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		want := []time.Time{epoch.Add(2 * time.Second), epoch.Add(5 * time.Minute), epoch.Add(time.Second)}
		for i, in := range infos {
			if !in.Next.Equal(want[i]) {
				t.Errorf("%s: next %v, want %v", in.Spec, in.Next, want[i])
			}
		}
	})
}

func TestNewRejects(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	locks := locktest.New(locktest.WithTTL(time.Second))
	session, err := lock.NewSession(locks)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = session.Close() }()
	for _, tc := range []struct {
		name    string
		session *lock.Session
		opts    []Option
	}{
		{"nil session", nil, nil},
		{"nil option", session, []Option{nil}},
		{"nil location", session, []Option{WithLocation(nil)}},
		{"bad stop mode", session, []Option{WithStopMode(StopMode(7))}},
		{"empty jobs collection", session, []Option{WithJobsCollection("")}},
		{"system runs collection", session, []Option{WithRunsCollection("system.x")}},
		{"dollar collection", session, []Option{WithJobsCollection("a$b")}},
		{"sub-second history", session, []Option{WithHistory(500 * time.Millisecond)}},
		{"negative history", session, []Option{WithHistory(-time.Hour)}},
		{"zero op timeout", session, []Option{WithOpTimeout(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := buildConfig(tc.opts)
			if err == nil {
				_, err = newScheduler(newFakeStore(locks.Clock()), tc.session, cfg)
			}
			if !errors.Is(err, ErrInvalidOption) || !errors.Is(err, lock.ErrInvalidOption) {
				t.Fatalf("got %v, want ErrInvalidOption, which is also lock.ErrInvalidOption", err)
			}
			if strings.Count(err.Error(), "invalid option") != 1 {
				t.Errorf("%q: a prefix is repeated", err)
			}
		})
	}
	if _, err := New(nil, session); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("New(nil db): %v", err)
	}
}

// TestTimingsFromSession: the keeper, the clock and the lease timings are
// the Session's, and so are the bounds of the wait for a job's lock.
func TestTimingsFromSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRigWith(t, time.Minute, []lock.SessionOption{lock.WithRetryPeriod(3 * time.Second)})
		noop := func(context.Context) error { return nil }
		_ = r.s.AddJob("often", "@every 10s", noop)
		_ = r.s.AddJob("rare", "@daily", noop)
		if r.s.KeeperID() != "me" || r.s.session != r.session || r.s.clock != r.session.Clock() || r.s.ttl != time.Minute {
			t.Fatalf("keeper %q, TTL %v, want the Session's", r.s.KeeperID(), r.s.ttl)
		}
		if b := r.s.lockBackoff(); b.First != lockRetryFirst || b.Max != 3*time.Second {
			t.Errorf("lock backoff %+v, want up to the Session's retry period", b)
		}
		for _, j := range r.s.order {
			want := time.Minute // the TTL
			if j.name == "often" {
				want = 5 * time.Second // half the period
			}
			if got := r.s.lockWait(j, epoch); got != want {
				t.Errorf("%s: lock wait %v, want %v", j.name, got, want)
			}
		}
	})
}

func TestFiresAlignedFiringsOnce(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second)
		time.Sleep(3500 * time.Millisecond) // started off the grid
		runs := make(chan Run, 10)
		if err := r.s.AddJob("tick", "@every 10s", func(ctx context.Context) error {
			run, _ := RunFromContext(ctx)
			if fence, ok := lock.FenceFrom(ctx); !ok || fence != run.Fence {
				t.Errorf("fence %d in the context, want the run's %d", fence, run.Fence)
			}
			runs <- run
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := r.s.Start(); err != nil {
			t.Fatal(err)
		}
		if err := r.s.Start(); !errors.Is(err, ErrStarted) {
			t.Fatalf("second Start: %v", err)
		}
		for i := 1; i <= 3; i++ {
			f := epoch.Add(time.Duration(i) * 10 * time.Second)
			run := recv(t, runs, "run")
			if !run.Scheduled.Equal(f) || run.Keeper != "me" || run.Fence == 0 || run.Job != "tick" || !time.Now().Equal(f) {
				t.Fatalf("run %d = %+v at %v, want firing %v", i, run, time.Since(epoch), f)
			}
			r.idle()
			if h := r.locks.HeldBy(r.s.LockID("tick")); h != "" {
				t.Fatalf("lock held by %q after the run", h)
			}
		}
		infos, err := r.s.Jobs(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		in := infos[0]
		if !in.Next.Equal(epoch.Add(40*time.Second)) || !in.LastClaimed.Equal(epoch.Add(30*time.Second)) ||
			in.LastRun == nil || in.LastRun.Outcome != OutcomeSucceeded || in.ClaimedBy != r.s.ClaimantID() {
			t.Fatalf("Jobs = %+v (last run %+v)", in, in.LastRun)
		}
		hist, _ := r.s.History(context.Background(), "tick", 0)
		if len(hist) != 3 {
			t.Fatalf("history %+v", hist)
		}
		r.stop()
	})
}

func TestMissedFiringsNotReplayed(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		clk := &jumpClock{Clock: clockwork.NewRealClock()}
		r := rigOn(t, locktest.New(locktest.WithTTL(time.Second), locktest.WithClock(clk)), nil,
			WithMisfireThreshold(6*time.Second), WithMisfirePolicy(MisfireSkip()))
		runs := make(chan Run, 10)
		_ = r.s.AddJob("tick", "@every 10s", func(ctx context.Context) error {
			run, _ := RunFromContext(ctx)
			runs <- run
			return nil
		})
		_ = r.s.Start()
		// Suspended across three firings: when the loop wakes up for the
		// first, the clock says 35s.
		time.Sleep(9 * time.Second)
		clk.jump(25 * time.Second)
		if run := recv(t, runs, "run"); !run.Scheduled.Equal(epoch.Add(30 * time.Second)) {
			t.Fatalf("ran firing %v, want only the latest due one", run.Scheduled)
		}
		r.idle()
		// One event says this instance fell behind; the claim of the
		// latest covers the two before it, misfires (25s and 15s late,
		// past the 6s threshold), which the policy does not run.
		skipped := r.obs.all(lock.FiringSkipped)
		if len(skipped) != 3 || !skipped[0].Scheduled.Equal(epoch.Add(10*time.Second)) || skipped[0].Job != "tick" ||
			!strings.HasPrefix(skipped[0].Reason, ReasonBehind+": 2 firings") ||
			skipped[1].Reason != ReasonMisfired || skipped[2].Reason != ReasonMisfired {
			t.Fatalf("skipped: %+v, want one event for the two missed firings, and their records", skipped)
		}
		time.Sleep(clk.Until(epoch.Add(40 * time.Second)))
		if run := recv(t, runs, "run"); !run.Scheduled.Equal(epoch.Add(40 * time.Second)) {
			t.Fatalf("ran firing %v", run.Scheduled)
		}
		r.idle()
		if got, want := hists(r.store.runs()), []string{"skipped 10s: misfired", "skipped 20s: misfired", "ran 30s", "ran 40s"}; !slices.Equal(got, want) {
			t.Fatalf("history %q, want %q", got, want)
		}
		r.stop()
	})
}

// jumpClock is the test's clock, which jump moves forward at once, as the
// clock of a process that was suspended looks to the process.
type jumpClock struct {
	clockwork.Clock
	off atomic.Int64
}

func (c *jumpClock) jump(d time.Duration)            { c.off.Add(int64(d)) }
func (c *jumpClock) Now() time.Time                  { return c.Clock.Now().Add(time.Duration(c.off.Load())) }
func (c *jumpClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *jumpClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// closer is a channel closed once.
type closer struct {
	once sync.Once
	c    chan struct{}
}

func newCloser() *closer { return &closer{c: make(chan struct{})} }
func (c *closer) close() { c.once.Do(func() { close(c.c) }) }

type outcome struct {
	cause error
	at    time.Time
}

// blockingJob runs until its context is done or release is closed, and
// reports when and why it ended through ended.
func blockingJob(started chan<- Run, release *closer, ended chan<- outcome) func(context.Context) error {
	return func(ctx context.Context) error {
		run, _ := RunFromContext(ctx)
		started <- run
		select {
		case <-ctx.Done():
			ended <- outcome{context.Cause(ctx), time.Now()}
			return ctx.Err()
		case <-release.c:
			ended <- outcome{nil, time.Now()}
			return nil
		}
	}
}

func TestLongJobKeepsLeaseAndSkipsFirings(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second) // renew every 333ms, renew deadline 667ms
		started, ended := make(chan Run, 10), make(chan outcome, 10)
		release := newCloser()
		defer release.close()
		first := true
		_ = r.s.AddJob("long", "@every 1s", func(ctx context.Context) error {
			if first {
				first = false
				return blockingJob(started, release, ended)(ctx)
			}
			run, _ := RunFromContext(ctx)
			started <- run
			return nil
		})
		_ = r.s.Start()
		recv(t, started, "first run")
		time.Sleep(3100 * time.Millisecond) // three TTLs
		select {
		case o := <-ended:
			t.Fatalf("long job ended early at %v: %v", o.at.Sub(epoch), o.cause)
		case run := <-started:
			t.Fatalf("firing %v started during the long run", run.Scheduled.Sub(epoch))
		default:
		}
		if _, renewals, _ := r.lockCounts(); renewals < 8 {
			t.Fatalf("%d renewals in 3 TTLs", renewals)
		}
		if h := r.locks.HeldBy(r.s.LockID("long")); h != "me" {
			t.Fatalf("lock holder %q during the run", h)
		}
		// Each firing during the run was skipped here, once.
		var skipped []time.Duration
		for _, e := range r.obs.all(lock.FiringSkipped) {
			if e.Reason != ReasonBusy || e.Job != "long" || e.LockID != r.s.LockID("long") {
				t.Errorf("skipped: %+v", e)
			}
			skipped = append(skipped, e.Scheduled.Sub(epoch))
		}
		if want := []time.Duration{2 * time.Second, 3 * time.Second, 4 * time.Second}; !slices.Equal(skipped, want) {
			t.Errorf("skipped firings %v, want %v", skipped, want)
		}
		release.close()
		if o := recv(t, ended, "end"); o.cause != nil {
			t.Fatalf("cancelled: %v", o.cause)
		}
		// 4s fell while the run went on, but it ended within the half
		// period 4s's own claim would have waited for its lock: 4s runs,
		// late, as it would have had it been claimed then (owed: claimed
		// as soon as the 1s run released the lock, so that its claim may
		// be in progress now).
		for _, want := range []time.Duration{4 * time.Second, 5 * time.Second} {
			if run := recv(t, started, "next run"); !run.Scheduled.Equal(epoch.Add(want)) {
				t.Fatalf("next run for firing %v, want %v", run.Scheduled.Sub(epoch), want)
			}
		}
		r.idle()
		// The firings skipped here are recorded as not run, once, by the
		// claim after them: they fell while the previous run went on past
		// their wait (the overlap policy skips them). In firing order: the
		// owed claim of 4s goes ahead once the 1s run released the lock,
		// and its records may be written before the 1s run's.
		runs := r.store.runs()
		slices.SortStableFunc(runs, func(a, b Run) int { return a.Scheduled.Compare(b.Scheduled) })
		got := hists(runs)
		if want := []string{"ran 1s", "skipped 2s: " + ReasonRunGoing, "skipped 3s: " + ReasonRunGoing, "ran 4s",
			"ran 5s"}; !slices.Equal(got, want) {
			t.Fatalf("history %q, want %q", got, want)
		}
		r.stop()
	})
}

func TestLeaseLostCancelsJob(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(r *rig)
		// latest is the latest the job may be cancelled, after its start.
		latest func(lock.Timings) time.Duration
	}{
		// Renewals fail: cancelled at the renew deadline, a safety margin
		// before anyone else could take the lock over.
		{"renewals fail", func(r *rig) { r.locks.Fail(locktest.OpRenew, locktest.Always, errBoom) },
			func(t lock.Timings) time.Duration { return t.RenewDeadline }},
		// Another keeper took the lock: cancelled at the first renewal.
		{"taken over", func(r *rig) { r.locks.TakeOver(r.s.LockID("j"), "other") },
			func(t lock.Timings) time.Duration { return t.RenewInterval }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, time.Second)
				started, ended := make(chan Run, 10), make(chan outcome, 10)
				release := newCloser()
				defer release.close()
				_ = r.s.AddJob("j", "@every 1m", blockingJob(started, release, ended))
				_ = r.s.Start()
				recv(t, started, "run")
				start := time.Now()
				tc.fault(r)
				o := recv(t, ended, "the job to be cancelled")
				if !errors.Is(o.cause, lock.ErrLeaseLost) {
					t.Errorf("cause %v, want lock.ErrLeaseLost", o.cause)
				}
				if d, latest := o.at.Sub(start), tc.latest(r.session.Timings()); d <= 0 || d > latest {
					t.Errorf("cancelled %v after start, want at most %v", d, latest)
				}
				e := r.end()
				if e.Kind != lock.RunEnded || e.Outcome != string(OutcomeFailed) || !errors.Is(e.Err, lock.ErrLeaseLost) ||
					!errors.Is(e.Err, context.Canceled) || !strings.Contains(e.Reason, "context cancelled: "+lock.ErrLeaseLost.Error()) {
					t.Fatalf("run ended with %+v, want the context's cause in it", e)
				}
				r.idle()
				runs := r.store.runs()
				if len(runs) != 1 || runs[0].Outcome != OutcomeFailed || runs[0].Error != e.Err.Error() ||
					!strings.Contains(runs[0].Error, lock.ErrLeaseLost.Error()) {
					t.Fatalf("runs %+v", runs)
				}
				r.stop()
			})
		})
	}
}

func TestJobTimeout(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second)
		started, ended := make(chan Run, 10), make(chan outcome, 10)
		release := newCloser()
		defer release.close()
		_ = r.s.AddJob("j", "@every 1m", blockingJob(started, release, ended), JobTimeout(1500*time.Millisecond))
		_ = r.s.Start()
		recv(t, started, "run")
		o := recv(t, ended, "end")
		if !errors.Is(o.cause, ErrJobTimeout) || o.at.Sub(epoch.Add(time.Minute)) != 1500*time.Millisecond {
			t.Fatalf("ended at %v with %v, want ErrJobTimeout at 1.5s", o.at.Sub(epoch.Add(time.Minute)), o.cause)
		}
		if e := r.end(); e.Kind != lock.RunEnded || !errors.Is(e.Err, ErrJobTimeout) || e.Took != 1500*time.Millisecond {
			t.Fatalf("run ended with %+v", e)
		}
		r.idle()
		if runs := r.store.runs(); len(runs) != 1 || !strings.Contains(runs[0].Error, ErrJobTimeout.Error()) {
			t.Fatalf("runs %+v", runs)
		}
		r.stop()
	})
}

func TestPanicAndErrorRecorded(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second)
		n := 0
		_ = r.s.AddJob("j", "@every 1s", func(context.Context) error {
			n++
			switch n {
			case 1:
				panic("kaboom")
			case 2:
				return errBoom
			}
			return nil
		})
		_ = r.s.Start()
		var ends []lock.Event
		for i := 1; i <= 3; i++ {
			ends = append(ends, r.end())
			r.idle()
			if h := r.locks.HeldBy(r.s.LockID("j")); h != "" {
				t.Fatalf("run %d: lock still held by %q", i, h)
			}
		}
		runs := r.store.runs()
		if len(runs) != 3 {
			t.Fatalf("runs %+v", runs)
		}
		if runs[0].Outcome != OutcomeFailed || !strings.Contains(runs[0].Error, "kaboom") || !strings.Contains(runs[0].Error, ErrPanic.Error()) {
			t.Errorf("panic recorded as %+v", runs[0])
		}
		if e := ends[0]; !errors.Is(e.Err, ErrPanic) || !strings.Contains(e.Reason, "panicked at:") || !strings.Contains(e.Reason, "fire.go") {
			t.Errorf("panic reported as %+v", e)
		}
		if runs[1].Outcome != OutcomeFailed || runs[1].Error != errBoom.Error() {
			t.Errorf("error recorded as %+v", runs[1])
		}
		if e := ends[1]; e.Err != errBoom || e.Reason != "" || e.Outcome != string(OutcomeFailed) {
			t.Errorf("error reported as %+v", e)
		}
		if runs[2].Outcome != OutcomeSucceeded || runs[2].Error != "" {
			t.Errorf("success recorded as %+v", runs[2])
		}
		if e := ends[2]; e.Err != nil || e.Reason != "" || e.Outcome != string(OutcomeSucceeded) {
			t.Errorf("success reported as %+v", e)
		}
		r.stop()
	})
}

func TestClaimedFiringSkipped(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(r *rig)
		reason string
	}{
		{"lock held elsewhere", func(r *rig) { r.t.Cleanup(r.holdAlive(r.s.LockID("j"))) }, ReasonLockHeld},
		{"claim taken over meanwhile", func(r *rig) {
			r.store.onClaim = func(job string, f time.Time) {
				// Another instance takes the claim over between this
				// instance's claim and its start record.
				r.store.mu.Lock()
				r.store.docs[job].By = "other"
				r.store.mu.Unlock()
			}
		}, ReasonTakenOver},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, 3*time.Second)
				ran := make(chan struct{}, 1)
				_ = r.s.AddJob("j", "@every 1s", func(context.Context) error { ran <- struct{}{}; return nil })
				tc.setup(r)
				_ = r.s.Start()
				e := r.end()
				if e.Kind != lock.FiringSkipped || e.Reason != tc.reason || !e.Scheduled.Equal(epoch.Add(time.Second)) {
					t.Fatalf("firing ended with %+v, want skipped: %s", e, tc.reason)
				}
				// A held lock is waited for until half a period after the
				// firing.
				if tc.reason == ReasonLockHeld && e.At.Sub(e.Scheduled) != 500*time.Millisecond {
					t.Errorf("gave up %v after the firing, want 500ms", e.At.Sub(e.Scheduled))
				}
				r.idle()
				select {
				case <-ran:
					t.Fatal("skipped firing ran")
				default:
				}
				// Recorded as not run by this instance, unless its claim
				// was taken over: then by the one that took it.
				if tc.reason == ReasonLockHeld && !r.store.notRunOnly(epoch.Add(time.Second), tc.reason) ||
					tc.reason == ReasonTakenOver && len(r.store.runs()) != 0 {
					t.Fatalf("runs %+v", r.store.runs())
				}
				if h := r.locks.HeldBy(r.s.LockID("j")); h == "me" {
					t.Fatal("lock left held")
				}
				r.stop()
			})
		})
	}
}

func TestStopCancelsRunningJob(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second)
		started, ended := make(chan Run, 10), make(chan outcome, 10)
		release := newCloser()
		defer release.close()
		_ = r.s.AddJob("j", "@every 1s", blockingJob(started, release, ended))
		_ = r.s.Start()
		recv(t, started, "run")
		r.stop()
		if o := recv(t, ended, "end"); !errors.Is(o.cause, ErrStopped) {
			t.Fatalf("cause %v, want ErrStopped", o.cause)
		}
		if h := r.locks.HeldBy(r.s.LockID("j")); h != "" {
			t.Fatalf("lock held by %q after Stop", h)
		}
		if runs := r.store.runs(); len(runs) != 1 || runs[0].Outcome != OutcomeFailed {
			t.Fatalf("runs %+v", runs)
		}
		if e := r.end(); e.Kind != lock.RunEnded || !errors.Is(e.Err, ErrStopped) {
			t.Fatalf("run ended with %+v", e)
		}
		if err := r.s.Stop(context.Background()); err != nil {
			t.Fatalf("second Stop: %v", err)
		}
	})
}

func TestStopWaitsForRunningJob(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second, WithStopMode(StopWait))
		started, ended := make(chan Run, 10), make(chan outcome, 10)
		release := newCloser()
		defer release.close()
		_ = r.s.AddJob("j", "@every 1s", blockingJob(started, release, ended))
		_ = r.s.Start()
		recv(t, started, "run")
		stopped := make(chan error, 1)
		go func() { stopped <- r.s.Stop(context.Background()) }()
		synctest.Wait()
		r.s.mu.Lock()
		state := r.s.state
		r.s.mu.Unlock()
		if state != stateStopped {
			t.Fatal("Stop did not begin")
		}
		// The loop is gone; the job still runs and its lease is still renewed.
		time.Sleep(2 * time.Second)
		if _, n, _ := r.lockCounts(); n < 5 {
			t.Fatalf("%d renewals in 2 TTLs of Stop", n)
		}
		select {
		case err := <-stopped:
			t.Fatalf("Stop returned %v while the job runs", err)
		default:
		}
		release.close()
		if o := recv(t, ended, "end"); o.cause != nil {
			t.Fatalf("job cancelled: %v", o.cause)
		}
		if err := recv(t, stopped, "Stop"); err != nil {
			t.Fatal(err)
		}
		if h := r.locks.HeldBy(r.s.LockID("j")); h != "" {
			t.Fatalf("lock held by %q after Stop", h)
		}
	})
}

func TestStopWaitGivesUpAtDeadline(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second, WithStopMode(StopWait))
		started, ended := make(chan Run, 10), make(chan outcome, 10)
		release := newCloser()
		defer release.close()
		gate := make(chan struct{})
		_ = r.s.AddJob("j", "@every 1s", func(ctx context.Context) error {
			err := blockingJob(started, release, ended)(ctx)
			<-gate // finishes only when the test says so, even once cancelled
			return err
		})
		_ = r.s.Start()
		recv(t, started, "run")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := r.s.Stop(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Stop = %v, want context.Canceled", err)
		}
		if o := recv(t, ended, "end"); !errors.Is(o.cause, ErrStopped) {
			t.Fatalf("cause %v, want ErrStopped", o.cause)
		}
		close(gate)
		r.stop() // waits for the rest
		if h := r.locks.HeldBy(r.s.LockID("j")); h != "" {
			t.Fatalf("lock held by %q after Stop", h)
		}
	})
}

func TestAddJobAfterStart(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second)
		_ = r.s.Start()
		ran := make(chan Run, 1)
		time.Sleep(time.Second)
		if err := r.s.AddJob("late", "@every 5s", func(ctx context.Context) error {
			run, _ := RunFromContext(ctx)
			ran <- run
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if run := recv(t, ran, "run"); !run.Scheduled.Equal(epoch.Add(5*time.Second)) || !time.Now().Equal(run.Scheduled) {
			t.Fatalf("ran %v at %v", run.Scheduled, time.Now())
		}
		r.idle()
		r.stop()
	})
}

func TestLocationOption(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip(err)
	}
	tokyo, _ := time.LoadLocation("Asia/Tokyo")
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second, WithLocation(paris))
		noop := func(context.Context) error { return nil }
		_ = r.s.AddJob("paris", "0 2 * * *", noop)
		_ = r.s.AddJob("tokyo", "CRON_TZ=Asia/Tokyo 0 2 * * *", noop)
		infos, _ := r.s.Jobs(context.Background())
		for i, loc := range []*time.Location{paris, tokyo} {
			n := infos[i].Next.In(loc)
			if n.Hour() != 2 || n.Minute() != 0 || !n.After(epoch) || n.Sub(epoch) > 24*time.Hour {
				t.Errorf("%s: next %v", infos[i].Name, n)
			}
		}
	})
}
