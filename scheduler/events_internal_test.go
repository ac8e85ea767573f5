package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
)

// TestFiringEvents records the scheduler's events over three firings of
// jobs that run, fail, lose their claims, find their lock held and are
// still running at the next firing: each firing gets exactly the events
// the package documentation lists, once each, with what they carry.
func TestFiringEvents(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		// A TTL of 3s: the holder of "held" renews its lease each second,
		// so a look at it tells it is alive (a lock taken less than a renew
		// interval and a half before, never renewed, cannot tell).
		r := newRig(t, 3*time.Second)
		const late, took = 30 * time.Millisecond, 50 * time.Millisecond
		var runs int
		_ = r.s.AddJob("ran", "@every 10s", func(context.Context) error {
			time.Sleep(took)
			runs++
			if runs == 2 {
				return errBoom
			}
			return nil
		})
		_ = r.s.AddJob("lost", "@every 10s", func(context.Context) error { return nil })
		_ = r.s.AddJob("held", "@every 10s", func(context.Context) error { return nil })
		long := true
		_ = r.s.AddJob("long", "@every 10s", func(ctx context.Context) error {
			if long {
				long = false
				time.Sleep(15 * time.Second) // through the next firing
			}
			return nil
		})
		r.store.doc("lost").Last = epoch.Add(time.Hour) // claimed far ahead elsewhere
		release := r.holdAlive(r.s.LockID("held"))      // for the whole test, renewed
		r.store.onClaim = func(job string, _ time.Time) {
			if job == "ran" {
				time.Sleep(late)
			}
		}
		_ = r.s.Start()
		time.Sleep(39 * time.Second) // before the fourth firings
		r.stop()
		release()

		f := func(i int) time.Time { return epoch.Add(time.Duration(i) * 10 * time.Second) }
		type key struct {
			job string
			f   time.Time
		}
		const (
			claimed = lock.FiringClaimed
			lost    = lock.FiringLost
			skipped = lock.FiringSkipped
			started = lock.RunStarted
			ended   = lock.RunEnded
		)
		want := map[key][]lock.EventKind{}
		for i := 1; i <= 3; i++ {
			want[key{"ran", f(i)}] = []lock.EventKind{claimed, started, ended}
			want[key{"lost", f(i)}] = []lock.EventKind{lost}
			want[key{"held", f(i)}] = []lock.EventKind{claimed, skipped}
		}
		want[key{"long", f(1)}] = []lock.EventKind{claimed, started, ended}
		// Still running here, then claimed once the job is idle here, and
		// recorded as not run (the run went on when it fell).
		want[key{"long", f(2)}] = []lock.EventKind{skipped, claimed, skipped}
		want[key{"long", f(3)}] = []lock.EventKind{claimed, started, ended}

		got := map[key][]lock.Event{}
		for _, e := range r.obs.firingEvents() {
			k := key{e.Job, e.Scheduled}
			got[k] = append(got[k], e)
			if e.KeeperID != "me" || e.LockID != r.s.LockID(e.Job) || e.At.Before(e.Scheduled) {
				t.Errorf("%v of %s@%v: %+v", e.Kind, e.Job, e.Scheduled.Sub(epoch), e)
			}
		}
		if len(got) != len(want) {
			t.Errorf("events for %d firings, want %d", len(got), len(want))
		}
		fences := map[key]uint64{}
		for _, run := range r.store.runs() {
			fences[key{run.Job, run.Scheduled}] = run.Fence
		}
		for k, kinds := range want {
			evs := got[k]
			var gotKinds []lock.EventKind
			for _, e := range evs {
				gotKinds = append(gotKinds, e.Kind)
			}
			if !slices.Equal(gotKinds, kinds) {
				t.Errorf("%s@%v: events %v, want %v", k.job, k.f.Sub(epoch), gotKinds, kinds)
				continue
			}
			for _, e := range evs {
				wantFence := uint64(0) // before the lock is taken
				if e.Kind == started || e.Kind == ended {
					wantFence = fences[k]
				}
				if e.Fence != wantFence || (wantFence == 0) != (e.Kind != started && e.Kind != ended) {
					t.Errorf("%s@%v: %v with fence %d, want %d", k.job, k.f.Sub(epoch), e.Kind, e.Fence, wantFence)
				}
			}
		}

		// What each event carries.
		for i := 1; i <= 3; i++ {
			evs := got[key{"ran", f(i)}]
			if len(evs) != 3 {
				continue
			}
			s, e := evs[1], evs[2]
			if s.Lateness != late || !s.At.Equal(f(i).Add(late)) {
				t.Errorf("ran@%d: started at %v, %v late, want %v", i, s.At.Sub(f(i)), s.Lateness, late)
			}
			wantOutcome, wantErr := OutcomeSucceeded, error(nil)
			if i == 2 {
				wantOutcome, wantErr = OutcomeFailed, errBoom
			}
			if e.Took != took || !e.At.Equal(s.At.Add(took)) || e.Outcome != string(wantOutcome) || !errors.Is(e.Err, wantErr) ||
				(wantErr == nil) != (e.Err == nil) || e.Reason != "" {
				t.Errorf("ran@%d: ended %+v, want %s after %v", i, e, wantOutcome, took)
			}
		}
		for i := 1; i <= 3; i++ {
			if evs := got[key{"held", f(i)}]; len(evs) == 2 {
				if e := evs[1]; e.Reason != ReasonLockHeld || e.Err != nil || e.Took != 3*time.Second || e.Attempt < 2 { // half the period, at most a TTL
					t.Errorf("held@%d: skipped %+v", i, e)
				}
			}
		}
		if evs := got[key{"long", f(1)}]; len(evs) == 3 && evs[2].Took != 15*time.Second {
			t.Errorf("long@1: ended %+v, want after 15s", evs[2])
		}
		if evs := got[key{"long", f(2)}]; len(evs) == 2 && (evs[0].Reason != ReasonBusy || !evs[0].At.Equal(f(2)) ||
			evs[1].Reason != ReasonRunGoing || evs[1].At.Before(f(3))) {
			t.Errorf("long@2: skipped %+v, want %q, then %q once f(3) started", evs, ReasonBusy, ReasonRunGoing)
		}
	})
}

// TestTakenOverClaimNamedByItsFiring: a claimant that wakes up to find its
// claim taken over while it was to run an earlier firing the claim covers
// reports the takeover under the claim's firing, the one the taker's
// FiringTakenOver names, and under no other: the firing it claimed ends
// here, the earlier one was never its own to end.
func TestTakenOverClaimNamedByItsFiring(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		const ttl = time.Second
		at := func(s int) time.Time { return epoch.Add(time.Duration(s) * time.Second) }
		locks := locktest.New(locktest.WithTTL(ttl))
		store := newFakeStore(locks.Clock())
		d := store.doc("j") // settled through -20s
		d.Last, d.Done, d.By, d.At = at(-20), at(-20), "gone", at(-20)
		opts := []Option{WithMisfirePolicy(MisfireRunAll(time.Hour, 10))}
		a, b := newTwin(t, locks, store, "a", opts...), newTwin(t, locks, store, "b", opts...)
		for _, tw := range []*twin{a, b} {
			tw.st.beforeClaim = func(_ string, f time.Time) {
				switch {
				case f.Equal(at(0)):
					time.Sleep(15 * time.Second) // the catch-up claims at Start lose
				case tw == b:
					time.Sleep(time.Millisecond) // a claims first
				}
			}
		}
		// a claims 10s, covering -10s, 0s and 10s, and stalls, its
		// renewals failing, until b took the claim over.
		var dead atomic.Bool
		gate := newCloser()
		defer gate.close()
		locks.BeforeCall(func(_ context.Context, c locktest.Call) error {
			if dead.Load() && c.KeeperID == "a" && c.Op == locktest.OpRenew {
				return errBoom
			}
			return nil
		})
		a.st.afterClaim = func(_ string, f time.Time) {
			if f.Equal(at(10)) {
				dead.Store(true)
				<-gate.c
			}
		}
		log := newRunLog()
		for _, tw := range []*twin{a, b} {
			_ = tw.s.AddJob("j", "@every 10s", log.job(nil))
			_ = tw.s.Start()
		}
		taken := b.next(t, lock.FiringTakenOver)
		synctest.Wait()
		dead.Store(false)
		gate.close()
		sleepUntil(at(15))
		synctest.Wait()
		if got, want := log.scheduled(), []string{"-10s", "0s", "10s"}; !slices.Equal(got, want) {
			t.Fatalf("ran %v, want %v", got, want)
		}
		if !taken.Scheduled.Equal(at(10)) || taken.Leader != "a" {
			t.Errorf("b's takeover %+v, want of a's claim of 10s", taken)
		}
		var skipped []string
		for _, e := range a.obs.all(lock.FiringSkipped) {
			skipped = append(skipped, fmt.Sprintf("%v: %s", e.Scheduled.Sub(epoch), e.Reason))
		}
		if want := []string{"10s: " + ReasonTakenOver}; !slices.Equal(skipped, want) {
			t.Errorf("a's skipped events %q, want %q", skipped, want)
		}
	})
}

// TestSettlingEndsNoFiringTwice: a claim whose firing was skipped here
// (its lock held elsewhere throughout) and which was then taken over
// before it could be settled ends that firing with one FiringSkipped, not
// a second one for the settling.
func TestSettlingEndsNoFiringTwice(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Minute)
		id := r.s.LockID("j")
		r.onCall(locktest.OpAcquire, func(context.Context) error {
			r.locks.TakeOver(id, "other") // the previous run, still going
			r.store.mu.Lock()
			r.store.docs["j"].By = "b" // and the claim taken over meanwhile
			r.store.mu.Unlock()
			return nil
		})
		_ = r.s.AddJob("j", "@every 10s", func(context.Context) error { return nil })
		_ = r.s.Start()
		f := epoch.Add(10 * time.Second)
		sleepUntil(f.Add(9 * time.Second))
		r.idle()
		tw := &twin{obs: r.obs}
		if e := tw.events(lock.FiringSkipped, f); len(e) != 1 || e[0].Reason != ReasonLockHeld {
			t.Errorf("skipped events %+v, want one: %s", e, ReasonLockHeld)
		}
		r.stop()
	})
}
