package scheduler

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/mongolock/mongolock/lock"
)

// flagLeader leads while set.
type flagLeader struct{ atomic.Bool }

func (l *flagLeader) IsLeader() bool { return l.Load() }

// newLeaderPair makes two instances in leader-only mode on one rig's
// stores: the rig's ("me"), which leads, and b.
func newLeaderPair(t *testing.T, opts ...Option) (r *rig, b *twin, leadA, leadB *flagLeader) {
	t.Helper()
	leadA, leadB = &flagLeader{}, &flagLeader{}
	leadA.Store(true)
	r = newRig(t, time.Second, append([]Option{WithLeaderOnly(leadA)}, opts...)...)
	b = newTwin(t, r.locks, r.store, "b", append([]Option{WithLeaderOnly(leadB)}, opts...)...)
	return r, b, leadA, leadB
}

// TestLeaderOnly: with WithLeaderOnly, only the leader claims and runs
// firings; followers try none.
func TestLeaderOnly(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r, b, _, _ := newLeaderPair(t)
		log := newRunLog()
		for _, s := range []*Scheduler{r.s, b.s} {
			_ = s.AddJob("j", "@every 1s", log.job(nil))
			_ = s.AddJob("k", "@every 2s", log.job(nil))
		}
		_ = r.s.Start()
		_ = b.s.Start()
		time.Sleep(10*time.Second + 500*time.Millisecond)
		r.stop()
		runs := log.all()
		if len(runs) != 10+5 {
			t.Errorf("%d runs in 10s, want 15", len(runs))
		}
		for _, run := range runs {
			if run.Keeper != "me" {
				t.Errorf("a follower ran %s@%v", run.Job, run.Scheduled.Sub(epoch))
			}
		}
		if evs := b.obs.all(lock.FiringClaimed, lock.FiringLost, lock.FiringSkipped, lock.RunStarted); len(evs) != 0 {
			t.Errorf("the follower tried firings: %+v", evs)
		}
	})
}

// TestLeaderOnlyHandover: the leader claims a firing and stalls before its
// start; leadership passes to another instance, which takes the claim over
// at its next poll and runs the firing, once: the old leader, when it goes
// on, does not start it. Firings missed while no instance led run as the
// catch-up policy says when one starts leading.
func TestLeaderOnlyHandover(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r, b, leadA, leadB := newLeaderPair(t, WithMisfireThreshold(2*time.Second))
		log := newRunLog()
		for _, s := range []*Scheduler{r.s, b.s} {
			_ = s.AddJob("j", "@every 10s", log.job(nil))
		}
		stalled, resume := make(chan time.Time, 1), make(chan struct{})
		r.store.onClaim = func(_ string, f time.Time) {
			if f.Equal(epoch.Add(10 * time.Second)) {
				stalled <- f
				<-resume
			}
		}
		_ = r.s.Start()
		_ = b.s.Start()
		f := recv(t, stalled, "the leader's claim")
		// A loses leadership (its lease lapsed); B leads.
		leadA.Store(false)
		leadB.Store(true)
		taken := b.s.pollInterval()*2 + time.Second
		time.Sleep(taken)
		runs := log.all()
		if len(runs) != 1 || runs[0].Keeper != "b" || !runs[0].Scheduled.Equal(f) {
			t.Fatalf("runs %+v within %v of the handover, want %v by b", runs, taken, f.Sub(epoch))
		}
		if evs := b.obs.all(lock.FiringTakenOver); len(evs) != 1 || evs[0].Leader != "me" || !evs[0].Scheduled.Equal(f) {
			t.Errorf("takeover events %+v", evs)
		}
		close(resume)
		e := r.next(lock.FiringSkipped)
		if e.Reason != ReasonTakenOver || !e.Scheduled.Equal(f) {
			t.Errorf("the old leader's firing ended with %+v, want %q", e, ReasonTakenOver)
		}

		// No one leads through two firings, longer than the threshold;
		// then A leads again: the latest misfire runs (MisfireRunLatest,
		// the default), the other is recorded as misfired.
		time.Sleep(time.Until(epoch.Add(15 * time.Second)))
		leadB.Store(false)
		time.Sleep(time.Until(epoch.Add(35 * time.Second)))
		leadA.Store(true)
		time.Sleep(2 * time.Second)
		runs = log.all()
		if len(runs) != 2 || runs[1].Keeper != "me" || !runs[1].Scheduled.Equal(epoch.Add(30*time.Second)) {
			t.Fatalf("runs %+v, want the firing at 30s caught up by the new leader", runs)
		}
		var missed []time.Duration
		for _, h := range r.store.runs() {
			if h.Outcome == OutcomeSkipped && h.Reason == ReasonMisfired {
				missed = append(missed, h.Scheduled.Sub(epoch))
			}
		}
		if !slices.Equal(missed, []time.Duration{20 * time.Second}) {
			t.Errorf("recorded as missed: %v, want [20s]; history %+v", missed, r.store.runs())
		}
		r.stop()
	})
}

// TestLeaderOnlyOutwaitsDeadLeadersLock: a leader that died just after it
// took a job's lock for a run leaves that lock held for up to a TTL after
// its leader lease lapsed. The next leader's first firing of the job waits
// that out and runs (the holder's lease is not renewed: lockFor's
// deadHolder), rather than being skipped as "previous run still going"
// after the usual half-period wait (CI saw the integration test
// TestLeaderOnlyBackOnSchedule lose firings that way).
func TestLeaderOnlyOutwaitsDeadLeadersLock(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		lead := &flagLeader{}
		r := newRig(t, time.Second, WithLeaderOnly(lead))
		log := newRunLog()
		_ = r.s.AddJob("j", "@every 1s", log.job(nil))
		_ = r.s.Start()
		// The old leader's run took the lock at 9.8s; its leader lease,
		// last renewed before, lapsed at 9.85s, when this instance leads.
		time.Sleep(time.Until(epoch.Add(9800 * time.Millisecond)))
		if a, err := r.locks.AcquireLocks(context.Background(), "old", r.s.LockID("j")); err != nil || len(a.Granted) != 1 {
			t.Fatalf("the old leader's lock: %+v, %v", a, err)
		}
		time.Sleep(50 * time.Millisecond)
		lead.Store(true)
		time.Sleep(time.Until(epoch.Add(11500 * time.Millisecond)))
		r.stop()

		lapsed := epoch.Add(10800 * time.Millisecond)
		// The firings since the start fell while no instance led: those
		// within the threshold run late, the latest misfire too, the
		// others are recorded as misfired; none is skipped because the
		// dead leader's lock was held.
		runs := log.all()
		if !slices.Contains(log.scheduled(), "10s") {
			t.Fatalf("runs %v, want the firing at 10s; skipped: %+v", log.scheduled(), r.obs.all(lock.FiringSkipped))
		}
		if runs[0].began.Before(lapsed) {
			t.Errorf("the firing at %v began at %v, while the old leader's lock was held (to %v)", runs[0].Scheduled.Sub(epoch),
				runs[0].began.Sub(epoch), lapsed.Sub(epoch))
		}
		for _, e := range r.obs.all(lock.FiringSkipped) {
			if e.Reason != ReasonMisfired {
				t.Errorf("skipped: %+v", e)
			}
		}
	})
}

// TestLeaderOnlySpecFollowsLeader: in leader-only mode a follower that
// registers the job with another spec after the leader must not stop the
// job: only the leader fires, so the leader's spec is the one followed,
// and the leader registers it again at its next poll. Before, the leader
// was superseded and fired nothing, and the follower, not leading, fired
// nothing either.
func TestLeaderOnlySpecFollowsLeader(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		r, b, _, _ := newLeaderPair(t)
		log := newRunLog()
		_ = r.s.AddJob("j", "@every 1s", log.job(nil))
		_ = b.s.AddJob("j", "@every 2s", log.job(nil))
		_ = r.s.Start()
		time.Sleep(5500 * time.Millisecond)
		_ = b.s.Start()
		time.Sleep(10 * time.Second)
		r.stop()
		var late []time.Duration
		for _, run := range log.all() {
			if run.Keeper != "me" {
				t.Errorf("the follower ran %v", run.Scheduled.Sub(epoch))
			}
			if d := run.Scheduled.Sub(epoch); d >= 8*time.Second {
				late = append(late, d)
			}
		}
		if len(late) < 7 {
			t.Errorf("the leader ran %v from 8s on, want every second: the follower's spec stopped the job", late)
		}
	})
}
