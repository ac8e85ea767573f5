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

// TestClaimantWaitsForLock: the instance that won a claim finds the lock
// still held by the previous run, which is recording its end on another
// instance. It must wait for the lock rather than drop the firing.
func TestClaimantWaitsForLock(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := newRig(t, time.Second)
	id := r.s.LockID("j")
	f := epoch.Add(10 * time.Second)
	r.store.onClaim = func(string, time.Time) { r.locker.take(id, "other") }
	ran := make(chan Run, 1)
	_ = r.s.AddJob("j", "@every 10s", func(ctx context.Context) error {
		run, _ := RunFromContext(ctx)
		ran <- run
		return nil
	})
	_ = r.s.Start()
	r.advanceTo(1, f)
	// The first attempt found the lock held: the loop's timer and the pause
	// before the next attempt are armed.
	r.settle(2)
	r.clock.Advance(100 * time.Millisecond)
	r.settle(2)
	r.locker.drop(id) // the previous run released it
	r.clock.Advance(time.Second)
	if run := recv(t, ran, "the run"); !run.Scheduled.Equal(f) || run.Keeper != "me" {
		t.Fatalf("ran %+v", run)
	}
	r.idle()
	if runs := r.store.runs(); len(runs) != 1 || runs[0].Outcome != OutcomeSucceeded {
		t.Fatalf("runs %+v", runs)
	}
	r.stop()
}

// TestClaimantGivesUpOnLock: a lock held throughout is waited for until half
// a period after the firing (at most a TTL), with a bounded number of
// attempts, and the firing is then skipped.
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
			r := newRig(t, tc.ttl)
			id := r.s.LockID("j")
			var attempts int
			var mu sync.Mutex
			r.locker.onAcquire = func(string) {
				r.locker.take(id, "other") // renewed by its holder all along
				mu.Lock()
				attempts++
				mu.Unlock()
			}
			ran := make(chan struct{}, 1)
			_ = r.s.AddJob("j", tc.spec, func(context.Context) error { ran <- struct{}{}; return nil })
			_ = r.s.Start()
			r.settle(1)
			f := r.s.queue[0].next
			r.advanceTo(1, f)
			eventually(t, 10*time.Second, "the first attempt", func() bool { mu.Lock(); defer mu.Unlock(); return attempts > 0 })
			ended := r.stepWhileBusy(2, 10*time.Millisecond, f.Add(tc.giveUp+time.Second))
			if d := ended.Sub(f); d < tc.giveUp || d > tc.giveUp+10*time.Millisecond {
				t.Errorf("gave up %v after the firing, want %v", d, tc.giveUp)
			}
			select {
			case <-ran:
				t.Fatal("the firing ran without its lock")
			default:
			}
			mu.Lock()
			n := attempts
			mu.Unlock()
			// Pauses double from 20ms to TTL/10.
			if n < 4 || n > 20 {
				t.Errorf("%d attempts to take the lock", n)
			}
			if h := r.locker.holder(id); h != "other" || len(r.store.runs()) != 0 {
				t.Fatalf("holder %q, runs %+v", h, r.store.runs())
			}
			r.stop()
		})
	}
}

// TestReleaseBeforeHistory: the lock is released as soon as the job's record
// says how it ended; the history is written after.
func TestReleaseBeforeHistory(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := newRig(t, time.Second)
	id := r.s.LockID("j")
	holders := make(chan string, 1)
	r.store.onHistory = func(Run) { holders <- r.locker.holder(id) }
	_ = r.s.AddJob("j", "@every 1s", func(context.Context) error { return nil })
	_ = r.s.Start()
	r.advanceTo(1, epoch.Add(time.Second))
	if h := recv(t, holders, "the history write"); h != "" {
		t.Fatalf("lock held by %q while the history is written", h)
	}
	r.idle()
	r.stop()
}

// TestReleaseRetried: a release that fails is tried again, so that the next
// firing's claimant does not wait for the lease to expire.
func TestReleaseRetried(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := newRig(t, time.Minute)
	id := r.s.LockID("j")
	r.locker.releaseFailures = 2
	ran := make(chan struct{}, 1)
	_ = r.s.AddJob("j", "@every 10s", func(context.Context) error { ran <- struct{}{}; return nil })
	_ = r.s.Start()
	f := epoch.Add(10 * time.Second)
	r.advanceTo(1, f)
	recv(t, ran, "the run")
	eventually(t, 10*time.Second, "the end record", func() bool {
		r.store.mu.Lock()
		defer r.store.mu.Unlock()
		return r.store.finishCalls > 0
	})
	// The loop's timer and the pause between release attempts.
	ended := r.stepWhileBusy(2, 10*time.Millisecond, f.Add(time.Second))
	if h := r.locker.holder(id); h != "" {
		t.Fatalf("lock still held by %q", h)
	}
	if _, _, releases := r.locker.counts(); releases != 3 {
		t.Errorf("%d releases, want 3", releases)
	}
	if d := ended.Sub(f); d > 100*time.Millisecond {
		t.Errorf("released %v after the firing", d)
	}
	r.stop()
}

// TestHungRenewalRetried: a renewal that never answers is given up on and
// tried again, before the lease could lapse.
func TestHungRenewalRetried(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := newRig(t, time.Second) // renew every 333ms, margin 100ms
	hanging, abandoned := newCloser(), newCloser()
	var mu sync.Mutex
	calls := 0
	var hungAt time.Time
	r.locker.onRenew = func(ctx context.Context) error {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		if !first {
			return nil
		}
		hungAt = r.clock.Now()
		hanging.close() // a silent connection
		<-ctx.Done()
		abandoned.close()
		return ctx.Err()
	}
	started, ended := make(chan Run, 1), make(chan outcome, 1)
	release := newCloser()
	_ = r.s.AddJob("j", "@every 1m", blockingJob(r, started, release, ended))
	_ = r.s.Start()
	start := epoch.Add(time.Minute)
	r.advanceTo(1, start)
	recv(t, started, "the run")
	// Armed between renewals: the loop's timer, the expiry and the next
	// renewal; while one is in flight, the loop's timer and the attempt's.
	r.stepUntil(3, 10*time.Millisecond, start.Add(time.Second), hanging)
	// The attempt gives up after half the time left until the lease
	// deadline minus the margin, or half the renew interval if that is
	// longer. Moved to that instant at once: in smaller steps, the clock
	// could run past the deadline before the loop noticed.
	left := start.Add(time.Second - r.s.margin).Sub(hungAt)
	r.settle(2) // the loop's timer and the attempt's
	r.clock.Advance(max(left/2, r.s.renewEvery/2))
	recv(t, abandoned.c, "the hung renewal to be given up on")
	r.stepUntil(3, 10*time.Millisecond, start.Add(3*time.Second), newCloser())
	select {
	case o := <-ended:
		t.Fatalf("job ended %v after it started: %v", o.at.Sub(start), o.cause)
	default:
	}
	if _, renewals, _ := r.locker.counts(); renewals < 6 {
		t.Fatalf("%d renewals in 3 TTLs", renewals)
	}
	release.close()
	if o := recv(t, ended, "the end"); o.cause != nil {
		t.Fatalf("cancelled: %v", o.cause)
	}
	r.idle()
	r.stop()
}

// TestFirstRenewalFromSending: the lease counts from the sending of the
// acquisition, so the first renewal does too, however long the acquisition
// took.
func TestFirstRenewalFromSending(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := newRig(t, time.Second) // renew every 333ms
	f := epoch.Add(time.Minute)
	r.locker.onAcquire = func(string) { r.clock.Advance(300 * time.Millisecond) }
	renewedAt := make(chan time.Time, 10)
	r.locker.onRenew = func(context.Context) error { renewedAt <- r.clock.Now(); return nil }
	started, ended := make(chan Run, 1), make(chan outcome, 1)
	release := newCloser()
	_ = r.s.AddJob("j", "@every 1m", blockingJob(r, started, release, ended))
	_ = r.s.Start()
	r.advanceTo(1, f)
	recv(t, started, "the run")
	got := newCloser()
	var first time.Time
	go func() { first = recv(t, renewedAt, "the first renewal"); got.close() }()
	r.stepUntil(3, 10*time.Millisecond, f.Add(time.Second), got)
	<-got.c
	if d := first.Sub(f); d > 340*time.Millisecond {
		t.Errorf("first renewal %v after sending the acquisition, want about 333ms", d)
	}
	release.close()
	recv(t, ended, "the end")
	r.idle()
	r.stop()
}

// TestLeaseTooLateToTrust: a lock acquired so slowly that its lease is
// already past its deadline minus the margin is not used at all.
func TestLeaseTooLateToTrust(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := newRig(t, time.Second) // margin 100ms
	r.locker.onAcquire = func(string) { r.clock.Advance(950 * time.Millisecond) }
	ran := make(chan struct{}, 1)
	_ = r.s.AddJob("j", "@every 1m", func(context.Context) error { ran <- struct{}{}; return nil })
	_ = r.s.Start()
	r.advanceTo(1, epoch.Add(time.Minute))
	eventually(t, 10*time.Second, "the acquisition", func() bool { n, _, _ := r.locker.counts(); return n > 0 })
	r.idle()
	select {
	case <-ran:
		t.Fatal("job ran under a lease it could not trust")
	default:
	}
	r.store.mu.Lock()
	started := r.store.run["j"]
	r.store.mu.Unlock()
	if started != nil || len(r.store.runs()) != 0 {
		t.Fatalf("recorded %+v, history %+v", started, r.store.runs())
	}
	if h := r.locker.holder(r.s.LockID("j")); h != "" {
		t.Fatalf("lock left held by %q", h)
	}
	r.stop()
}

// TestLeaseLapsesWhileRecordingStart: the lease can no longer be trusted
// once the start is recorded. The job must not be called, even if the
// renewal loop has not cancelled its context yet; the record ends as "not
// run".
func TestLeaseLapsesWhileRecordingStart(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for range 20 { // the check it tests races with the renewal loop
		r := newRig(t, time.Second) // margin 100ms
		r.store.onStart = func(context.Context, Run) (bool, error) {
			r.clock.Advance(950 * time.Millisecond)
			return true, nil
		}
		ran := make(chan struct{}, 1)
		_ = r.s.AddJob("j", "@every 1m", func(context.Context) error { ran <- struct{}{}; return nil })
		_ = r.s.Start()
		r.advanceTo(1, epoch.Add(time.Minute))
		eventually(t, 10*time.Second, "the start record", func() bool {
			r.store.mu.Lock()
			defer r.store.mu.Unlock()
			return r.store.run["j"] != nil
		})
		r.idle()
		select {
		case <-ran:
			t.Fatal("job started after its lease could no longer be trusted")
		default:
		}
		runs := r.store.runs()
		if len(runs) != 1 || runs[0].Outcome != OutcomeFailed || !strings.HasPrefix(runs[0].Error, "not run: ") ||
			!strings.Contains(runs[0].Error, lock.ErrLeaseLost.Error()) {
			t.Fatalf("runs %+v", runs)
		}
		r.stop()
	}
}

// TestStartNotRecorded: a firing whose start record failed did not run and
// leaves no history, unless the write went through after all, in which case
// its record is ended as "not run" and kept.
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
			r := newRig(t, time.Second)
			r.store.onStart = func(context.Context, Run) (bool, error) { return tc.applied, errBoom }
			ran := make(chan struct{}, 1)
			_ = r.s.AddJob("j", "@every 1m", func(context.Context) error { ran <- struct{}{}; return nil })
			_ = r.s.Start()
			r.advanceTo(1, epoch.Add(time.Minute))
			eventually(t, 10*time.Second, "the end record", func() bool {
				r.store.mu.Lock()
				defer r.store.mu.Unlock()
				return r.store.finishCalls > 0
			})
			r.idle()
			select {
			case <-ran:
				t.Fatal("job ran without a start record")
			default:
			}
			runs := r.store.runs()
			r.store.mu.Lock()
			rec := r.store.run["j"]
			r.store.mu.Unlock()
			if !tc.applied {
				if len(runs) != 0 || rec != nil {
					t.Fatalf("a run that never started was recorded: history %+v, record %+v", runs, rec)
				}
			} else if len(runs) != 1 || runs[0].Outcome != OutcomeFailed || !strings.HasPrefix(runs[0].Error, "not run: ") ||
				rec == nil || rec.Outcome != OutcomeFailed {
				t.Fatalf("history %+v, record %+v", runs, rec)
			}
			if h := r.locker.holder(r.s.LockID("j")); h != "" {
				t.Fatalf("lock left held by %q", h)
			}
			r.stop()
		})
	}
}

// TestStopWaitWhileRecordingStart: Stop in StopWait mode while a claimed
// firing records its start. The start is abandoned; nothing may be
// recorded as a run.
func TestStopWaitWhileRecordingStart(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
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
	r.advanceTo(1, epoch.Add(time.Minute))
	if err := recv(t, stopped, "Stop"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ran:
		t.Fatal("job ran after Stop")
	default:
	}
	if runs := r.store.runs(); len(runs) != 0 {
		t.Fatalf("history of a run that never happened: %+v", runs)
	}
	if h := r.locker.holder(r.s.LockID("j")); h != "" {
		t.Fatalf("lock left held by %q", h)
	}
}

// partialLocker's AcquireLocks reports one lock acquired and one refused,
// and fails for the rest.
type partialLocker struct{ *fakeLocker }

func (partialLocker) AcquireLocks(_ context.Context, keeper string, ids ...string) (lock.Acquisition, error) {
	return lock.Acquisition{
		Leases:  []lock.Lease{{LockID: ids[0], KeeperID: keeper, Fence: 7}},
		Refused: ids[1:2],
	}, errBoom
}

// TestAcquireBatchKeepsWhatAFailedCallSettled: when a batched acquisition
// fails part way, the jobs whose locks it took still run, those it found
// held wait as usual, and only the others see the error (and release).
func TestAcquireBatchKeepsWhatAFailedCallSettled(t *testing.T) {
	s := &Scheduler{locker: partialLocker{}, keeper: "me"}
	res, err := s.acquireBatch(context.Background(), struct{}{}, []string{"a", "b", "c", "d"})
	if err != nil || len(res) != 4 {
		t.Fatalf("results %+v, error %v", res, err)
	}
	if r := res[0]; !r.ok || r.err != nil || r.lease.Fence != 7 {
		t.Errorf("acquired lock: %+v, want its lease", r)
	}
	if r := res[1]; r.ok || r.err != nil {
		t.Errorf("refused lock: %+v, want not acquired and no error", r)
	}
	for _, r := range res[2:] {
		if r.ok || !errors.Is(r.err, errBoom) {
			t.Errorf("unsettled lock: %+v, want the call's error", r)
		}
	}
}
