package scheduler

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mongolock/mongolock/lock"
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
	r := newRig(t, time.Second)
	noop := func(context.Context) error { return nil }
	if err := r.s.AddJob("dup", "@every 1s", noop); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, jobName, spec string
		fn                  func(context.Context) error
		opts                []JobOption
		want                error
	}{
		{"empty name", "", "@daily", noop, nil, ErrInvalidJob},
		{"NUL in name", "a\x00b", "@daily", noop, nil, ErrInvalidJob},
		{"name too long", strings.Repeat("x", lock.MaxIDLength), "@daily", noop, nil, ErrInvalidJob},
		{"invalid UTF-8 name", "\xff", "@daily", noop, nil, ErrInvalidJob},
		{"nil func", "f", "@daily", nil, nil, ErrInvalidJob},
		{"duplicate", "dup", "@daily", noop, nil, ErrDuplicateJob},
		{"empty spec", "s", "", noop, nil, ErrInvalidSpec},
		{"too few fields", "s", "* * *", noop, nil, ErrInvalidSpec},
		{"seconds without WithSeconds", "s", "*/2 * * * * *", noop, nil, ErrInvalidSpec},
		{"out of range", "s", "61 * * * *", noop, nil, ErrInvalidSpec},
		{"bad step", "s", "*/0 * * * *", noop, nil, ErrInvalidSpec},
		{"unknown descriptor", "s", "@fortnightly", noop, nil, ErrInvalidSpec},
		{"zone without schedule", "s", "CRON_TZ=UTC", noop, nil, ErrInvalidSpec},
		{"unknown zone", "s", "CRON_TZ=Nowhere/Land 0 2 * * *", noop, nil, ErrInvalidSpec},
		{"every sub-second", "s", "@every 500ms", noop, nil, ErrInvalidSpec},
		{"every fractional", "s", "@every 1500ms", noop, nil, ErrInvalidSpec},
		{"every negative", "s", "@every -1s", noop, nil, ErrInvalidSpec},
		{"every garbage", "s", "@every soon", noop, nil, ErrInvalidSpec},
		{"never fires", "s", "0 0 30 2 *", noop, nil, ErrInvalidSpec},
		{"nil job option", "o", "@daily", noop, []JobOption{nil}, ErrInvalidOption},
		{"zero timeout", "o", "@daily", noop, []JobOption{JobTimeout(0)}, ErrInvalidOption},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := r.s.AddJob(tc.jobName, tc.spec, tc.fn, tc.opts...)
			if !errors.Is(err, tc.want) {
				t.Fatalf("AddJob(%q, %q) = %v, want %v", tc.jobName, tc.spec, err, tc.want)
			}
		})
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
}

func TestSecondsOption(t *testing.T) {
	r := newRig(t, time.Second, WithSeconds())
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
	want := []time.Time{epoch.Add(2 * time.Second), epoch.Add(time.Minute), epoch.Add(time.Second)}
	for i, in := range infos {
		if !in.Next.Equal(want[i]) {
			t.Errorf("%s: next %v, want %v", in.Spec, in.Next, want[i])
		}
	}
}

func TestNewRejects(t *testing.T) {
	clk := newFakeLocker(nil, time.Second)
	for _, tc := range []struct {
		name   string
		locker Locker
		keeper string
		opts   []Option
	}{
		{"nil locker", nil, "k", nil},
		{"empty keeper", clk, "", nil},
		{"nil option", clk, "k", []Option{nil}},
		{"nil location", clk, "k", []Option{WithLocation(nil)}},
		{"nil clock", clk, "k", []Option{WithClock(nil)}},
		{"zero renew", clk, "k", []Option{WithRenewInterval(0)}},
		{"negative margin", clk, "k", []Option{WithLeaseMargin(-time.Second)}},
		{"nanosecond margin", clk, "k", []Option{WithLeaseMargin(time.Nanosecond)}},
		{"margin just below the floor", clk, "k", []Option{WithLeaseMargin(MinLeaseMargin - 1)}},
		{"renew leaves no margin", clk, "k", []Option{WithRenewInterval(time.Second - MinLeaseMargin)}},
		{"renew too slow", clk, "k", []Option{WithRenewInterval(950 * time.Millisecond)}},
		{"margin too big", clk, "k", []Option{WithLeaseMargin(700 * time.Millisecond)}},
		{"bad stop mode", clk, "k", []Option{WithStopMode(StopMode(7))}},
		{"empty jobs collection", clk, "k", []Option{WithJobsCollection("")}},
		{"system runs collection", clk, "k", []Option{WithRunsCollection("system.x")}},
		{"dollar collection", clk, "k", []Option{WithJobsCollection("a$b")}},
		{"sub-second history", clk, "k", []Option{WithHistory(500 * time.Millisecond)}},
		{"negative history", clk, "k", []Option{WithHistory(-time.Hour)}},
		{"zero op timeout", clk, "k", []Option{WithOpTimeout(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := buildConfig(tc.opts)
			if err == nil {
				_, err = newScheduler(newFakeStore(nil), tc.locker, tc.keeper, cfg)
			}
			if !errors.Is(err, ErrInvalidOption) {
				t.Fatalf("got %v, want ErrInvalidOption", err)
			}
		})
	}
	if _, err := New(nil, clk, "k"); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("New(nil db): %v", err)
	}
}

// TestLeaseMarginFloor checks that the margin cannot be set below
// MinLeaseMargin, that the error says which option, and that the default
// margin is never below it either.
func TestLeaseMarginFloor(t *testing.T) {
	_, err := buildConfig([]Option{WithLeaseMargin(MinLeaseMargin / 2)})
	if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "WithLeaseMargin") ||
		!strings.Contains(err.Error(), "MinLeaseMargin") {
		t.Fatalf("margin below the floor: %v", err)
	}
	_, err = newScheduler(newFakeStore(nil), newFakeLocker(nil, time.Second), "k",
		mustConfig(t, WithRenewInterval(950*time.Millisecond)))
	if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "WithRenewInterval") ||
		!strings.Contains(err.Error(), "WithLeaseMargin") {
		t.Fatalf("renew interval plus margin over the TTL: %v", err)
	}
	for _, tc := range []struct {
		ttl  time.Duration
		opts []Option
		want time.Duration
	}{
		{time.Second, []Option{WithLeaseMargin(MinLeaseMargin)}, MinLeaseMargin},
		{time.Minute, nil, 6 * time.Second},
		{time.Second, nil, MinLeaseMargin},
		{500 * time.Millisecond, nil, MinLeaseMargin}, // TTL/10 would be 50ms
	} {
		s, err := newScheduler(newFakeStore(nil), newFakeLocker(nil, tc.ttl), "k", mustConfig(t, tc.opts...))
		if err != nil {
			t.Fatalf("TTL %v: %v", tc.ttl, err)
		}
		if s.margin != tc.want || s.margin < MinLeaseMargin {
			t.Errorf("TTL %v: margin %v, want %v", tc.ttl, s.margin, tc.want)
		}
	}
}

func mustConfig(t *testing.T, opts ...Option) config {
	t.Helper()
	cfg, err := buildConfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// idle waits until no firing is in progress.
func (r *rig) idle() {
	r.t.Helper()
	eventually(r.t, 10*time.Second, "firings to finish", func() bool { return !r.busy() })
}

func TestFiresAlignedFiringsOnce(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := newRig(t, time.Second)
	r.clock.Advance(3500 * time.Millisecond) // started off the grid
	runs := make(chan Run, 10)
	if err := r.s.AddJob("tick", "@every 10s", func(ctx context.Context) error {
		run, _ := RunFromContext(ctx)
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
		r.advanceTo(1, f)
		run := recv(t, runs, "run")
		if !run.Scheduled.Equal(f) || run.Keeper != "me" || run.Fence == 0 || run.Job != "tick" {
			t.Fatalf("run %d = %+v, want firing %v", i, run, f)
		}
		r.idle()
		if h := r.locker.holder(r.s.LockID("tick")); h != "" {
			t.Fatalf("lock held by %q after the run", h)
		}
	}
	infos, err := r.s.Jobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	in := infos[0]
	if !in.Next.Equal(epoch.Add(40*time.Second)) || !in.LastClaimed.Equal(epoch.Add(30*time.Second)) ||
		in.LastRun == nil || in.LastRun.Outcome != OutcomeSucceeded || in.ClaimedBy != "me" {
		t.Fatalf("Jobs = %+v (last run %+v)", in, in.LastRun)
	}
	hist, _ := r.s.History(context.Background(), "tick", 0)
	if len(hist) != 3 {
		t.Fatalf("history %+v", hist)
	}
	r.stop()
}

func TestMissedFiringsNotReplayed(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := newRig(t, time.Second)
	runs := make(chan Run, 10)
	_ = r.s.AddJob("tick", "@every 10s", func(ctx context.Context) error {
		run, _ := RunFromContext(ctx)
		runs <- run
		return nil
	})
	_ = r.s.Start()
	r.advanceTo(1, epoch.Add(35*time.Second)) // suspended across three firings
	if run := recv(t, runs, "run"); !run.Scheduled.Equal(epoch.Add(30 * time.Second)) {
		t.Fatalf("ran firing %v, want only the latest due one", run.Scheduled)
	}
	r.idle()
	r.advanceTo(1, epoch.Add(40*time.Second))
	if run := recv(t, runs, "run"); !run.Scheduled.Equal(epoch.Add(40 * time.Second)) {
		t.Fatalf("ran firing %v", run.Scheduled)
	}
	r.idle()
	if n := len(r.store.runs()); n != 2 {
		t.Fatalf("%d runs, want 2", n)
	}
	r.stop()
}

// closer is a channel closed once.
type closer struct {
	once sync.Once
	c    chan struct{}
}

func newCloser() *closer { return &closer{c: make(chan struct{})} }
func (c *closer) close() { c.once.Do(func() { close(c.c) }) }

// stepUntil advances the clock by step whenever n timers are armed, until
// done is closed or the clock reaches limit.
func (r *rig) stepUntil(n int, step time.Duration, limit time.Time, done *closer) {
	r.t.Helper()
	for r.clock.Now().Before(limit) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		go func() {
			select {
			case <-done.c:
				cancel()
			case <-ctx.Done():
			}
		}()
		err := r.clock.BlockUntilContext(ctx, n)
		cancel()
		select {
		case <-done.c:
			return
		default:
		}
		if err != nil {
			r.t.Fatalf("waiting for %d timers at %v: %v", n, r.clock.Now().Sub(epoch), err)
		}
		r.clock.Advance(step)
	}
}

type outcome struct {
	cause error
	at    time.Time
}

// blockingJob runs until its context is done or release is closed, and
// reports when and why it ended through ended.
func blockingJob(r *rig, started chan<- Run, release *closer, ended chan<- outcome) func(context.Context) error {
	return func(ctx context.Context) error {
		run, _ := RunFromContext(ctx)
		started <- run
		select {
		case <-ctx.Done():
			ended <- outcome{context.Cause(ctx), r.clock.Now()}
			return ctx.Err()
		case <-release.c:
			ended <- outcome{nil, r.clock.Now()}
			return nil
		}
	}
}

func TestLongJobKeepsLeaseAndSkipsFirings(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := newRig(t, time.Second) // renew every 333ms, margin 100ms
	started, ended := make(chan Run, 10), make(chan outcome, 10)
	release := newCloser()
	first := true
	_ = r.s.AddJob("long", "@every 1s", func(ctx context.Context) error {
		if first {
			first = false
			return blockingJob(r, started, release, ended)(ctx)
		}
		run, _ := RunFromContext(ctx)
		started <- run
		return nil
	})
	_ = r.s.Start()
	r.advanceTo(1, epoch.Add(time.Second))
	recv(t, started, "first run")
	never := newCloser()
	// Three TTLs, in steps shorter than the renew interval: the loop, the
	// renewal and the expiry timers are armed between steps.
	r.stepUntil(3, 50*time.Millisecond, epoch.Add(4100*time.Millisecond), never)
	select {
	case o := <-ended:
		t.Fatalf("long job ended early at %v: %v", o.at.Sub(epoch), o.cause)
	case run := <-started:
		t.Fatalf("firing %v started during the long run", run.Scheduled.Sub(epoch))
	default:
	}
	if _, renewals, _ := r.locker.counts(); renewals < 8 {
		t.Fatalf("%d renewals in 3 TTLs", renewals)
	}
	if h := r.locker.holder(r.s.LockID("long")); h != "me" {
		t.Fatalf("lock holder %q during the run", h)
	}
	release.close()
	if o := recv(t, ended, "end"); o.cause != nil {
		t.Fatalf("cancelled: %v", o.cause)
	}
	r.idle()
	r.advanceTo(1, epoch.Add(5*time.Second))
	if run := recv(t, started, "next run"); !run.Scheduled.Equal(epoch.Add(5 * time.Second)) {
		t.Fatalf("next run for firing %v", run.Scheduled.Sub(epoch))
	}
	r.idle()
	runs := r.store.runs()
	if len(runs) != 2 || !runs[0].Scheduled.Equal(epoch.Add(time.Second)) || runs[0].Outcome != OutcomeSucceeded {
		t.Fatalf("runs %+v", runs)
	}
	r.stop()
}

func TestLeaseLostCancelsJob(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(r *rig)
		// latest is the latest the job may be cancelled, after the start at 1s.
		latest time.Duration
	}{
		// Renewals fail: cancelled at the deadline minus the margin.
		{"renewals fail", func(r *rig) { r.locker.setRenewErr(errBoom) }, 1900 * time.Millisecond},
		// Another keeper took the lock: cancelled at the first renewal.
		{"taken over", func(r *rig) { r.locker.take(r.s.LockID("j"), "other") }, 1350 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			r := newRig(t, time.Second)
			started, ended := make(chan Run, 10), make(chan outcome, 10)
			release := newCloser()
			defer release.close()
			_ = r.s.AddJob("j", "@every 1m", blockingJob(r, started, release, ended))
			_ = r.s.Start()
			r.advanceTo(1, epoch.Add(time.Minute))
			recv(t, started, "run")
			tc.fault(r)
			cancelled := newCloser()
			go func() {
				o := recv(t, ended, "end")
				if !errors.Is(o.cause, lock.ErrLeaseLost) {
					t.Errorf("cause %v, want lock.ErrLeaseLost", o.cause)
				}
				if d := o.at.Sub(epoch.Add(time.Minute)); d > tc.latest-time.Second {
					t.Errorf("cancelled %v after start, want at most %v", d, tc.latest-time.Second)
				}
				cancelled.close()
			}()
			r.stepUntil(3, 10*time.Millisecond, epoch.Add(time.Minute+2*time.Second), cancelled)
			select {
			case <-cancelled.c:
			default:
				t.Fatal("job not cancelled before its lease deadline")
			}
			r.idle()
			runs := r.store.runs()
			if len(runs) != 1 || runs[0].Outcome != OutcomeFailed || !strings.Contains(runs[0].Error, lock.ErrLeaseLost.Error()) {
				t.Fatalf("runs %+v", runs)
			}
			r.stop()
		})
	}
}

func TestJobTimeout(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := newRig(t, time.Second)
	started, ended := make(chan Run, 10), make(chan outcome, 10)
	release := newCloser()
	defer release.close()
	_ = r.s.AddJob("j", "@every 1m", blockingJob(r, started, release, ended), JobTimeout(1500*time.Millisecond))
	_ = r.s.Start()
	r.advanceTo(1, epoch.Add(time.Minute))
	recv(t, started, "run")
	done := newCloser()
	var o outcome
	go func() { o = recv(t, ended, "end"); done.close() }()
	// Loop, renewal, expiry and timeout timers.
	r.stepUntil(4, 50*time.Millisecond, epoch.Add(time.Minute+3*time.Second), done)
	<-done.c
	if !errors.Is(o.cause, ErrJobTimeout) || o.at.Sub(epoch.Add(time.Minute)) != 1500*time.Millisecond {
		t.Fatalf("ended at %v with %v, want ErrJobTimeout at 1.5s", o.at.Sub(epoch.Add(time.Minute)), o.cause)
	}
	r.idle()
	if runs := r.store.runs(); len(runs) != 1 || !strings.Contains(runs[0].Error, ErrJobTimeout.Error()) {
		t.Fatalf("runs %+v", runs)
	}
	r.stop()
}

func TestPanicAndErrorRecorded(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := newRig(t, time.Second)
	n := 0
	ran := make(chan struct{}, 10)
	_ = r.s.AddJob("j", "@every 1s", func(context.Context) error {
		n++
		ran <- struct{}{}
		switch n {
		case 1:
			panic("kaboom")
		case 2:
			return errBoom
		}
		return nil
	})
	_ = r.s.Start()
	for i := 1; i <= 3; i++ {
		r.advanceTo(1, epoch.Add(time.Duration(i)*time.Second))
		recv(t, ran, "run")
		r.idle()
		if h := r.locker.holder(r.s.LockID("j")); h != "" {
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
	if runs[1].Outcome != OutcomeFailed || runs[1].Error != errBoom.Error() {
		t.Errorf("error recorded as %+v", runs[1])
	}
	if runs[2].Outcome != OutcomeSucceeded || runs[2].Error != "" {
		t.Errorf("success recorded as %+v", runs[2])
	}
	r.stop()
}

func TestClaimedFiringSkipped(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(r *rig)
	}{
		{"lock held elsewhere", func(r *rig) { r.locker.take(r.s.LockID("j"), "other") }},
		{"later firing ran meanwhile", func(r *rig) {
			r.store.onClaim = func(job string, f time.Time) {
				// Another instance claims and starts the next firing
				// between this instance's claim and its start record.
				r.store.mu.Lock()
				r.store.last[job] = f.Add(time.Second)
				r.store.run[job] = &Run{Job: job, Keeper: "other", Scheduled: f.Add(time.Second)}
				r.store.mu.Unlock()
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			r := newRig(t, time.Minute)
			ran := make(chan struct{}, 1)
			_ = r.s.AddJob("j", "@every 1s", func(context.Context) error { ran <- struct{}{}; return nil })
			tc.setup(r)
			_ = r.s.Start()
			r.advanceTo(1, epoch.Add(time.Second))
			eventually(t, 10*time.Second, "claim", func() bool {
				r.store.mu.Lock()
				defer r.store.mu.Unlock()
				return !r.store.last["j"].IsZero()
			})
			// A held lock is waited for until half a period after the
			// firing: the loop's timer and the pause between attempts.
			r.stepWhileBusy(2, 10*time.Millisecond, epoch.Add(1900*time.Millisecond))
			select {
			case <-ran:
				t.Fatal("skipped firing ran")
			default:
			}
			if len(r.store.runs()) != 0 {
				t.Fatalf("runs %+v", r.store.runs())
			}
			if h := r.locker.holder(r.s.LockID("j")); h == "me" {
				t.Fatal("lock left held")
			}
			r.stop()
		})
	}
}

func TestStopCancelsRunningJob(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := newRig(t, time.Second)
	started, ended := make(chan Run, 10), make(chan outcome, 10)
	release := newCloser()
	defer release.close()
	_ = r.s.AddJob("j", "@every 1s", blockingJob(r, started, release, ended))
	_ = r.s.Start()
	r.advanceTo(1, epoch.Add(time.Second))
	recv(t, started, "run")
	r.stop()
	if o := recv(t, ended, "end"); !errors.Is(o.cause, ErrStopped) {
		t.Fatalf("cause %v, want ErrStopped", o.cause)
	}
	if h := r.locker.holder(r.s.LockID("j")); h != "" {
		t.Fatalf("lock held by %q after Stop", h)
	}
	if runs := r.store.runs(); len(runs) != 1 || runs[0].Outcome != OutcomeFailed {
		t.Fatalf("runs %+v", runs)
	}
	if err := r.s.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestStopWaitsForRunningJob(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := newRig(t, time.Second, WithStopMode(StopWait))
	started, ended := make(chan Run, 10), make(chan outcome, 10)
	release := newCloser()
	_ = r.s.AddJob("j", "@every 1s", blockingJob(r, started, release, ended))
	_ = r.s.Start()
	r.advanceTo(1, epoch.Add(time.Second))
	recv(t, started, "run")
	stopped := make(chan error, 1)
	go func() { stopped <- r.s.Stop(context.Background()) }()
	eventually(t, 10*time.Second, "Stop to begin", func() bool {
		r.s.mu.Lock()
		defer r.s.mu.Unlock()
		return r.s.state == stateStopped
	})
	// The loop is gone; the job still runs and its lease is still renewed.
	r.settle(2)
	r.clock.Advance(400 * time.Millisecond)
	eventually(t, 10*time.Second, "renewal during Stop", func() bool { _, n, _ := r.locker.counts(); return n > 0 })
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
	if h := r.locker.holder(r.s.LockID("j")); h != "" {
		t.Fatalf("lock held by %q after Stop", h)
	}
}

func TestStopWaitGivesUpAtDeadline(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := newRig(t, time.Second, WithStopMode(StopWait))
	started, ended := make(chan Run, 10), make(chan outcome, 10)
	release := newCloser()
	defer release.close()
	gate := make(chan struct{})
	_ = r.s.AddJob("j", "@every 1s", func(ctx context.Context) error {
		err := blockingJob(r, started, release, ended)(ctx)
		<-gate // finishes only when the test says so, even once cancelled
		return err
	})
	_ = r.s.Start()
	r.advanceTo(1, epoch.Add(time.Second))
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
	if h := r.locker.holder(r.s.LockID("j")); h != "" {
		t.Fatalf("lock held by %q after Stop", h)
	}
}

func TestAddJobAfterStart(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := newRig(t, time.Second)
	_ = r.s.Start()
	ran := make(chan Run, 1)
	r.settle(0)
	if err := r.s.AddJob("late", "@every 5s", func(ctx context.Context) error {
		run, _ := RunFromContext(ctx)
		ran <- run
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	r.advanceTo(1, epoch.Add(5*time.Second))
	if run := recv(t, ran, "run"); !run.Scheduled.Equal(epoch.Add(5 * time.Second)) {
		t.Fatalf("ran %v", run.Scheduled)
	}
	r.idle()
	r.stop()
}

func TestLocationOption(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip(err)
	}
	tokyo, _ := time.LoadLocation("Asia/Tokyo")
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
}
