package health_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/health"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/runner"
)

// TestForSession: one call observes the Session's events on its clock and
// checks what is built on it, after the call too, each once.
func TestForSession(t *testing.T) {
	t.Parallel()
	clk := clockwork.NewFakeClockAt(t0)
	s, err := lock.NewSession(locktest.New(locktest.WithClock(clk), locktest.WithTTL(30*time.Second)), lock.WithKeeperID("k1"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := health.ForSession(s, health.WithSchedulerLagLimit(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, clk: clk, c: c}
	ctx := context.Background()

	// Built after ForSession: a runner, a scheduler, a migrator.
	r, err := runner.New(s, "billing")
	if err != nil {
		t.Fatal(err)
	}
	f.want(c.LeaderHandler(), false, health.CheckLeader, `keeper k1 does not lead "billing": leader unknown`)
	sched := &fakeScheduler{}
	s.AddComponent(sched)
	sched.lag.Store(int64(2 * time.Second))
	f.wantLive(false, health.CheckScheduler, "is 2s behind its earliest due firing, more than the limit of 1s")
	sched.lag.Store(0)
	mig := &fakeMigrator{}
	mig.set([]migrations.Entry{entry(1, "one", migrations.StatePending)}, nil)
	s.AddComponent(mig)
	f.want(c.ReadyHandler(), false, health.CheckMigrations, "1 of 1 migrations not applied: 1 one (pending)")
	mig.set([]migrations.Entry{entry(1, "one", migrations.StateApplied)}, nil)
	if rep := c.Ready(ctx); !rep.OK || !rep.At.Equal(t0) {
		t.Errorf("ready %+v, want OK at the Session's clock's %v", rep, t0)
	}

	// Watched twice (by hand too): checked once.
	c.WatchRunner(r)
	c.WatchScheduler(sched)
	c.WatchMigrations(mig)
	if err := c.WatchSession(s); err != nil {
		t.Fatal(err)
	}
	rep := c.Leader(ctx)
	if got := strings.Count(rep.Checks[health.CheckLeader].Reason, `"billing"`); got != 1 {
		t.Errorf("the runner is checked %d times: %s", got, rep.Checks[health.CheckLeader].Reason)
	}
	if got := strings.Count(c.Live(ctx).Checks[health.CheckScheduler].Reason, "keeper k1"); got != 1 {
		t.Errorf("the scheduler is checked %d times", got)
	}
	if got := c.Ready(ctx).Checks[health.CheckMigrations].Reason; got != "1 migrations applied" {
		t.Errorf("migrations: %q", got)
	}

	// The Session's events reach the Checker, once.
	s.Emit(lock.Event{Kind: lock.TaskAbandoned, LockID: "x", Fence: 1, Err: lock.ErrTaskDidNotStop})
	f.wantLive(false, health.CheckAbandoned, `task under "x" (keeper k1, fence 1) ignored its cancelled context`)
}

func TestForSessionBadInput(t *testing.T) {
	t.Parallel()
	if c, err := health.ForSession(nil); c != nil || !errors.Is(err, health.ErrInvalidArgument) {
		t.Errorf("ForSession(nil) = %v, %v", c, err)
	}
	s, err := lock.NewSession(locktest.New(locktest.WithClock(clockwork.NewFakeClock()), locktest.WithTTL(30*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := health.ForSession(s, health.WithCheckTimeout(0)); !errors.Is(err, health.ErrInvalidOption) {
		t.Errorf("bad option: %v", err)
	}
	c, err := health.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WatchSession(nil); !errors.Is(err, health.ErrInvalidArgument) {
		t.Errorf("WatchSession(nil) = %v", err)
	}
	c.WatchRunner(nil) // ignored, not a panic at the next probe
	c.WatchScheduler(nil)
	c.WatchMigrations(nil)
	if rep := c.Leader(context.Background()); rep.Checks[health.CheckLeader].Reason != "no runner watched" {
		t.Errorf("leader: %+v", rep)
	}
	_ = c.Live(context.Background())
	_ = c.Ready(context.Background())
}
