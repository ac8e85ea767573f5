//go:build unix

package integration

import (
	"context"
	"testing"
	"time"

	"github.com/mongolock/mongolock/internal/cluster"
	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
)

// slack is added to the bounds the runner documents, for a loaded machine
// (takeoverBound, the benchmarks' waits).
//
// How long failovers take is a figure in these tests, logged: a loaded
// machine delays them by any amount. The bounds are checked on a simulated
// server (runner's TestDBFailoverAfterCut and
// TestDBSilencedLeaderStepsDownFirst), the figures measured by the
// benchmarks (BenchmarkFailover).
const slack = 2 * time.Second

func acceptedBy(keeper string) func(cluster.Event) bool {
	return func(e cluster.Event) bool { return e.Kind == cluster.EvWork && e.Instance == keeper && e.Accepted }
}

// lastCheck returns the last time keeper checked that it led before a write.
func lastCheck(evs []cluster.Event, keeper string) time.Time {
	var t time.Time
	for _, e := range evs {
		if e.Kind == cluster.EvWork && e.Instance == keeper && e.Checked.After(t) {
			t = e.Checked
		}
	}
	return t
}

// Scenario 1: three complete instances; the leader's process is killed with
// SIGKILL, so it releases nothing. Another instance must lead (within TTL
// plus a retry period: a figure here), and not before the dead leader's
// lease could have expired.
func TestLeaderKilled(t *testing.T) {
	c := newCluster(t, testTTL, "tick-a", "tick-b")
	c.spawnN(3)
	first := c.awaitLeader(0, startTimeout)
	c.await(0, 3, 10*time.Second, "writes by the first leader", acceptedBy(first.Instance))

	from := c.Mark()
	killedAt := c.kill(first.Instance)
	next := c.awaitLeader(from, hang)
	c.awaitOne(from, hang, "a write by the new leader", acceptedBy(next.Instance))
	// Cron goes on too, once the job locks the dead instance may hold expire.
	c.await(from, 2, hang, "firings after the failover", func(e cluster.Event) bool {
		return e.Kind == cluster.EvRun && e.Firing.After(next.T)
	})

	failover := next.T.Sub(killedAt)
	rd, rp := lock.DefaultTimings(testTTL).RenewDeadline, lock.DefaultTimings(testTTL).RetryPeriod
	t.Logf("leader %s killed; %s led %v later (%.2f× TTL; bound TTL+retry period = %v)",
		first.Instance, next.Instance, failover.Round(time.Millisecond), failover.Seconds()/testTTL.Seconds(), (testTTL + rp).Round(time.Millisecond))
	if next.Instance == first.Instance || next.Fence <= first.Fence {
		t.Errorf("next term %v after %v: want another keeper and a larger fence", next, first)
	}
	// The dead leader trusted its lease when it last checked, so the lease
	// had at least TTL - renew deadline left then (lock and runner docs).
	if earliest := lastCheck(c.Events(), first.Instance).Add(testTTL - rd); next.T.Before(earliest) {
		t.Errorf("%s started at %s, before the dead leader's lease could expire (%s)",
			next.Instance, next.T.Format(time.TimeOnly), earliest.Format(time.TimeOnly))
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
	c.await(0, 2, 10*time.Second, "writes by the first leader", acceptedBy(first.Instance))
	p := c.proc(first.Instance)

	from := c.Mark()
	must(t, p.Pause())
	pausedAt := wallNow()
	next := c.awaitLeader(from, hang)
	c.awaitOne(from, 10*time.Second, "a write by the new leader", acceptedBy(next.Instance))
	before := c.holder()
	if pause := testTTL * 3 / 2; time.Since(pausedAt) < pause {
		sleep(pause - time.Since(pausedAt))
	}

	resumed := c.Mark()
	must(t, p.Resume())
	resumedAt := wallNow()
	stop := c.awaitOne(resumed, 10*time.Second, "the old leader's stop", cluster.IsKindBy(cluster.EvUnlead, first.Instance))
	probe := c.awaitOne(resumed, 10*time.Second, "the old leader's late renewal", cluster.IsKindBy(cluster.EvProbe, first.Instance))
	// The old leader's runner now releases (and fails) and campaigns again
	// as a follower: give it a few retry periods.
	sleep(testTTL)
	after := c.holder()

	t.Logf("paused %s for %v; %s took over %v after the pause began; on resume the old leader's task ended %v later (cause %q); late renewal held %d locks, late release: %s",
		first.Instance, resumedAt.Sub(pausedAt).Round(time.Millisecond), next.Instance, next.T.Sub(pausedAt).Round(time.Millisecond),
		stop.T.Sub(resumedAt).Round(time.Millisecond), stop.Msg, probe.Held, probe.Msg)
	if !stop.Lost {
		t.Errorf("old leader's task ended with cause %q, want lock.ErrLeaseLost", stop.Msg)
	}
	if probe.Held != 0 || !probe.NotHeld {
		t.Errorf("late renewal held %d locks, late release: %q; want 0 and lock.ErrNotHeld", probe.Held, probe.Msg)
	}
	for _, e := range c.Since(resumed) {
		// A write in flight when it stopped may be reported now; one it
		// decided to make after resuming must not exist.
		if e.Kind == cluster.EvWork && e.Instance == first.Instance && e.Checked.After(resumedAt) {
			t.Errorf("old leader acted after it resumed: %v", e)
		}
	}
	if next.Fence <= first.Fence {
		t.Errorf("new term's fence %d not above the old %d", next.Fence, first.Fence)
	}
	if before.KeeperID != next.Instance || after.KeeperID != next.Instance || after.Fence != before.Fence || after.Fence != next.Fence {
		t.Errorf("holder before resume %s/%d, after %s/%d; want %s/%d throughout",
			before.KeeperID, before.Fence, after.KeeperID, after.Fence, next.Instance, next.Fence)
	}
	for _, e := range c.Since(from) {
		if e.Kind == cluster.EvUnlead && e.Instance == next.Instance {
			t.Errorf("the new leader was disturbed: %v", e)
		}
	}
	// A paused process's term lasts through the pause (a lease is not a
	// fence); what must not overlap is when each holder acted.
	assertNoOverlap(t, "leader writes", cluster.WorkSpans(c.Events()))
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
	c.await(0, 2, 10*time.Second, "writes by the first leader", acceptedBy(first.Instance))

	from := c.Mark()
	silencedAt := wallNow()
	faults[first.Instance].Silence()
	stop := c.awaitOne(from, hang, "the silenced leader's stop", cluster.IsKindBy(cluster.EvUnlead, first.Instance))
	next := c.awaitLeader(from, hang)
	c.awaitOne(from, hang, "a write by the new leader", acceptedBy(next.Instance))
	before := c.holder()
	if silence := testTTL * 3 / 2; time.Since(silencedAt) < silence {
		sleep(silence - time.Since(silencedAt))
	}
	faults[first.Instance].Restore()
	restoredAt := wallNow()

	old := instances[first.Instance]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, renewErr := old.locker.Renew(ctx, first.Instance, leaderLock)
	released, relErr := old.locker.ReleaseLocks(ctx, first.Instance, leaderLock)
	sleep(testTTL) // the old leader campaigns again, as a follower
	after := c.holder()

	rd := lock.DefaultTimings(testTTL).RenewDeadline
	t.Logf("silenced %s for %v: its task ended %v after the silence began (cause %q; renew deadline %v), %v before %s started; late renewal held %d (err %v), late release: %v",
		first.Instance, restoredAt.Sub(silencedAt).Round(time.Millisecond), stop.T.Sub(silencedAt).Round(time.Millisecond), stop.Msg, rd,
		next.T.Sub(stop.T).Round(time.Millisecond), next.Instance, len(r.Held), renewErr, relErr)
	if !stop.Lost {
		t.Errorf("silenced leader's task ended with cause %q, want lock.ErrLeaseLost", stop.Msg)
	}
	if !stop.T.Before(next.T) {
		t.Errorf("silenced leader's task ended at %s, after %s started at %s", stop.T.Format(time.TimeOnly), next.Instance, next.T.Format(time.TimeOnly))
	}
	if renewErr != nil || len(r.Held) != 0 || relErr != nil || released != 0 {
		t.Errorf("late renewal: held %d, err %v; late release: %d released, %v; want 0, nil, 0, nil", len(r.Held), renewErr, released, relErr)
	}
	if before.KeeperID != next.Instance || after.KeeperID != next.Instance || after.Fence != before.Fence {
		t.Errorf("holder before restore %s/%d, after %s/%d; want %s/%d throughout",
			before.KeeperID, before.Fence, after.KeeperID, after.Fence, next.Instance, next.Fence)
	}
	for _, e := range c.Since(from) {
		if e.Kind == cluster.EvUnlead && e.Instance == next.Instance {
			t.Errorf("the new leader was disturbed: %v", e)
		}
	}
	c.checkExclusion()
}
