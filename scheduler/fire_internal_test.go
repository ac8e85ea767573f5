package scheduler

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/goleak"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
)

// TestClaimantWaitsForLock: the instance that won a claim finds the lock
// still held by the previous run, which is recording its end on another
// instance. It must wait for the lock rather than drop the firing, and take
// it at most a retry period after it is let go.
func TestClaimantWaitsForLock(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second)
		id := r.s.LockID("j")
		f := epoch.Add(10 * time.Second)
		r.store.onClaim = func(string, time.Time) { r.locks.TakeOver(id, "other") }
		ran := make(chan Run, 1)
		_ = r.s.AddJob("j", "@every 10s", func(ctx context.Context) error {
			run, _ := RunFromContext(ctx)
			ran <- run
			return nil
		})
		_ = r.s.Start()
		time.Sleep(time.Until(f.Add(100 * time.Millisecond)))
		synctest.Wait()
		if len(r.store.runs()) != 0 || r.locks.HeldBy(id) != "other" {
			t.Fatalf("ran while the lock was held elsewhere: %+v", r.store.runs())
		}
		r.locks.ForceRelease(id) // the previous run released it
		dropped := time.Now()
		if run := recv(t, ran, "the run"); !run.Scheduled.Equal(f) || run.Keeper != "me" {
			t.Fatalf("ran %+v", run)
		}
		if d := time.Since(dropped); d > r.session.Timings().RetryPeriod {
			t.Errorf("lock taken %v after it was let go, more than the retry period %v", d, r.session.Timings().RetryPeriod)
		}
		if e := r.end(); e.Kind != lock.RunEnded || e.Outcome != string(OutcomeSucceeded) {
			t.Fatalf("firing ended with %+v", e)
		}
		r.idle()
		if runs := r.store.runs(); len(runs) != 1 || runs[0].Outcome != OutcomeSucceeded {
			t.Fatalf("runs %+v", runs)
		}
		r.stop()
	})
}

// attemptsWithin is how many attempts to take a lock lockFor makes in
// wait, with backoff b, if every pause is factor times its nominal length:
// 1 at most, and more than 0.8 (the jitter).
func attemptsWithin(b lock.Backoff, wait time.Duration, factor float64) int {
	nominal := func(attempt int) time.Duration {
		p := b.First
		for i := 1; i < attempt && p < b.Max; i++ {
			p *= 2
		}
		return min(p, b.Max)
	}
	n, at := 1, time.Duration(0)
	for at < wait {
		at += min(time.Duration(float64(nominal(n))*factor), wait-at)
		n++
	}
	return n
}

// TestClaimantGivesUpOnLock: a lock held throughout is waited for until half
// a period after the firing (at most a TTL), with pauses doubling from
// 20ms to the Session's retry period, and the firing is then skipped.
func TestClaimantGivesUpOnLock(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ttl    time.Duration
		spec   string
		giveUp time.Duration // after the firing
	}{
		{"half the period", time.Minute, "@every 10s", 5 * time.Second},
		{"a TTL", 2 * time.Second, "@every 1m", 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, tc.ttl)
				id := r.s.LockID("j")
				var attempts int
				var mu sync.Mutex
				r.onCall(locktest.OpAcquire, func(context.Context) error {
					r.locks.TakeOver(id, "other") // renewed by its holder all along
					mu.Lock()
					attempts++
					mu.Unlock()
					return nil
				})
				ran := make(chan struct{}, 1)
				_ = r.s.AddJob("j", tc.spec, func(context.Context) error { ran <- struct{}{}; return nil })
				_ = r.s.Start()
				r.s.mu.Lock()
				f := r.s.queue[0].next
				r.s.mu.Unlock()
				e := r.end()
				if e.Kind != lock.FiringSkipped || e.Reason != ReasonLockHeld || !e.Scheduled.Equal(f) || e.Err != nil {
					t.Fatalf("firing ended with %+v, want skipped: %s", e, ReasonLockHeld)
				}
				if d := e.At.Sub(f); d != tc.giveUp || e.Took != tc.giveUp {
					t.Errorf("gave up %v after the firing (waited %v), want %v", d, e.Took, tc.giveUp)
				}
				r.idle()
				select {
				case <-ran:
					t.Fatal("the firing ran without its lock")
				default:
				}
				mu.Lock()
				n := attempts
				mu.Unlock()
				b := r.s.lockBackoff()
				if b.First != 20*time.Millisecond || b.Max != r.session.Timings().RetryPeriod {
					t.Errorf("backoff %+v, want from 20ms to the retry period %v", b, r.session.Timings().RetryPeriod)
				}
				least, most := attemptsWithin(b, tc.giveUp, 1), attemptsWithin(b, tc.giveUp, 0.8)
				if n < least || n > most || e.Attempt != n {
					t.Errorf("%d attempts to take the lock (event says %d), want %d to %d", n, e.Attempt, least, most)
				}
				if h := r.locks.HeldBy(id); h != "other" || !r.store.notRunOnly(f, ReasonLockHeld) {
					t.Fatalf("holder %q, runs %+v", h, r.store.runs())
				}
				r.stop()
			})
		})
	}
}

// TestReleaseBeforeHistory: the lock is released as soon as the job's record
// says how it ended; the history is written after.
func TestReleaseBeforeHistory(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second)
		id := r.s.LockID("j")
		holders := make(chan string, 1)
		r.store.onHistory = func(Run) { holders <- r.locks.HeldBy(id) }
		_ = r.s.AddJob("j", "@every 1s", func(context.Context) error { return nil })
		_ = r.s.Start()
		if h := recv(t, holders, "the history write"); h != "" {
			t.Fatalf("lock held by %q while the history is written", h)
		}
		r.stop()
	})
}

// TestReleaseRetried: a release that fails is tried again, by the Session
// within its release timeout, so that the next firing's claimant does not
// wait for the lease to expire. The scheduler adds no retries of its own.
func TestReleaseRetried(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Minute)
		id := r.s.LockID("j")
		r.locks.Fail(locktest.OpRelease, 2, errBoom)
		_ = r.s.AddJob("j", "@every 10s", func(context.Context) error { return nil })
		_ = r.s.Start()
		f := epoch.Add(10 * time.Second)
		e := r.next(lock.Released)
		if e.Err != nil || e.LockID != id {
			t.Fatalf("released: %+v", e)
		}
		if end := r.end(); end.Kind != lock.RunEnded || end.Outcome != string(OutcomeSucceeded) || !end.At.Equal(f) {
			t.Fatalf("firing ended with %+v", end)
		}
		r.idle()
		if h := r.locks.HeldBy(id); h != "" {
			t.Fatalf("lock still held by %q", h)
		}
		if _, _, releases := r.lockCounts(); releases != 3 {
			t.Errorf("%d releases, want 3", releases)
		}
		// Two pauses of the Session's backoff: from a sixteenth of the
		// retry period, doubling, each shortened by up to a fifth.
		rp := r.session.Timings().RetryPeriod
		if d := e.At.Sub(f); d < rp*3/16*8/10 || d > rp*3/16 {
			t.Errorf("released %v after the firing, want the two pauses of the Session's backoff (about %v)", d, rp*3/16)
		}
		r.stop()
	})
}

// TestHungRenewalRetried: a renewal that never answers is given up on and
// tried again, before the lease could lapse: the job goes on.
func TestHungRenewalRetried(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second) // renew every 333ms, renew deadline 667ms
		abandoned := make(chan time.Time, 1)
		var mu sync.Mutex
		calls := 0
		r.onCall(locktest.OpRenew, func(ctx context.Context) error {
			mu.Lock()
			calls++
			first := calls == 1
			mu.Unlock()
			if !first {
				return nil
			}
			<-ctx.Done() // a silent connection
			abandoned <- time.Now()
			return ctx.Err()
		})
		started, ended := make(chan Run, 1), make(chan outcome, 1)
		release := newCloser()
		defer release.close()
		_ = r.s.AddJob("j", "@every 1m", blockingJob(started, release, ended))
		_ = r.s.Start()
		start := epoch.Add(time.Minute)
		recv(t, started, "the run")
		at := recv(t, abandoned, "the hung renewal to be given up on")
		if deadline := start.Add(r.session.Timings().RenewDeadline); !at.Before(deadline) {
			t.Fatalf("hung renewal given up on at %v, not before the renew deadline %v", at.Sub(start), deadline.Sub(start))
		}
		time.Sleep(start.Add(3 * time.Second).Sub(time.Now()))
		select {
		case o := <-ended:
			t.Fatalf("job ended %v after it started: %v", o.at.Sub(start), o.cause)
		default:
		}
		if _, renewals, _ := r.lockCounts(); renewals < 6 {
			t.Fatalf("%d renewals in 3 TTLs", renewals)
		}
		release.close()
		if o := recv(t, ended, "the end"); o.cause != nil {
			t.Fatalf("cancelled: %v", o.cause)
		}
		r.idle()
		r.stop()
	})
}

// TestFirstRenewalFromSending: the lease counts from the sending of the
// acquisition, so the first renewal does too, however long the acquisition
// took.
func TestFirstRenewalFromSending(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second) // renew every 333ms
		f := epoch.Add(time.Minute)
		renewedAt := make(chan time.Time, 10)
		r.locks.BeforeCall(func(_ context.Context, c locktest.Call) error {
			switch {
			case !jobCall(c):
			case c.Op == locktest.OpAcquire:
				time.Sleep(300 * time.Millisecond)
			case c.Op == locktest.OpRenew:
				renewedAt <- time.Now()
			}
			return nil
		})
		started, ended := make(chan Run, 1), make(chan outcome, 1)
		release := newCloser()
		defer release.close()
		_ = r.s.AddJob("j", "@every 1m", blockingJob(started, release, ended))
		_ = r.s.Start()
		recv(t, started, "the run")
		first := recv(t, renewedAt, "the first renewal")
		// Within the renew interval of the sending; earlier when the
		// Session renews it with the Scheduler's presence lease.
		if d := first.Sub(f); d <= 0 || d > r.session.Timings().RenewInterval {
			t.Errorf("first renewal %v after sending the acquisition, want within the renew interval %v", d, r.session.Timings().RenewInterval)
		}
		release.close()
		recv(t, ended, "the end")
		r.idle()
		r.stop()
	})
}

// TestLeaseTooLateToTrust: a lock acquired so slowly that its lease is
// already past its renew deadline is not used at all; the claim stays
// pending, for the next poll to try again.
func TestLeaseTooLateToTrust(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second) // renew deadline 667ms
		// The answer comes late, whatever the acquisition's context says.
		r.onCall(locktest.OpAcquire, func(context.Context) error { time.Sleep(950 * time.Millisecond); return nil })
		ran := make(chan struct{}, 1)
		_ = r.s.AddJob("j", "@every 1m", func(context.Context) error { ran <- struct{}{}; return nil })
		_ = r.s.Start()
		e := r.end()
		if e.Kind != lock.FiringSkipped || !strings.HasPrefix(e.Reason, ReasonNoLock) || !errors.Is(e.Err, lock.ErrNotTrusted) {
			t.Fatalf("firing ended with %+v, want skipped: %s", e, ReasonNoLock)
		}
		r.idle()
		select {
		case <-ran:
			t.Fatal("job ran under a lease it could not trust")
		default:
		}
		started := r.store.running("j")
		if n, _, _ := r.lockCounts(); n < 1 || started != nil || len(r.store.runs()) != 0 || !r.store.docOf("j").Pending {
			t.Fatalf("%d acquisitions, recorded %+v, history %+v, document %+v", n, started, r.store.runs(), r.store.docOf("j"))
		}
		if h := r.locks.HeldBy(r.s.LockID("j")); h != "" {
			t.Fatalf("lock left held by %q", h)
		}
		r.stop()
	})
}

// TestLeaseLapsesWhileRecordingStart: the lease can no longer be trusted
// once the start is recorded. The job must not be called, even if the
// keep-alive has not ended the lease yet. The start is final: either it
// came too late for its deadline, and the claim is still pending (the
// firing runs at a resume, late), or it applied first, and the firing is
// spent, recorded as not run.
func TestLeaseLapsesWhileRecordingStart(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for i := range 20 { // the write returns when the keep-alive ends the lease: either may go first
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, time.Second)
			f := epoch.Add(time.Minute)
			r.store.onStart = func(context.Context, Run) (bool, error) {
				r.store.onStart = nil
				r.locks.Fail(locktest.OpRenew, locktest.Always, errBoom)
				time.Sleep(time.Until(f.Add(r.session.Timings().RenewDeadline)))
				return true, nil
			}
			ran := make(chan struct{}, 1)
			_ = r.s.AddJob("j", "@every 1m", func(context.Context) error { ran <- struct{}{}; return nil })
			_ = r.s.Start()
			e := r.end()
			if e.Kind != lock.FiringSkipped || !errors.Is(e.Err, lock.ErrLeaseLost) && !errors.Is(e.Err, errNotStarted) || e.Fence == 0 {
				t.Fatalf("try %d: firing ended with %+v, want skipped", i, e)
			}
			select {
			case <-ran:
				t.Fatalf("try %d: job started after its lease could no longer be trusted", i)
			default:
			}
			d := r.store.docOf("j")
			runs := r.store.runs()
			switch e.Reason {
			case ReasonNoStart: // too late: pending
				if len(runs) != 0 || !d.Pending || d.Run.Outcome != "" {
					t.Fatalf("try %d: runs %+v, document %+v, want the claim pending", i, runs, d)
				}
			case ReasonUntrusted: // applied: spent
				if len(runs) != 1 || runs[0].Outcome != OutcomeFailed || d.Pending || d.Run.Outcome != string(OutcomeFailed) ||
					!strings.HasPrefix(d.Run.Error, "not run: lock: lease lost") {
					t.Fatalf("try %d: runs %+v, document %+v, want the firing spent", i, runs, d)
				}
			default:
				t.Fatalf("try %d: firing ended with %+v", i, e)
			}
			if n := len(r.obs.all(lock.RunStarted, lock.RunEnded)); n != 0 {
				t.Fatalf("try %d: %d run events for a job never called", i, n)
			}
			r.stop()
		})
	}
}

// TestLeaseLostBeforeStart: the instance is paused (here: its observer
// blocks, as the integration tests' instances stop themselves) between
// the grant of the job's lock and the start record, past its lease (its
// renewals fail meanwhile). The
// start is not written and the job not called; the claim stays pending,
// and the next poll resumes it: the firing runs once, late. It was
// recorded as not run, for good, before (BenchmarkClaimantsKilled lost
// firings of claimants stopped at their lock that way).
func TestLeaseLostBeforeStart(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		var paused atomic.Bool
		var r *rig
		pause := lock.ObserverFunc(func(e lock.Event) {
			if e.Kind == lock.Acquired && e.LockID == "scheduler/j" && paused.CompareAndSwap(false, true) {
				// Stopped: nothing of this instance reaches the server,
				// its renewals included.
				r.locks.Fail(locktest.OpRenew, locktest.Always, errBoom)
				time.Sleep(r.session.Timings().TTL)
				r.locks.Fail(locktest.OpRenew, 0, nil)
			}
		})
		r = newRigWith(t, time.Second, []lock.SessionOption{lock.WithObserver(pause)})
		f := epoch.Add(time.Minute)
		ran := make(chan time.Time, 2)
		_ = r.s.AddJob("j", "@every 1m", func(context.Context) error { ran <- time.Now(); return nil })
		_ = r.s.Start()
		e := r.end()
		if e.Kind != lock.FiringSkipped || !strings.HasPrefix(e.Reason, ReasonNoStart) || !errors.Is(e.Err, lock.ErrLeaseLost) {
			t.Fatalf("firing ended with %+v, want skipped: %s", e, ReasonNoStart)
		}
		if len(ran) != 0 || r.store.running("j") != nil {
			t.Fatalf("the job was called, or its start recorded (%+v), under a lease lost", r.store.running("j"))
		}
		time.Sleep(r.s.pollInterval()*2 + time.Second)
		r.idle()
		r.stop()
		if n := len(ran); n != 1 {
			t.Fatalf("the job was called %d times, want once; history %+v", n, r.store.runs())
		}
		runs := r.store.runs()
		if len(runs) != 1 || runs[0].Outcome != OutcomeSucceeded || !runs[0].Scheduled.Equal(f) {
			t.Fatalf("history %+v, want the firing at %v run once", runs, f.Sub(epoch))
		}
	})
}

// TestStartNotRecorded: a firing whose start write failed waits for the
// write's deadline, after which it cannot apply, and sends it again to
// learn its fate for good. Not applied: the claim is pending, and the
// next poll resumes it, the firing runs late. Applied, its reply lost: it
// started, and runs now. Either way it runs once, and nothing is undone.
func TestStartNotRecorded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		applied bool
	}{
		{"write failed", false},
		{"reply lost", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, time.Second)
				r.store.onStart = func(context.Context, Run) (bool, error) {
					r.store.onStart = nil // the write sent again goes through
					return tc.applied, errBoom
				}
				ran := make(chan time.Time, 2)
				_ = r.s.AddJob("j", "@every 1m", func(context.Context) error { ran <- time.Now(); return nil })
				_ = r.s.Start()
				f := epoch.Add(time.Minute)
				e := r.end()
				switch {
				case !tc.applied && e.Kind != lock.RunEnded && (e.Reason != ReasonNoStart || !errors.Is(e.Err, errBoom) || !errors.Is(e.Err, errNotStarted)):
					// Run now if the write sent again applied (no deadline: the
					// fake Session reads no server clock), else pending.
					t.Fatalf("firing ended with %+v, want run, or skipped: %s, too late", e, ReasonNoStart)
				case tc.applied && (e.Kind != lock.RunEnded || e.Outcome != string(OutcomeSucceeded)):
					t.Fatalf("firing ended with %+v, want run", e)
				}
				time.Sleep(r.s.pollInterval()*2 + time.Second)
				r.idle()
				r.stop()
				if n := len(ran); n != 1 {
					t.Fatalf("the job was called %d times, want once; history %+v", n, r.store.runs())
				}
				runs := r.store.runs()
				if len(runs) != 1 || runs[0].Outcome != OutcomeSucceeded || !runs[0].Scheduled.Equal(f) {
					t.Fatalf("history %+v, want the firing at %v run once", runs, f.Sub(epoch))
				}
				if h := r.locks.HeldBy(r.s.LockID("j")); h != "" {
					t.Fatalf("lock left held by %q", h)
				}
			})
		})
	}
}

// TestStartNotRecordedTakenOver: a start whose reply was lost applied, and
// so did the write sent again to learn its fate, and another instance
// took the claim over (this one's presence had lapsed), seeing the run
// started: the firing is spent. Its record must not stay "running", with
// no history of it: it is ended as not run, and the event says the
// firing is spent. (Found by the simulation, seed 939.)
func TestStartNotRecordedTakenOver(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second)
		r.store.onStart = func(context.Context, Run) (bool, error) { return true, errBoom }
		r.store.afterStart = func(d *jobDoc) {
			d.By, d.ClaimID, d.Pending = "other", bson.NewObjectID(), true
			r.store.afterStart = nil
		}
		ran := make(chan struct{}, 1)
		_ = r.s.AddJob("j", "@every 1m", func(context.Context) error { ran <- struct{}{}; return nil })
		_ = r.s.Start()
		wantSpent(t, r, r.end(), ran)
		rec := r.store.running("j")
		if rec == nil || rec.Outcome != OutcomeFailed || !strings.HasPrefix(rec.Error, "not run: ") {
			t.Fatalf("record %+v, want failed: not run", rec)
		}
		if runs := r.store.runs(); len(runs) != 1 || runs[0].Outcome != OutcomeFailed {
			t.Fatalf("history %+v, want the spent firing, failed", runs)
		}
		r.stop()
	})
}

// TestStartNotRecordedTakerRanIt: a start whose write failed never
// applied: before it could, this instance's claim was taken over (its
// presence had lapsed), and the taker ran the firing and recorded it. The
// firing is the taker's: this instance records nothing of it. (A start
// that applied and was then replaced by a later claim's run is recorded
// as spent by that run: TestDisplacedRunRecordedSpent.)
func TestStartNotRecordedTakerRanIt(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second)
		var f time.Time
		r.store.onStart = func(_ context.Context, run Run) (bool, error) {
			r.store.mu.Lock()
			defer r.store.mu.Unlock()
			r.store.onStart = nil
			f = run.Scheduled
			d := r.store.docs["j"]
			d.By, d.ClaimID = "other", bson.NewObjectID()
			d.Run = runDoc{Keeper: "other", Scheduled: f, Start: r.store.clock.Now(), Fence: fenceTS(99),
				Outcome: string(OutcomeSucceeded), Attempt: 1}
			r.store.hist = append(r.store.hist, Run{Job: "j", Keeper: "other", Scheduled: f, Outcome: OutcomeSucceeded})
			return false, errBoom
		}
		ran := make(chan struct{}, 1)
		_ = r.s.AddJob("j", "@every 1m", func(context.Context) error { ran <- struct{}{}; return nil })
		_ = r.s.Start()
		// The write sent again learns its fate: taken over.
		if e := r.end(); e.Kind != lock.FiringSkipped || e.Reason != ReasonTakenOver {
			t.Fatalf("firing ended with %+v, want skipped: %s", e, ReasonTakenOver)
		}
		r.idle()
		select {
		case <-ran:
			t.Fatal("job ran without a start record")
		default:
		}
		var of []Run
		for _, h := range r.store.runs() {
			if h.Scheduled.Equal(f) {
				of = append(of, h)
			}
		}
		if len(of) != 1 || of[0].Keeper != "other" || of[0].Outcome != OutcomeSucceeded {
			t.Fatalf("history of the firing %+v, want the taker's run only", of)
		}
		r.stop()
	})
}

// wantSpent checks that e, a firing's last event, says its start was not
// recorded and the firing is spent (errBoom the start's error), and that
// the job was not called (ran).
func wantSpent(t *testing.T, r *rig, e lock.Event, ran <-chan struct{}) {
	t.Helper()
	if e.Kind != lock.FiringSkipped || !strings.HasPrefix(e.Reason, ReasonNoStart) || !strings.Contains(e.Reason, ": spent") || !errors.Is(e.Err, errBoom) {
		t.Fatalf("firing ended with %+v, want skipped: %s, spent", e, ReasonNoStart)
	}
	r.idle()
	select {
	case <-ran:
		t.Fatal("job ran without a start record")
	default:
	}
}

// TestStopWaitWhileRecordingStart: Stop in StopWait mode while a claimed
// firing records its start. The start is abandoned; nothing may be
// recorded as a run.
func TestStopWaitWhileRecordingStart(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second, WithStopMode(StopWait))
		stopped := make(chan error, 1)
		r.store.onStart = func(ctx context.Context, _ Run) (bool, error) {
			go func() { stopped <- r.s.Stop(context.Background()) }()
			<-ctx.Done() // the write is abandoned
			return false, ctx.Err()
		}
		ran := make(chan struct{}, 1)
		_ = r.s.AddJob("j", "@every 1m", func(context.Context) error { ran <- struct{}{}; return nil })
		_ = r.s.Start()
		if err := recv(t, stopped, "Stop"); err != nil {
			t.Fatal(err)
		}
		if e := r.end(); e.Kind != lock.FiringSkipped || e.Reason != ReasonStopping {
			t.Fatalf("firing ended with %+v, want skipped: %s", e, ReasonStopping)
		}
		select {
		case <-ran:
			t.Fatal("job ran after Stop")
		default:
		}
		if runs := r.store.runs(); len(runs) != 0 {
			t.Fatalf("history of a run that never happened: %+v", runs)
		}
		if h := r.locks.HeldBy(r.s.LockID("j")); h != "" {
			t.Fatalf("lock left held by %q", h)
		}
	})
}

// partialLocks' AcquireLocks grants the first lock, finds the second held
// elsewhere, grants the third too late to trust, and fails for the rest.
type partialLocks struct{ *locktest.Store }

func (l partialLocks) AcquireLocks(_ context.Context, keeper string, ids ...string) (lock.Acquisition, error) {
	now, ttl := l.Clock().Now(), l.TTL()
	return lock.Acquisition{
		Granted: []lock.Grant{
			{LockID: ids[0], KeeperID: keeper, Fence: 7, Sent: now, Deadline: now.Add(ttl)},
			{LockID: ids[2], KeeperID: keeper, Fence: 8, Sent: now.Add(-ttl), Deadline: now},
		},
		Refused: ids[1:2],
	}, errBoom
}

// TestAcquireBatchKeepsWhatAFailedCallSettled: when a batched acquisition
// fails part way, the jobs whose locks it took still run, those it found
// held wait as usual, those granted too late are skipped, and only the
// others see the error (and release).
func TestAcquireBatchKeepsWhatAFailedCallSettled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		session, err := lock.NewSession(partialLocks{locktest.New(locktest.WithTTL(time.Second))})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = session.Close() }()
		s := &Scheduler{session: session}
		res, err := s.acquireBatch(context.Background(), struct{}{}, []string{"a", "b", "c", "d", "e"})
		if err != nil || len(res) != 5 {
			t.Fatalf("results %+v, error %v", res, err)
		}
		if r := res[0]; r.lease == nil || r.err != nil || r.untrusted || r.lease.Fence() != 7 || r.lease.Err() != nil {
			t.Errorf("acquired lock: %+v, want its lease", r)
		}
		if r := res[1]; r.lease != nil || r.err != nil || r.untrusted {
			t.Errorf("refused lock: %+v, want not acquired and no error", r)
		}
		if r := res[2]; r.lease != nil || r.err != nil || !r.untrusted {
			t.Errorf("lock granted too late: %+v, want untrusted", r)
		}
		for _, r := range res[3:] {
			if r.lease != nil || !errors.Is(r.err, errBoom) {
				t.Errorf("unsettled lock: %+v, want the call's error", r)
			}
		}
	})
}

// TestSessionClosedStopsClaims: once its Session is closed, a Scheduler
// claims no firing: it could not run them, and a claim would keep every
// other instance from running them.
func TestSessionClosedStopsClaims(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second)
		ran := make(chan struct{}, 10)
		_ = r.s.AddJob("j", "@every 1s", func(context.Context) error { ran <- struct{}{}; return nil })
		_ = r.s.Start()
		recv(t, ran, "the first run")
		r.idle()
		if err := r.session.Close(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		r.idle()
		last := r.store.lastClaim("j")
		if !last.Equal(epoch.Add(time.Second)) || len(ran) != 0 {
			t.Fatalf("last claim %v, %d more runs after the Session closed", last.Sub(epoch), len(ran))
		}
		if err := r.s.Start(); !errors.Is(err, ErrStarted) {
			t.Fatalf("Start: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := r.s.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := newScheduler(newFakeStore(r.locks.Clock()), r.session, defaultConfig()); !errors.Is(err, lock.ErrSessionClosed) {
			t.Fatalf("newScheduler on a closed Session: %v", err)
		}
	})
}

// TestSessionClosedUnderFirings: closing the Session ends the lease of a
// running job, whose context is cancelled with cause lock.ErrSessionClosed,
// and the firing waiting for another job's lock gives up at its next
// attempt; both are reported as such, once.
func TestSessionClosedUnderFirings(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Minute)
		started, ended := make(chan Run, 1), make(chan outcome, 1)
		release := newCloser()
		defer release.close()
		_ = r.s.AddJob("running", "@every 10s", blockingJob(started, release, ended))
		_ = r.s.AddJob("waiting", "@every 10s", func(context.Context) error { return nil })
		r.locks.TakeOver(r.s.LockID("waiting"), "other")
		_ = r.s.Start()
		recv(t, started, "the run")
		time.Sleep(time.Second) // "waiting" is between attempts
		if err := r.session.Close(); err != nil {
			t.Fatal(err)
		}
		if o := recv(t, ended, "the end"); !errors.Is(o.cause, lock.ErrSessionClosed) {
			t.Fatalf("job's context ended with %v, want lock.ErrSessionClosed", o.cause)
		}
		ends := map[string]lock.Event{}
		for range 2 {
			e := r.end()
			if _, dup := ends[e.Job]; dup {
				t.Fatalf("%s reported twice: %+v", e.Job, e)
			}
			ends[e.Job] = e
		}
		if e := ends["running"]; e.Kind != lock.RunEnded || !errors.Is(e.Err, lock.ErrSessionClosed) ||
			!strings.Contains(e.Reason, "context cancelled: "+lock.ErrSessionClosed.Error()) {
			t.Errorf("running job ended with %+v", e)
		}
		if e := ends["waiting"]; e.Kind != lock.FiringSkipped || e.Reason != ReasonStopping || !errors.Is(e.Err, lock.ErrSessionClosed) {
			t.Errorf("waiting firing ended with %+v", e)
		}
		r.idle()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := r.s.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if n := len(r.obs.firingEvents()); n != 5 { // claimed twice, started, and the two ends
			t.Errorf("%d firing events, want 5: %+v", n, r.obs.firingEvents())
		}
	})
}

// TestGoexitReleasesLock: a job that ends its goroutine with
// runtime.Goexit still lets its lock go, rather than leaving the session
// to renew it for ever.
func TestGoexitReleasesLock(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second)
		id := r.s.LockID("j")
		ran := make(chan struct{}, 1)
		once := true
		_ = r.s.AddJob("j", "@every 1m", func(context.Context) error {
			if once {
				once = false
				ran <- struct{}{}
				runtime.Goexit()
			}
			return nil
		})
		_ = r.s.Start()
		recv(t, ran, "the run")
		synctest.Wait()
		time.Sleep(10 * time.Second) // many renew intervals of a 1s TTL, before the next firing
		if h := r.locks.HeldBy(id); h != "" {
			t.Fatalf("lock of a job that called Goexit held by %q", h)
		}
		r.stop()
	})
}

// answersLate is a lock store whose acquisitions of job locks reach the
// server after delay, and whose callers give up when their context ends,
// as a driver returns at once while the command it sent is still on its
// way: the server applies it later, and nobody is told. sent gets a value
// when such an acquisition is sent.
type answersLate struct {
	*locktest.Store
	delay time.Duration
	sent  chan struct{}
}

func (s answersLate) AcquireLocks(ctx context.Context, keeper string, ids ...string) (lock.Acquisition, error) {
	if !slices.ContainsFunc(ids, func(id string) bool { return !isPresence(id) }) {
		return s.Store.AcquireLocks(ctx, keeper, ids...)
	}
	type answer struct {
		a   lock.Acquisition
		err error
	}
	c := make(chan answer, 1)
	go func() {
		time.Sleep(s.delay)
		a, err := s.Store.AcquireLocks(context.WithoutCancel(ctx), keeper, ids...)
		c <- answer{a, err}
	}()
	s.sent <- struct{}{}
	select {
	case r := <-c:
		return r.a, r.err
	case <-ctx.Done():
		return lock.Acquisition{}, ctx.Err()
	}
}

// TestStopDoesNotAbandonLockAcquisition: Stop while a firing's acquisition
// of its job's lock is on its way waits for its answer, and releases the
// lock if it was taken, rather than giving up on a write the server may
// still apply after the clean-up looked for it: that would leave the lock
// held, and the job's next firing elsewhere waiting for its lease to
// expire or skipped.
func TestStopDoesNotAbandonLockAcquisition(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		locks := locktest.New(locktest.WithTTL(time.Minute))
		slow := answersLate{Store: locks, delay: time.Second, sent: make(chan struct{}, 1)}
		session, err := lock.NewSession(slow, lock.WithKeeperID("me"))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = session.Close() }()
		cfg, _ := buildConfig(nil)
		s, err := newScheduler(newFakeStore(locks.Clock()), session, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ran := make(chan struct{}, 1)
		_ = s.AddJob("j", "@every 1m", func(context.Context) error { ran <- struct{}{}; return nil })
		_ = s.Start()
		recv(t, slow.sent, "the acquisition")
		if err := s.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * slow.delay) // the write has reached the server
		if h := locks.HeldBy(s.LockID("j")); h != "" {
			t.Fatalf("after Stop, the job's lock is held by %q until its lease expires", h)
		}
		select {
		case <-ran:
			t.Fatal("the job ran after Stop")
		default:
		}
	})
}

// TestLockOfGoneRunOutwaited: the previous run's instance died holding the
// job's lock (killed mid-run, or between its lock and its start), so the
// lock stays held until its lease lapses, up to a TTL later: more than the
// half period a firing waits for it (OverlapSkip). The holder's lease,
// read when the wait runs out, was not renewed for over a renew interval:
// the firing waits for it to lapse and runs, late, rather than being
// recorded as "previous run still going" (BenchmarkClaimantsKilled lost
// firings that way). A run still going on another instance keeps its
// lease renewed: the firing is skipped after half the period, as before.
func TestLockOfGoneRunOutwaited(t *testing.T) {
	dead := func(r *rig, id string) func() {
		if a, err := r.locks.AcquireLocks(context.Background(), "dead", id); err != nil || len(a.Granted) != 1 {
			t.Fatalf("the dead run's lock: %+v, %v", a, err)
		}
		return func() {}
	}
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		hold func(r *rig, id string) (release func())
		runs bool
	}{
		{"holder dead", time.Second, dead, true},
		{"holder alive", time.Second, (*rig).holdAlive, false},
		// A TTL of 3s: the lock, taken 0.6s before the wait runs out
		// (10.5s), is too young for a live holder to have renewed it (a
		// renew interval, 1s, and a half). The holder is looked at again
		// once it would have. (The demo's tick, every second, TTL 3s, was
		// so lost when its leader was killed mid-run.)
		{"holder dead, TTL 3s", 3 * time.Second, dead, true},
		{"holder alive, TTL 3s", 3 * time.Second, (*rig).holdAlive, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, tc.ttl)
				log := newRunLog()
				_ = r.s.AddJob("j", "@every 1s", log.job(nil))
				_ = r.s.Start()
				time.Sleep(time.Until(epoch.Add(9900 * time.Millisecond)))
				release := tc.hold(r, r.s.LockID("j"))
				lapsed := epoch.Add(9900*time.Millisecond + tc.ttl) // the dead holder's lease
				time.Sleep(time.Until(lapsed.Add(50 * time.Millisecond)))
				r.stop()
				release()

				f := epoch.Add(10 * time.Second)
				var ran *ranRun
				for _, run := range log.all() {
					if run.Scheduled.Equal(f) {
						ran = &run
					}
				}
				var skipped []lock.Event // of the firing at 10s
				for _, e := range r.obs.all(lock.FiringSkipped) {
					if e.Scheduled.Equal(f) {
						skipped = append(skipped, e)
					}
				}
				switch {
				case tc.runs && ran == nil:
					t.Fatalf("the firing at 10s did not run; runs %v, skipped: %+v", log.scheduled(), skipped)
				case tc.runs && ran.began.Before(lapsed):
					t.Errorf("the firing at 10s began at %v, while the dead run's lock was held (to %v)", ran.began.Sub(epoch), lapsed.Sub(epoch))
				case tc.runs && len(skipped) != 0:
					t.Errorf("skipped: %+v", skipped)
				case !tc.runs && ran != nil:
					t.Errorf("the firing at 10s ran, at %v, while a live run held the lock", ran.began.Sub(epoch))
				case !tc.runs && (len(skipped) != 1 || skipped[0].Reason != ReasonLockHeld):
					t.Errorf("skipped: %+v, want the firing at 10s, as %q", skipped, ReasonLockHeld)
				}
			})
		})
	}
}

// errUnreachable is an error of a database that cannot be reached.
var errUnreachable = fmt.Errorf("server selection: %w", context.DeadlineExceeded)

// TestEndRecordedAfterOutage: a run's end is written however long the
// database cannot be reached while the Scheduler runs: its record must not stay
// "running". (Found by the simulation, seeds 544, 670 and 939: the
// scheduler gave up after twice the op timeout.)
func TestEndRecordedAfterOutage(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second)
		outage := endsUnreachableUntil(r, epoch.Add(time.Minute+10*r.s.cfg.opTimeout))
		_ = r.s.AddJob("j", "@every 1m", func(context.Context) error { return nil })
		_ = r.s.Start()
		e := r.next(lock.RunEnded)
		if e.Outcome != string(OutcomeSucceeded) || strings.Contains(e.Reason, "not recorded") {
			t.Fatalf("run ended with %+v, want succeeded and recorded", e)
		}
		if now := r.locks.Clock().Now(); now.Before(outage) {
			t.Fatalf("run reported ended at %v, before the outage ended (%v)", now, outage)
		}
		// The job's record is the 1m firing's, succeeded; or, once the
		// outage ended, already the next firing's (2m, due meanwhile),
		// whose start took the lock only after the 1m run had written its
		// end and released it (CI saw the 2m run's record, running, 1 run
		// in 40 under -race).
		if rec := r.store.running("j"); rec == nil ||
			rec.Scheduled.Equal(epoch.Add(time.Minute)) && rec.Outcome != OutcomeSucceeded ||
			rec.Scheduled.Before(epoch.Add(time.Minute)) {
			t.Fatalf("job record %+v, want the 1m firing's, succeeded, or a later firing's", rec)
		}
		r.stop()
	})
}

// endsUnreachableUntil makes r's end writes fail, as when the database
// cannot be reached, until outage by r's clock; it returns outage.
func endsUnreachableUntil(r *rig, outage time.Time) time.Time {
	r.store.onFinish = func(Run) error {
		if r.locks.Clock().Now().Before(outage) {
			return errUnreachable
		}
		return nil
	}
	return outage
}

// TestLateEndIsTheRunsEnd: a run's end written late, the database
// unreachable when its job returned, records when the job returned (by
// the server's clock, as the claim read it), not when the write got
// through: the overlap policy judges the firings after the run by that end
// (simulation seed 123: an end written 3 s late had a firing that fell
// after the run skipped as "previous run still going").
func TestLateEndIsTheRunsEnd(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second)
		outage := endsUnreachableUntil(r, epoch.Add(time.Minute+10*r.s.cfg.opTimeout))
		var returned atomic.Pointer[time.Time]
		_ = r.s.AddJob("j", "@every 1m", func(context.Context) error {
			now := r.locks.Clock().Now()
			returned.Store(&now)
			return nil
		})
		_ = r.s.Start()
		r.next(lock.RunEnded)
		rec := r.store.running("j")
		if rec == nil || rec.Outcome != OutcomeSucceeded || returned.Load() == nil {
			t.Fatalf("job record %+v, want succeeded", rec)
		}
		if end := *returned.Load(); !rec.End.Equal(end) {
			t.Errorf("end recorded %v, want %v, when the job returned (the write got through at %v)",
				rec.End.Sub(epoch), end.Sub(epoch), outage.Sub(epoch))
		}
		r.stop()
	})
}

// TestEndNotRecordedAtStop: once the Scheduler stops, an end the database
// keeps failing is tried for up to twice the op timeout more, then
// reported as not recorded: Stop is not held up for good.
func TestEndNotRecordedAtStop(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := endsUnreachable(t)
		time.Sleep(5 * r.s.cfg.opTimeout) // still trying: the Scheduler runs
		stopped := r.locks.Clock().Now()
		done := make(chan error, 1)
		go func() { done <- r.s.Stop(context.Background()) }()
		if err := recv(t, done, "Stop"); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if took, most := r.locks.Clock().Since(stopped), 3*r.s.cfg.opTimeout; took > most {
			t.Errorf("Stop took %v, want at most %v", took, most)
		}
		if e := r.next(lock.RunEnded); !strings.Contains(e.Reason, "end not recorded") {
			t.Fatalf("run ended with %+v, want its end reported not recorded", e)
		}
		if rec := r.store.running("j"); rec == nil || rec.Outcome != OutcomeRunning {
			t.Fatalf("job record %+v, want still running", rec)
		}
	})
}

// endsUnreachable starts a rig whose job "j" (every minute) runs once,
// and whose end writes all fail as when the database cannot be reached;
// it returns once the first of them failed.
func endsUnreachable(t *testing.T) *rig {
	t.Helper()
	r := newRig(t, time.Second)
	failing := make(chan struct{})
	var once sync.Once
	r.store.onFinish = func(Run) error {
		once.Do(func() { close(failing) })
		return errUnreachable
	}
	_ = r.s.AddJob("j", "@every 1m", func(context.Context) error { return nil })
	_ = r.s.Start()
	recv(t, failing, "the end write")
	return r
}

// TestEndRefused: an end write that fails otherwise than by an outage (a
// refused write) is tried for twice the op timeout, then reported as not
// recorded, and the lock is released: the job is not held up for good.
func TestEndRefused(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, time.Second)
		r.store.onFinish = func(Run) error { return errBoom }
		_ = r.s.AddJob("j", "@every 1m", func(context.Context) error { return nil })
		_ = r.s.Start()
		if e := r.next(lock.RunEnded); !strings.Contains(e.Reason, "end not recorded: boom") {
			t.Fatalf("run ended with %+v, want its end reported not recorded", e)
		}
		if took, most := r.locks.Clock().Since(epoch.Add(time.Minute)), 3*r.s.cfg.opTimeout; took > most {
			t.Errorf("gave up %v after the run, want at most %v", took, most)
		}
		r.idle()
		if h := r.locks.HeldBy(r.s.LockID("j")); h != "" {
			t.Fatalf("lock left held by %q", h)
		}
		r.stop()
	})
}

// TestEndNotRecordedSessionClosed: a Session closed under a running
// Scheduler ends its attempts as Stop does.
func TestEndNotRecordedSessionClosed(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := endsUnreachable(t)
		_ = r.session.Close()
		if e := r.next(lock.RunEnded); !strings.Contains(e.Reason, "end not recorded") {
			t.Fatalf("run ended with %+v, want its end reported not recorded", e)
		}
		if took, most := r.locks.Clock().Since(epoch.Add(time.Minute)), 3*r.s.cfg.opTimeout; took > most {
			t.Errorf("gave up %v after the run, want at most %v", took, most)
		}
		r.stop()
	})
}

// TestSlowRecordsDoNotSkipNextFiring: once a run's end is recorded and its
// lock released, the instance is no longer busy with the job, however long
// the run's history record or the release's reply take: the next firing
// is claimed and run, not skipped as "previous run still going" with no
// run going and nobody claiming it (sim seeds 1296 and 1253).
func TestSlowRecordsDoNotSkipNextFiring(t *testing.T) {
	for _, c := range []struct {
		name string
		slow func(r *rig, release chan struct{})
	}{
		{"history write", func(r *rig, release chan struct{}) {
			var waited atomic.Bool
			r.store.onHistory = func(Run) {
				if waited.CompareAndSwap(false, true) {
					<-release // the first run's record, for two periods
				}
			}
		}},
		{"release retried", func(r *rig, release chan struct{}) {
			// The first release applies, its replies are lost, and it
			// is retried for the Session's release timeout.
			r.locks.FailAfter(locktest.OpRelease, 1, errBoom)
			r.locks.Fail(locktest.OpRelease, locktest.Always, errBoom)
			go func() { <-release; r.locks.Restore() }()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, 3*time.Second)
				release := make(chan struct{})
				c.slow(r, release)
				_ = r.s.AddJob("j", "@every 1s", func(context.Context) error { return nil })
				_ = r.s.Start()
				// The first firing's event may come after the others':
				// it is emitted once its record is written.
				ran := map[time.Time]bool{}
				open := true
				for len(ran) < 3 {
					e := r.end()
					if e.Kind != lock.RunEnded {
						if open {
							close(release)
						}
						t.Fatalf("firing %s: %v %q, want it run", e.Scheduled.Format("15:04:05"), e.Kind, e.Reason)
					}
					ran[e.Scheduled] = true
					if open && ran[epoch.Add(2*time.Second)] {
						close(release)
						open = false
					}
				}
				for i := 1; i <= 3; i++ {
					if !ran[epoch.Add(time.Duration(i)*time.Second)] {
						t.Errorf("firing %d did not run: %v", i, ran)
					}
				}
				r.stop()
			})
		})
	}
}

// TestSlowReleaseHoldsBackNoOtherJob: a job's release that hangs (its
// reply lost, say) does not keep the next jobs' locks held behind it in
// the release queue: another instance could not take them, and would skip
// their firings as if their runs went on.
func TestSlowReleaseHoldsBackNoOtherJob(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 3*time.Second)
		slow, other := r.s.LockID("slow"), r.s.LockID("other")
		unblock := make(chan struct{})
		r.locks.BeforeCall(func(ctx context.Context, c locktest.Call) error {
			if c.Op == locktest.OpRelease && slices.Contains(c.LockIDs, slow) {
				<-unblock
			}
			return nil
		})
		_ = r.s.AddJob("slow", "@every 10s", func(context.Context) error { return nil })
		_ = r.s.AddJob("other", "@every 10s", func(ctx context.Context) error {
			// Ends after slow's release began.
			return r.session.Sleep(ctx, 100*time.Millisecond)
		})
		released := make(chan struct{}, 1)
		r.locks.AfterCall(func(c locktest.Call) {
			if c.Op == locktest.OpRelease && slices.Contains(c.LockIDs, other) && c.Err == nil {
				select {
				case released <- struct{}{}:
				default:
				}
			}
		})
		_ = r.s.Start()
		select {
		case <-released:
			if h := r.locks.HeldBy(slow); h == "" {
				t.Error("slow's release was not held back, the test shows nothing")
			}
			if h := r.locks.HeldBy(other); h != "" {
				t.Errorf("other's lock held by %q after its release", h)
			}
		case <-time.After(time.Minute): // the bubble's time: no run lasts that long
			t.Errorf("other's lock still held by %q behind slow's release", r.locks.HeldBy(other))
		}
		close(unblock)
		r.stop()
	})
}
