package scheduler

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/goleak"

	"github.com/mongolock/mongolock/internal/simclock"
	"github.com/mongolock/mongolock/internal/simdb"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
)

// Targeted tests of findings the simulation (internal/sim) reaches only
// by chance: each plays the one sequence that broke a promise, on the
// simulated server, with the real store.

// simInstance is a Scheduler on srv through a link of its own with plan,
// on a clock offset from the bubble's time, with a Session whose TTL is
// ttl. It is stopped, and its Session closed, when the test ends.
type simInstance struct {
	s       *Scheduler
	session *lock.Session
	clock   *simclock.Clock
	runs    chan Run
}

func newSimInstance(t *testing.T, srv *simdb.Server, name string, offset, ttl time.Duration, plan simdb.Plan, opts ...Option) *simInstance {
	t.Helper()
	client, err := srv.NewLink(name, plan).Connect(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	in := &simInstance{clock: simclock.New(offset), runs: make(chan Run, 100)}
	db := client.Database("app")
	locker, err := lock.New(db, lock.WithTTL(ttl), lock.WithClock(in.clock))
	if err != nil {
		t.Fatal(err)
	}
	if in.session, err = lock.NewSession(locker, lock.WithKeeperID(name)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.session.Close() })
	if in.s, err = New(db, in.session, opts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = in.s.Stop(ctx)
	})
	return in
}

// fastPlan is a link's plan with no faults: each command a millisecond
// each way.
func fastPlan(bson.D) simdb.Fate { return simdb.Fate{Send: time.Millisecond, Reply: time.Millisecond} }

// record is a job that sends its run to in.runs.
func (in *simInstance) record(ctx context.Context) error {
	r, _ := RunFromContext(ctx)
	in.runs <- r
	return nil
}

// scheduledRuns drains in.runs: the firings run, by their time since
// base.
func (in *simInstance) scheduledRuns(base time.Time) []time.Duration {
	var out []time.Duration
	for {
		select {
		case r := <-in.runs:
			out = append(out, r.Scheduled.Sub(base))
		default:
			return out
		}
	}
}

// observe records in's events from now on.
func (in *simInstance) observe(t *testing.T) *recorder {
	t.Helper()
	rec := newRecorder()
	if err := in.session.AddObserver(rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// runJobFor registers job "j" with spec and fn, starts in's scheduler and
// lets d pass in the bubble, until every goroutine waits.
func (in *simInstance) runJobFor(t *testing.T, spec string, fn func(context.Context) error, d time.Duration) {
	t.Helper()
	if err := in.s.AddJob("j", spec, fn); err != nil {
		t.Fatal(err)
	}
	if err := in.s.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(d)
	synctest.Wait()
}

// isStart reports whether cmd is a start record of a run of the jobs
// collection: an update setting its outcome to running.
func isStart(cmd bson.D) bool {
	if len(cmd) == 0 || cmd[0].Value != DefaultJobsCollection {
		return false
	}
	var update bson.D
	switch cmd[0].Key {
	case "findAndModify":
		update, _ = lookupD(cmd, "update").(bson.D)
	case "update":
		ups, _ := lookupD(cmd, "updates").(bson.A)
		if len(ups) == 0 {
			return false
		}
		st, _ := ups[0].(bson.D)
		update, _ = lookupD(st, "u").(bson.D)
	default:
		return false
	}
	set, _ := lookupD(update, "$set").(bson.D)
	return lookupD(set, fieldOutcome) == string(OutcomeRunning)
}

func lookupD(d bson.D, key string) any {
	for _, e := range d {
		if e.Key == key {
			return e.Value
		}
	}
	return nil
}

// TestLateStartAfterItsUndo (finding 3): the start of a firing reaches the
// server after the client gave up on it and after the undo that followed
// (here: it travels longer than the op timeout). The undo found nothing
// to undo; the start then lands, settling the firing as running, and
// nobody ever runs it. The undo must leave the claim so that a late start
// cannot apply, and the firing runs, late.
func TestLateStartAfterItsUndo(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		base := time.Now()
		srv := simdb.NewServer(simdb.MongoDB, 0)
		var late atomic.Bool
		plan := func(cmd bson.D) simdb.Fate {
			if isStart(cmd) && late.CompareAndSwap(false, true) {
				// After the 1s op timeout and the undo that follows it,
				// before the claim would be resumed.
				return simdb.Fate{Send: 1500 * time.Millisecond}
			}
			return fastPlan(cmd)
		}
		a := newSimInstance(t, srv, "a", 0, 3*time.Second, plan, WithOpTimeout(time.Second))
		if err := a.s.AddJob("j", "@every 10s", a.record); err != nil {
			t.Fatal(err)
		}
		if err := a.s.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(25 * time.Second)
		synctest.Wait()
		got := a.scheduledRuns(base)
		if len(got) != 2 || got[0] != 10*time.Second || got[1] != 20*time.Second {
			t.Errorf("runs of the firings %v, want 10s (late) and 20s", got)
		}
		recs, err := a.s.Jobs(context.Background())
		if err != nil || len(recs) != 1 || recs[0].LastRun == nil || recs[0].LastRun.Outcome == OutcomeRunning {
			t.Errorf("records %+v %v: a run left running", recs, err)
		}
	})
}

// TestClaimResumedWhateverTheClock (finding 1): an instance whose clock is
// ten minutes behind the server's leaves its claim pending after a failed
// start. It used to compare its own clock with the server's claim time to
// decide when to resume the claim, and so waited ten minutes, while no
// other instance could take it over (its presence lease was live), and
// every firing of the job was lost meanwhile.
func TestClaimResumedWhateverTheClock(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		base := time.Now()
		srv := simdb.NewServer(simdb.MongoDB, 10*time.Minute)
		var failed atomic.Int32
		plan := func(cmd bson.D) simdb.Fate {
			if isStart(cmd) && failed.Add(1) <= 2 { // the write and the driver's retry
				return simdb.Fate{Drop: true}
			}
			return fastPlan(cmd)
		}
		a := newSimInstance(t, srv, "a", 0, 3*time.Second, plan, WithOpTimeout(time.Second))
		if err := a.s.AddJob("j", "@every 10s", a.record); err != nil {
			t.Fatal(err)
		}
		if err := a.s.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(45 * time.Second)
		synctest.Wait()
		got := a.scheduledRuns(base)
		// Firings fall due by the server's clock, 10 minutes ahead of the
		// instance's.
		want := []time.Duration{10*time.Minute + 10*time.Second, 10*time.Minute + 20*time.Second,
			10*time.Minute + 30*time.Second, 10*time.Minute + 40*time.Second}
		if len(got) != len(want) {
			t.Fatalf("runs of the firings %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("runs of the firings %v, want %v", got, want)
			}
		}
	})
}

// TestNoRetryOnLostLease (finding 4): a job fails, and while it waits to
// be tried again its lease stops being trusted (here the wall clock moves
// past it, as after a suspend, before the keep-alive looks). The retry
// must not start: another instance may be running the next firing.
func TestNoRetryOnLostLease(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		clk := simclock.New(0)
		locks := locktest.New(locktest.WithTTL(3*time.Second), locktest.WithClock(clk))
		r := rigOn(t, locks, nil)
		var mu sync.Mutex
		var attempts []int
		err := r.s.AddJob("j", "@every 10s", func(ctx context.Context) error {
			run, _ := RunFromContext(ctx)
			mu.Lock()
			attempts = append(attempts, run.Attempt)
			mu.Unlock()
			if run.Attempt == 1 {
				// Between two wakes of the keep-alive (every retry period,
				// 200ms here), the wall clock jumps past the lease, not
				// past the next firing.
				time.Sleep(100 * time.Millisecond)
				clk.Step(4 * time.Second)
				return errBoom
			}
			return nil
		}, JobRetries(1, lock.Backoff{First: time.Millisecond, Max: time.Millisecond}))
		if err != nil {
			t.Fatal(err)
		}
		_ = r.s.Start()
		e := r.end()
		mu.Lock()
		defer mu.Unlock()
		if len(attempts) != 1 {
			t.Fatalf("attempts %v, want only the first: the lease was lost before the retry (%+v)", attempts, e)
		}
		r.stop()
	})
}

// TestTwoSchedulersOneSessionOneCollection (finding 2): two Schedulers on one Session
// and one jobs collection each run their jobs. They shared one presence
// lock id, which the Session refused to the second: it claimed nothing.
func TestTwoSchedulersOneSessionOneCollection(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		base := time.Now()
		srv := simdb.NewServer(simdb.MongoDB, 0)
		a := newSimInstance(t, srv, "a", 0, 3*time.Second, nil)
		b, err := New(a.s.mst.jobs.Database(), a.session)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = b.Stop(context.Background()) }()
		if err := a.s.AddJob("x", "@every 10s", a.record); err != nil {
			t.Fatal(err)
		}
		if err := b.AddJob("y", "@every 10s", a.record); err != nil {
			t.Fatal(err)
		}
		_ = a.s.Start()
		_ = b.Start()
		time.Sleep(25 * time.Second)
		synctest.Wait()
		ran := map[string]int{}
		for {
			select {
			case r := <-a.runs:
				ran[r.Job]++
				continue
			default:
			}
			break
		}
		if ran["x"] != 2 || ran["y"] != 2 {
			t.Errorf("runs %v, want 2 of each of x and y (firings 10s and 20s) since %v", ran, base)
		}
	})
}

// TestFiringsFallDueByTheServersClock: an instance whose clock is 10
// minutes behind the server's, or ahead of it, fires the firings due by the
// server's clock, each when the server's clock reaches it: not those of
// its own clock, 10 minutes stale (each a misfire) or 10 minutes early.
func TestFiringsFallDueByTheServersClock(t *testing.T) {
	for _, offset := range []time.Duration{-10 * time.Minute, 10 * time.Minute} {
		t.Run(offset.String(), func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			synctest.Test(t, func(t *testing.T) {
				base := time.Now() // the server's clock, at 0 offset
				srv := simdb.NewServer(simdb.MongoDB, 0)
				plan := fastPlan
				a := newSimInstance(t, srv, "a", offset, 3*time.Second, plan, WithOpTimeout(time.Second))
				rec := a.observe(t)
				a.runJobFor(t, "@every 10s", a.record, 45*time.Second)
				got := a.scheduledRuns(base)
				if len(got) < 4 {
					t.Fatalf("runs of the firings %v (from the server's time at Start), want 4 or more", got)
				}
				for i, f := range got {
					if f < -time.Second || f > 45*time.Second || i > 0 && f-got[i-1] != 10*time.Second {
						t.Fatalf("runs of the firings %v (from the server's time at Start), want 10s apart within [0, 45s]", got)
					}
				}
				var late []time.Duration
				for _, e := range rec.all(lock.RunStarted) {
					late = append(late, e.Lateness)
				}
				for _, l := range late {
					if l < 0 || l > time.Second {
						t.Errorf("runs started late by %v, want each within a second of its firing by the server's clock", late)
						break
					}
				}
			})
		})
	}
}

// TestLockWaitByTheServersClock: an instance whose clock is 10 minutes
// behind the server's gives up waiting for a job's lock held elsewhere
// (OverlapSkip) its lock wait after the firing by the server's clock, as
// an instance whose clock is right does, not 10 minutes later: the wait's
// end is set from the firing's time, which is the server's.
func TestLockWaitByTheServersClock(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		srv := simdb.NewServer(simdb.MongoDB, 0)
		plan := fastPlan
		a := newSimInstance(t, srv, "a", -10*time.Minute, 3*time.Second, plan, WithOpTimeout(time.Second))
		b := newSimInstance(t, srv, "b", 0, 3*time.Second, plan)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		taken, err := b.session.AcquireLocks(ctx, DefaultLockPrefix+"j")
		if err != nil || len(taken.Leases) != 1 {
			t.Fatalf("hold j's lock: %v, %+v", err, taken)
		}
		rec := a.observe(t)
		a.runJobFor(t, "@every 10s", a.record, 45*time.Second)
		var waited []time.Duration // from each firing to its skip, by the server's (true) clock
		for _, e := range rec.all(lock.FiringSkipped) {
			if e.Reason == ReasonLockHeld {
				waited = append(waited, e.At.Add(10*time.Minute).Sub(e.Scheduled)) // At is a's clock, 10 minutes behind
			}
		}
		if len(waited) < 3 {
			t.Fatalf("firings given up for the lock held elsewhere after %v, want 3 or more", waited)
		}
		for _, w := range waited {
			if w < 0 || w > 5*time.Second {
				t.Fatalf("firings given up for the lock held elsewhere after %v, want each within its lock wait (3s) and a retry of its firing", waited)
			}
		}
	})
}

// TestLateFiringSkipsRunGoingPastItsWait: a firing claimed late (here by
// an instance that starts after it fell, and claims it at Start) waits a
// TTL for a job's lock held elsewhere, since the holder may have died; if
// the holder was alive, its run went on at the firing's time past the
// wait OverlapSkip allows, and the firing is skipped ("previous run still
// going"), as it would have been had it been claimed on time, not run
// once the lock came free.
func TestLateFiringSkipsRunGoingPastItsWait(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		base := time.Now() // the server's clock; firings every 10s from it
		srv := simdb.NewServer(simdb.MongoDB, 0)
		plan := fastPlan
		a := newSimInstance(t, srv, "a", 0, 3*time.Second, plan, WithOpTimeout(time.Second))
		b := newSimInstance(t, srv, "b", 0, 3*time.Second, plan, WithOpTimeout(time.Second))
		long := true
		if err := a.s.AddJob("j", "*/10 * * * * *", func(ctx context.Context) error {
			if long { // the first run goes on until 5s after the next firing
				long = false
				time.Sleep(15 * time.Second)
			}
			return a.record(ctx)
		}); err != nil {
			t.Fatal(err)
		}
		if err := b.s.AddJob("j", "*/10 * * * * *", b.record); err != nil {
			t.Fatal(err)
		}
		rec := b.observe(t)
		if err := a.s.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(base.Add(23500 * time.Millisecond))) // 3.5s after the second firing, past its wait (3s)
		if err := b.s.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if got := b.scheduledRuns(base); slices.Contains(got, 20*time.Second) {
			t.Errorf("b ran %v, want not 20s: a's run went on from 10s to 25s, past that firing's wait", got)
		}
		var skipped []string
		for _, e := range rec.all(lock.FiringSkipped) {
			skipped = append(skipped, e.Scheduled.Sub(base).String()+": "+e.Reason)
		}
		if !slices.ContainsFunc(skipped, func(s string) bool { return strings.HasPrefix(s, "20s: "+ReasonRunGoing) }) {
			t.Errorf("b's skips %q, want 20s: %q", skipped, ReasonRunGoing)
		}
	})
}

// An OverlapSkip firing whose job's lock is held by the run of an earlier
// firing that began after it fell (that firing late) waits for that run,
// in order, and runs: no run was going when it fell. It was recorded
// "lock held elsewhere" once its lock wait ran out (simulation seed 23).
func TestFiringBehindALateEarlierRunWaitsForIt(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		base := time.Now() // the server's clock; firings every 2s from it
		srv := simdb.NewServer(simdb.MongoDB, 0)
		// a's commands sent around the firing at 10s take 2.5s to arrive:
		// its claim, and so its run, of that firing begin at 12.5s.
		late := func(bson.D) simdb.Fate {
			f := fastPlan(nil)
			if at := time.Since(base); at >= 9990*time.Millisecond && at < 10200*time.Millisecond {
				f.Send = 2500 * time.Millisecond
			}
			return f
		}
		plan := fastPlan
		a := newSimInstance(t, srv, "a", 0, 3*time.Second, late, WithOpTimeout(5*time.Second))
		b := newSimInstance(t, srv, "b", 0, 3*time.Second, plan, WithOpTimeout(5*time.Second))
		if err := a.s.AddJob("j", "*/2 * * * * *", func(ctx context.Context) error {
			if r, _ := RunFromContext(ctx); r.Scheduled.Equal(base.Add(10 * time.Second)) {
				time.Sleep(3 * time.Second) // until 15.5s
			}
			return a.record(ctx)
		}); err != nil {
			t.Fatal(err)
		}
		if err := b.s.AddJob("j", "*/2 * * * * *", b.record); err != nil {
			t.Fatal(err)
		}
		rec := b.observe(t)
		if err := a.s.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(base.Add(12600 * time.Millisecond))) // once a's claim and start of 10s applied
		if err := b.s.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if got := a.scheduledRuns(base); !slices.Contains(got, 10*time.Second) {
			t.Fatalf("a ran %v, want 10s among them (the scenario)", got)
		}
		var skipped []string
		for _, e := range rec.all(lock.FiringSkipped) {
			skipped = append(skipped, e.Scheduled.Sub(base).String()+": "+e.Reason)
		}
		if got := b.scheduledRuns(base); !slices.Contains(got, 12*time.Second) {
			t.Errorf("b ran %v, want 12s among them: no run went on when it fell, the run of 10s began at 12.5s; b skipped %q", got, skipped)
		}
	})
}

// A wall clock stepped back does not stop the firings: the Locker's lower
// bound of the server's clock, which firings fall due by, dropped with it
// until its next reading of the server's clock, minutes later (simulation
// seed 499: a leader stepped 7m55s back fired nothing more).
func TestWallClockSteppedBackKeepsFiring(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		base := time.Now()
		srv := simdb.NewServer(simdb.MongoDB, 0)
		plan := fastPlan
		a := newSimInstance(t, srv, "a", 0, 3*time.Second, plan)
		if err := a.s.AddJob("j", "@every 1s", a.record); err != nil {
			t.Fatal(err)
		}
		if err := a.s.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(base.Add(5500 * time.Millisecond)))
		a.clock.Step(-8 * time.Minute)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		got := a.scheduledRuns(base)
		var after []time.Duration
		for _, d := range got {
			if d > 9*time.Second {
				after = append(after, d)
			}
		}
		if len(after) < 5 {
			t.Errorf("ran %v; want the firings from 10s to 15s among them: the wall clock stepped back 8 minutes at 5.5s", got)
		}
	})
}

// A triggered run between a long run and the firings that fell during it
// does not make those firings run: the trigger's start kept the job's
// earlier runs no more (it wrote no went, and a trigger's run was read as
// no run), so the next claim ran, late, a firing OverlapSkip skips
// (simulation seed 855, an over-run).
func TestTriggerKeepsEarlierRunsForOverlap(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		base := time.Now()
		srv := simdb.NewServer(simdb.MongoDB, 0)
		plan := fastPlan
		a := newSimInstance(t, srv, "a", 0, 3*time.Second, plan)
		if err := a.s.AddJob("j", "*/10 * * * * *", func(ctx context.Context) error {
			if r, _ := RunFromContext(ctx); r.Scheduled.Equal(base.Add(10 * time.Second)) {
				time.Sleep(14 * time.Second) // from 10s to 24s: past 20s and its lock wait (3s)
			}
			return a.record(ctx)
		}); err != nil {
			t.Fatal(err)
		}
		rec := a.observe(t)
		if err := a.s.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(base.Add(24500 * time.Millisecond)))
		if ok, err := a.s.Trigger(context.Background(), "j"); !ok || err != nil {
			t.Fatalf("trigger: %v, %v", ok, err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		var skipped []string
		for _, e := range rec.all(lock.FiringSkipped) {
			skipped = append(skipped, e.Scheduled.Sub(base).String()+": "+e.Reason)
		}
		got := a.scheduledRuns(base)
		if slices.Contains(got, 20*time.Second) {
			t.Errorf("ran %v, want not 20s: the run of 10s went on from 10s to 24s; skipped %q", got, skipped)
		}
		if !slices.Contains(got, 30*time.Second) {
			t.Errorf("ran %v, want 30s among them", got)
		}
	})
}

// A firing whose start applied on the server and whose instance then
// never recorded anything more (here: the start's reply is lost and every
// command after it dropped, as if the instance died or froze right after
// sending it) was in no history record once the job's next run, on
// another instance, replaced the job document's record of it: the
// firing looked never run, and the dashboard said nothing of it
// (integration TestLeaderOnlyLeaderKilled, "2 missed": a leader stopped
// right after its start batch applied). The run that replaces a record
// still running by another claim records that run as spent.
func TestDisplacedRunRecordedSpent(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		base := time.Now()
		srv := simdb.NewServer(simdb.MongoDB, 0)
		var cut atomic.Bool
		dies := func(cmd bson.D) simdb.Fate {
			f := fastPlan(cmd)
			switch {
			case cut.Load():
				f.Drop = true
			case isStart(cmd):
				cut.Store(true)
				f.LoseReply = true
			}
			return f
		}
		a := newSimInstance(t, srv, "a", 0, 3*time.Second, dies, WithOpTimeout(time.Second))
		b := newSimInstance(t, srv, "b", 0, 3*time.Second, fastPlan, WithOpTimeout(time.Second))
		if err := a.s.AddJob("j", "*/5 * * * * *", a.record); err != nil {
			t.Fatal(err)
		}
		if err := b.s.AddJob("j", "*/5 * * * * *", b.record); err != nil {
			t.Fatal(err)
		}
		if err := a.s.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(base.Add(6 * time.Second))) // a's start of 5s applied, and a cut off
		if err := b.s.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if !cut.Load() || len(a.scheduledRuns(base)) != 0 {
			t.Fatalf("a's start applied %v, a ran %v: not the scenario", cut.Load(), a.scheduledRuns(base))
		}
		if got := b.scheduledRuns(base); !slices.Contains(got, 10*time.Second) {
			t.Fatalf("b ran %v, want 10s among them", got)
		}
		runs, err := b.s.History(context.Background(), "j", 10)
		if err != nil {
			t.Fatal(err)
		}
		var spent *Run
		for i, r := range runs {
			if r.Scheduled.Equal(base.Add(5 * time.Second)) {
				spent = &runs[i]
			}
		}
		switch {
		case spent == nil:
			t.Errorf("no record of the firing at 5s, which a started and b's run of 10s displaced; history: %+v", runs)
		case spent.Outcome != OutcomeSpent || spent.Keeper != "a" || spent.End.IsZero():
			t.Errorf("record of 5s %+v, want outcome spent, keeper a, an end", *spent)
		}
	})
}

// An instance whose clock is ahead of the server's fires by the server's
// clock from its first reading of it on; before that reading it fired by
// its own. Its presence lease's write (whose reply is its first reading)
// was slow at its first poll, and its loop fired the first firing by its
// own clock, six minutes ahead, and claimed it once the presence lease was
// held: the job's last claim jumped six minutes into the future, and no
// instance could claim any firing of it until then (simulation seed 935:
// every firing of job2 lost). Nothing is fired before the server's clock
// is read.
func TestClockAheadClaimsNothingBeforeItReadsTheServersClock(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		base := time.Now()
		srv := simdb.NewServer(simdb.MongoDB, 0)
		var dropped atomic.Int32
		plan := func(cmd bson.D) simdb.Fate {
			f := fastPlan(cmd)
			if len(cmd) > 0 && cmd[0].Value == lock.DefaultCollection && dropped.Add(1) == 1 {
				// The presence lease's write, the first poll's: its reply,
				// the first reading of the server's clock, comes after the
				// first firing by a's clock (2s).
				f.Send = 2500 * time.Millisecond
			}
			return f
		}
		a := newSimInstance(t, srv, "a", 6*time.Minute, 3*time.Second, plan, WithOpTimeout(5*time.Second))
		a.runJobFor(t, "@every 2s", a.record, 12*time.Second)
		got := a.scheduledRuns(base)
		for _, f := range got {
			if f > 13*time.Second {
				t.Fatalf("a ran the firing %v after the start, by the server's clock, 12s after: by its own clock (runs %v)", f, got)
			}
		}
		if len(got) < 4 {
			t.Errorf("a ran the firings %v, want those from 4s to 12s", got)
		}
	})
}
