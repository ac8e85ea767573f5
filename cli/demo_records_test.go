package cli

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/internal/cluster"
	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/scheduler"
)

// TestWatchStarts: the demo reads the runs that a dead instance's job
// documents still record as started by it, and reports each once; none of
// another keeper.
func TestWatchStarts(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	locker, err := lock.New(db)
	if err != nil {
		t.Fatal(err)
	}
	session, err := lock.NewSession(locker, lock.WithKeeperID("app1/k"))
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	s, err := scheduler.New(db, session)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan time.Time, 1)
	release := make(chan struct{})
	err = s.AddJob("tick", "@every 1s", func(ctx context.Context) error {
		run, _ := scheduler.RunFromContext(ctx)
		select {
		case started <- run.Scheduled:
		default:
		}
		select { // running, as a killed instance's run stays recorded
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Error(err)
		}
	}()
	defer close(release)
	var f time.Time
	select {
	case f = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not start")
	}

	a := testApp()
	a.g.ttl, a.g.timeout = 1200*time.Millisecond, 10*time.Second
	clock := clockwork.NewRealClock()
	d := &demo{a: a, clock: clock, c: cluster.New(clock), db: db}
	d.watchStarts("app1", "app1/k")
	d.watchStarts("app2", "app2/k")
	d.watchers.Wait()
	got := cluster.Filter(d.c.Events(), cluster.IsKind(cluster.EvStartSeen))
	if len(got) != 1 || got[0].Instance != "app1" || got[0].Job != "tick" || !got[0].Firing.Equal(f) || got[0].Keeper != "app1/k" {
		t.Errorf("start records seen %v; want app1's of tick %v once", got, f)
	}
}
