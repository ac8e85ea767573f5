package scheduler

import (
	"context"
	"errors"
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

// Regressions found by an independent review of the claims protocol; each
// failed before its fix.

// TestAdmissionIgnoresRunningJobs: a slow claim while a long job runs
// lowers the admission limit, but running jobs do not count against it:
// the other jobs go on running.
func TestAdmissionIgnoresRunningJobs(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		locks := locktest.New(locktest.WithTTL(3 * time.Second))
		store := newFakeStore(locks.Clock())
		a := newTwin(t, locks, store, "a")
		slowOnce := true
		a.st.beforeClaim = func(job string, f time.Time) {
			if job == "short" && slowOnce && f.After(epoch.Add(5*time.Second)) {
				slowOnce = false
				time.Sleep(2 * time.Second) // one slow claim: a database hiccup
			}
		}
		var shortRuns atomic.Int64
		_ = a.s.AddJob("long", "@every 1h", func(ctx context.Context) error {
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Minute):
			}
			return nil
		}, JobMisfirePolicy(MisfireSkip()))
		_ = a.s.AddJob("short", "@every 1s", func(context.Context) error { shortRuns.Add(1); return nil })
		_ = a.s.Start()
		store.control("long", func(c *controlDoc) { c.Trigger = epoch.Add(time.Second) }) // long runs now
		time.Sleep(30 * time.Second)
		synctest.Wait()
		before := shortRuns.Load()
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if n := shortRuns.Load() - before; n < 590 {
			t.Errorf("short job (@every 1s) ran %d times in 10 minutes while the long one ran", n)
		}
	})
}

// TestStopOrCloseBeforeTheRunLeavesTheClaim: an instance whose Session
// closes before it takes the job's lock leaves the claim to be taken
// over: the other instance runs the firing. One that stops while it
// records a firing's start runs it, once the start applied: it is final.
func TestStopOrCloseBeforeTheRunLeavesTheClaim(t *testing.T) {
	for _, tc := range []string{"stop while recording the start", "session closed after the claim"} {
		t.Run(tc, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			synctest.Test(t, func(t *testing.T) {
				f1 := epoch.Add(10 * time.Second)
				locks := locktest.New(locktest.WithTTL(time.Second))
				store := newFakeStore(locks.Clock())
				a, b := newTwin(t, locks, store, "a"), newTwin(t, locks, store, "b")
				b.slowClaims(func(time.Time) bool { return true }) // a claims
				stopped := make(chan error, 1)
				if tc == "stop while recording the start" {
					store.onStart = func(_ context.Context, r Run) (bool, error) {
						if r.Keeper == "a" && r.Scheduled.Equal(f1) {
							// Stop begins while the write is on the wire.
							go func() { stopped <- a.s.Stop(context.Background()) }()
							for a.s.ctx.Err() == nil {
								time.Sleep(time.Millisecond)
							}
						}
						return true, nil
					}
				} else {
					a.st.afterClaim = func(_ string, f time.Time) {
						if f.Equal(f1) {
							_ = a.session.Close()
						}
					}
				}
				log := newRunLog()
				for _, tw := range []*twin{a, b} {
					_ = tw.s.AddJob("j", "@every 10s", log.job(nil))
					_ = tw.s.Start()
				}
				time.Sleep(time.Until(f1.Add(5 * time.Second)))
				if tc == "stop while recording the start" {
					if err := recv(t, stopped, "a's Stop"); err != nil {
						t.Fatal(err)
					}
				}
				synctest.Wait()
				ran := log.all()
				// A start that applied is final: a, whose lease was still
				// trusted, runs f1 (its job cancelled by Stop at once).
				by := "b"
				if tc == "stop while recording the start" {
					by = "a"
				}
				if len(ran) != 1 || ran[0].Keeper != by || !ran[0].Scheduled.Equal(f1) {
					t.Errorf("runs %+v, want f1 once, by %s; history %q", ran, by, hists(store.runs()))
				}
			})
		})
	}
}

// TestPresenceIDTooLong: a keeper id whose presence lock id would be too
// long is refused by New, rather than making a Scheduler that never claims.
func TestPresenceIDTooLong(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	locks := locktest.New()
	session, err := lock.NewSession(locks, lock.WithKeeperID(strings.Repeat("k", lock.MaxIDLength-10)))
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	if _, err := newScheduler(newFakeStore(locks.Clock()), session, defaultConfig()); err == nil ||
		!strings.Contains(err.Error(), "presence lock id") {
		t.Fatalf("New with a keeper id that makes the presence lock id too long: %v", err)
	}
}

// TestTwoSchedulersOneSession: two Schedulers on one Session, each with its
// jobs collection, each hold a presence lease and run their jobs.
func TestTwoSchedulersOneSession(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		locks := locktest.New(locktest.WithTTL(3 * time.Second))
		session, err := lock.NewSession(locks, lock.WithKeeperID("k"))
		if err != nil {
			t.Fatal(err)
		}
		defer session.Close()
		var mu sync.Mutex
		runs := map[string]int{}
		var ss []*Scheduler
		for _, name := range []string{"a", "b"} {
			cfg, _ := buildConfig([]Option{WithJobsCollection("jobs_" + name)})
			s, err := newScheduler(newFakeStore(locks.Clock()), session, cfg)
			if err != nil {
				t.Fatal(err)
			}
			_ = s.AddJob(name, "@every 1s", func(context.Context) error {
				mu.Lock()
				defer mu.Unlock()
				runs[name]++
				return nil
			})
			ss = append(ss, s)
		}
		for _, s := range ss {
			_ = s.Start()
		}
		time.Sleep(10*time.Second + 500*time.Millisecond)
		synctest.Wait()
		for _, s := range ss {
			_ = s.Stop(context.Background())
		}
		mu.Lock()
		defer mu.Unlock()
		if runs["a"] != 10 || runs["b"] != 10 {
			t.Errorf("runs %v, want 10 each", runs)
		}
	})
}

// TestTriggerAtOnce: Scheduler.Trigger is claimed by this instance at
// once, not a poll interval later.
func TestTriggerAtOnce(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Minute, WithPollInterval(time.Hour))
		log := newRunLog()
		_ = r.s.AddJob("j", "0 0 1 1 *", log.job(nil))
		_ = r.s.Start()
		time.Sleep(time.Second) // the first poll registered j
		synctest.Wait()
		triggered := time.Now()
		r.store.control("j", func(c *controlDoc) { c.Trigger = triggered })
		r.s.mu.Lock()
		j := r.s.jobs["j"]
		r.s.mu.Unlock()
		r.s.controlDone(j, lock.JobTriggered, "")
		time.Sleep(time.Second)
		synctest.Wait()
		if ran := log.all(); len(ran) != 1 || !ran[0].Scheduled.Equal(triggered) || !ran[0].Triggered {
			t.Errorf("runs %+v within a second of the trigger (poll interval 1h)", ran)
		}
		r.stop()
	})
}

// slowPollStore returns its poll's read late, once: a read taken while the
// firing's own goroutine still works on the claim, returned after that
// goroutine settled it and ended.
type slowPollStore struct {
	*fakeStore
	once  sync.Once
	delay time.Duration
}

func (s *slowPollStore) poll(ctx context.Context, jobs []claimReq) ([]jobDoc, error) {
	docs, err := s.fakeStore.poll(ctx, jobs)
	for _, d := range docs {
		if d.Pending {
			s.once.Do(func() { time.Sleep(s.delay) })
		}
	}
	return docs, err
}

// TestStalePollDoesNotResumeSettledWork: a poll whose read of this
// instance's own pending claim comes back after the firing that had it
// settled it does not do the work again.
func TestStalePollDoesNotResumeSettledWork(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		locks := locktest.New(locktest.WithTTL(time.Second))
		fs := newFakeStore(locks.Clock())
		st := &slowPollStore{fakeStore: fs}
		obs := newRecorder()
		session, err := lock.NewSession(locks, lock.WithKeeperID("a"), lock.WithObserver(obs))
		if err != nil {
			t.Fatal(err)
		}
		defer session.Close()
		cfg, _ := buildConfig(nil)
		s, err := newScheduler(st, session, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.Stop(context.Background()) }()
		poll := s.pollInterval()
		st.delay = 3 * poll
		f1 := epoch.Add(10 * time.Second)
		// The claim of f1 waits a little more than a poll interval for its
		// lock (the previous run finishing elsewhere, say): pending, stale.
		locks.BeforeCall(func(_ context.Context, c locktest.Call) error {
			if c.Op == locktest.OpAcquire && jobCall(c) && time.Now().Before(f1.Add(poll+poll/2)) && !time.Now().Before(f1) {
				time.Sleep(poll + poll/2)
			}
			return nil
		})
		// The second start of f1 (by the resumed work) fails on the wire.
		starts := 0
		fs.onStart = func(_ context.Context, r Run) (bool, error) {
			if r.Scheduled.Equal(f1) {
				starts++
				if starts == 2 {
					return false, errors.New("connection reset")
				}
			}
			return true, nil
		}
		calls := 0
		_ = s.AddJob("j", "@every 10s", func(context.Context) error { calls++; return nil })
		_ = s.Start()
		time.Sleep(f1.Add(6 * poll).Sub(time.Now()))
		synctest.Wait()
		var skips []string
		for _, e := range obs.all(lock.FiringSkipped) {
			if e.Scheduled.Equal(f1) {
				skips = append(skips, e.Reason)
			}
		}
		d := fs.running("j")
		if starts > 1 || len(skips) > 0 || calls != 1 {
			t.Logf("job called %d times; f1 start attempts %d; f1 skip events %q; history %q", calls, starts, skips, hists(fs.runs()))
			t.Errorf("f1 ran and settled, yet its work was resumed from a stale poll read and tried again")
		}
		if d == nil || d.Outcome != OutcomeSucceeded {
			t.Errorf("f1 ran and succeeded, but its record now says %+v", d)
		}
	})
}

// TestAdmissionTimesEachCatchUpRunOnItsOwn: a claim that covers missed
// firings runs them one after another; each run's setup is timed from its
// own start, not from the claim's dispatch, else the runs before it count
// as load, the admission limit falls to one, and jobs that fire together
// afterwards are refused as overloaded. (Found by the leader-only
// integration test: after a failover with MisfireRunAll the limit stayed at
// one.)
func TestAdmissionTimesEachCatchUpRunOnItsOwn(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		const period = 10 * time.Second
		// f(0) ran; f(1)..f(5) were missed, f(5) at the epoch.
		f := func(i int) time.Time { return epoch.Add(time.Duration(i-5) * period) }
		r := newRig(t, time.Second, WithMisfirePolicy(MisfireRunAll(time.Hour, 10)))
		log := newRunLog()
		jobs := []string{"a", "b", "c"}
		for _, name := range jobs {
			d := r.store.doc(name)
			d.Last, d.Done, d.By, d.At = f(0), f(0), "gone", f(0)
			d.Run = runDoc{Keeper: "gone", Scheduled: f(0), Start: f(0), End: f(0), Outcome: string(OutcomeSucceeded)}
			// Each run takes a second: far more than a setup may.
			err := r.s.AddJob(name, "@every 10s", log.job(func(context.Context, Run) error {
				time.Sleep(time.Second)
				return nil
			}))
			if err != nil {
				t.Fatal(err)
			}
		}
		sleepUntil(epoch.Add(time.Second))
		if err := r.s.Start(); err != nil {
			t.Fatal(err)
		}
		// The catch-up (five runs per job) ends by f(5)+6s; f(6) is due at
		// f(5)+10s for all three jobs at once.
		sleepUntil(f(6).Add(5 * time.Second))
		r.idle()
		for _, e := range r.obs.all(lock.FiringSkipped) {
			t.Errorf("%s's firing at %v skipped: %s", e.Job, e.Scheduled.Sub(epoch), e.Reason)
		}
		ran := map[string]int{}
		for _, run := range log.all() {
			ran[run.Job]++
		}
		for _, name := range jobs {
			if ran[name] != 6 {
				t.Errorf("job %s ran %d times, want 6 (five caught up, then f(6))", name, ran[name])
			}
		}
		r.stop()
	})
}
