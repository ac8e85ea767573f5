//go:build unix

package integration

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
)

// slack is added to the bounds the runner documents, for a loaded machine.
const slack = 2 * time.Second

func acceptedBy(keeper string) func(event) bool {
	return func(e event) bool { return e.Kind == evWork && e.Keeper == keeper && e.Accepted }
}

// lastCheck returns the last time keeper checked that it led before a write.
func lastCheck(evs []event, keeper string) time.Time {
	var t time.Time
	for _, e := range evs {
		if e.Kind == evWork && e.Keeper == keeper && e.Checked.After(t) {
			t = e.Checked
		}
	}
	return t
}

// Scenario 1: three complete instances; the leader's process is killed with
// SIGKILL, so it releases nothing. Another instance must lead within TTL plus
// a retry period (and slack), and not before the dead leader's lease could
// have expired.
func TestLeaderKilled(t *testing.T) {
	c := newCluster(t, testTTL, "tick-a", "tick-b")
	c.spawnN(3)
	first := c.awaitLeader(0, startTimeout)
	c.rec.await(t, 0, 3, 10*time.Second, "writes by the first leader", acceptedBy(first.Keeper))

	from := c.rec.mark()
	killedAt := c.proc(first.Keeper).kill(t)
	next := c.awaitLeader(from, testTTL+slack+10*time.Second)
	c.rec.awaitOne(t, from, 10*time.Second, "a write by the new leader", acceptedBy(next.Keeper))
	// Cron goes on too, once the job locks the dead instance may hold expire.
	c.rec.await(t, from, 2, testTTL+10*time.Second, "firings after the failover", func(e event) bool {
		return e.Kind == evJob && e.Scheduled.After(next.At)
	})

	failover := next.At.Sub(killedAt)
	rd, rp := lock.DefaultTimings(testTTL).RenewDeadline, lock.DefaultTimings(testTTL).RetryPeriod
	t.Logf("leader %s killed; %s led %v later (%.2f× TTL; bound TTL+retry period = %v)",
		first.Keeper, next.Keeper, failover.Round(time.Millisecond), failover.Seconds()/testTTL.Seconds(), (testTTL + rp).Round(time.Millisecond))
	if next.Keeper == first.Keeper || next.Fence <= first.Fence {
		t.Errorf("next term %v after %v: want another keeper and a larger fence", next, first)
	}
	if failover > testTTL+rp+slack {
		t.Errorf("failover took %v, want at most TTL+retry period+%v", failover, slack)
	}
	// The dead leader trusted its lease when it last checked, so the lease
	// had at least TTL - renew deadline left then (lock and runner docs).
	if earliest := lastCheck(c.rec.all(), first.Keeper).Add(testTTL - rd); next.At.Before(earliest) {
		t.Errorf("%s started at %s, before the dead leader's lease could expire (%s)",
			next.Keeper, next.At.Format(time.TimeOnly), earliest.Format(time.TimeOnly))
	}
	c.checkExclusion()
}

// Scenario 2: the leader's process is stopped (SIGSTOP) for longer than the
// TTL, then resumed. While it is stopped it can do nothing, so what must hold
// is: another instance takes over; on resuming, the old leader sees that its
// lease is lost, ends its task without another write, and its late renewal
// and release fail; the new holder is not disturbed, and the resource
// accepted only increasing fencing tokens.
func TestLeaderPaused(t *testing.T) {
	c := newCluster(t, testTTL, "tick-a")
	c.spawnN(3, func(cfg *instanceConfig) { cfg.Probe = true })
	first := c.awaitLeader(0, startTimeout)
	c.rec.await(t, 0, 2, 10*time.Second, "writes by the first leader", acceptedBy(first.Keeper))
	p := c.proc(first.Keeper)

	from := c.rec.mark()
	p.signal(t, syscall.SIGSTOP)
	pausedAt := wallNow()
	next := c.awaitLeader(from, testTTL+slack+10*time.Second)
	c.rec.awaitOne(t, from, 10*time.Second, "a write by the new leader", acceptedBy(next.Keeper))
	before := c.holder()
	if pause := testTTL * 3 / 2; time.Since(pausedAt) < pause {
		sleep(pause - time.Since(pausedAt))
	}

	resumed := c.rec.mark()
	p.signal(t, syscall.SIGCONT)
	resumedAt := wallNow()
	stop := c.rec.awaitOne(t, resumed, 10*time.Second, "the old leader's stop", isKindBy(evLeadStop, first.Keeper))
	probe := c.rec.awaitOne(t, resumed, 10*time.Second, "the old leader's late renewal", isKindBy(evProbe, first.Keeper))
	// The old leader's runner now releases (and fails) and campaigns again
	// as a follower: give it a few retry periods.
	sleep(testTTL)
	after := c.holder()

	t.Logf("paused %s for %v; %s took over %v after the pause began; on resume the old leader's task ended %v later (cause %q); late renewal held %d locks, late release: %s",
		first.Keeper, resumedAt.Sub(pausedAt).Round(time.Millisecond), next.Keeper, next.At.Sub(pausedAt).Round(time.Millisecond),
		stop.At.Sub(resumedAt).Round(time.Millisecond), stop.Cause, probe.Held, probe.Err)
	if !stop.Lost {
		t.Errorf("old leader's task ended with cause %q, want lock.ErrLeaseLost", stop.Cause)
	}
	if probe.Held != 0 || !probe.NotHeld {
		t.Errorf("late renewal held %d locks, late release: %q; want 0 and lock.ErrNotHeld", probe.Held, probe.Err)
	}
	for _, e := range c.rec.since(resumed) {
		// A write in flight when it stopped may be reported now; one it
		// decided to make after resuming must not exist.
		if e.Kind == evWork && e.Keeper == first.Keeper && e.Checked.After(resumedAt) {
			t.Errorf("old leader acted after it resumed: %v", e)
		}
	}
	if next.Fence <= first.Fence {
		t.Errorf("new term's fence %d not above the old %d", next.Fence, first.Fence)
	}
	if before.KeeperID != next.Keeper || after.KeeperID != next.Keeper || after.Fence != before.Fence || after.Fence != next.Fence {
		t.Errorf("holder before resume %s/%d, after %s/%d; want %s/%d throughout",
			before.KeeperID, before.Fence, after.KeeperID, after.Fence, next.Keeper, next.Fence)
	}
	for _, e := range c.rec.since(from) {
		if e.Kind == evLeadStop && e.Keeper == next.Keeper {
			t.Errorf("the new leader was disturbed: %v", e)
		}
	}
	// A paused process's term lasts through the pause (a lease is not a
	// fence); what must not overlap is when each holder acted.
	assertNoOverlap(t, "leader writes", workSpans(c.rec.all()))
	c.checkFirings(time.Time{}, time.Time{})
}

// Scenario 2, in-process variant: the leader's connection is made silent
// (every byte dropped) for longer than the TTL. The process runs on, so the
// leader's task must end by its own deadline, before anyone else starts;
// once the connection is back its late renewal and release fail and the new
// holder is undisturbed.
func TestLeaderSilenced(t *testing.T) {
	if be := useBackend(t); !be.Faults {
		t.Skipf("needs a fault proxy in front of the server; with %s the proxy would dial the member's address inside Docker's network", be.Kind)
	}
	c := newCluster(t, testTTL)
	faults := map[string]*mongotest.Fault{}
	instances := map[string]*instance{}
	for range 3 {
		client, f := mongotest.NewProxiedClient(t)
		in := c.startLocal(client)
		faults[in.cfg.Keeper], instances[in.cfg.Keeper] = f, in
	}
	first := c.awaitLeader(0, startTimeout)
	c.rec.await(t, 0, 2, 10*time.Second, "writes by the first leader", acceptedBy(first.Keeper))

	from := c.rec.mark()
	silencedAt := wallNow()
	faults[first.Keeper].Silence()
	stop := c.rec.awaitOne(t, from, testTTL+slack, "the silenced leader's stop", isKindBy(evLeadStop, first.Keeper))
	next := c.awaitLeader(from, testTTL+slack+10*time.Second)
	c.rec.awaitOne(t, from, 10*time.Second, "a write by the new leader", acceptedBy(next.Keeper))
	before := c.holder()
	if silence := testTTL * 3 / 2; time.Since(silencedAt) < silence {
		sleep(silence - time.Since(silencedAt))
	}
	faults[first.Keeper].Restore()
	restoredAt := wallNow()

	old := instances[first.Keeper]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, renewErr := old.locker.Renew(ctx, first.Keeper, leaderLock)
	released, relErr := old.locker.ReleaseLocks(ctx, first.Keeper, leaderLock)
	sleep(testTTL) // the old leader campaigns again, as a follower
	after := c.holder()

	rd := lock.DefaultTimings(testTTL).RenewDeadline
	t.Logf("silenced %s for %v: its task ended %v after the silence began (cause %q; renew deadline %v), %v before %s started; late renewal held %d (err %v), late release: %v",
		first.Keeper, restoredAt.Sub(silencedAt).Round(time.Millisecond), stop.At.Sub(silencedAt).Round(time.Millisecond), stop.Cause, rd,
		next.At.Sub(stop.At).Round(time.Millisecond), next.Keeper, len(r.Held), renewErr, relErr)
	if !stop.Lost {
		t.Errorf("silenced leader's task ended with cause %q, want lock.ErrLeaseLost", stop.Cause)
	}
	if !stop.At.Before(next.At) {
		t.Errorf("silenced leader's task ended at %s, after %s started at %s", stop.At.Format(time.TimeOnly), next.Keeper, next.At.Format(time.TimeOnly))
	}
	if took := stop.At.Sub(silencedAt); took > rd+slack {
		t.Errorf("silenced leader trusted its lease for %v, want at most the renew deadline %v (+%v)", took, rd, slack)
	}
	if renewErr != nil || len(r.Held) != 0 || relErr != nil || released != 0 {
		t.Errorf("late renewal: held %d, err %v; late release: %d released, %v; want 0, nil, 0, nil", len(r.Held), renewErr, released, relErr)
	}
	if before.KeeperID != next.Keeper || after.KeeperID != next.Keeper || after.Fence != before.Fence {
		t.Errorf("holder before restore %s/%d, after %s/%d; want %s/%d throughout",
			before.KeeperID, before.Fence, after.KeeperID, after.Fence, next.Keeper, next.Fence)
	}
	for _, e := range c.rec.since(from) {
		if e.Kind == evLeadStop && e.Keeper == next.Keeper {
			t.Errorf("the new leader was disturbed: %v", e)
		}
	}
	c.checkExclusion()
}
