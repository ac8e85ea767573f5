package scheduler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/simdb"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/scheduler"
)

// TestSchedulerUpsertsNotIDOnly runs a Scheduler (jobs that succeed and
// fail, a trigger, a stop) and checks, on the command monitor, that no
// upsert it or its Session sends has a filter of its _id alone: FerretDB
// 2.x runs such an upsert as an insert that replaces the document a racer
// inserted meanwhile (docs/deployments.md). On the simulated server, in a
// synctest bubble.
func TestSchedulerUpsertsNotIDOnly(t *testing.T) {
	simTest(t, func(t *testing.T, srv *simdb.Server) {
		ups := mongotest.NewUpserts()
		client, err := srv.NewLink("A", nil).Connect(options.Client().SetMonitor(ups.Monitor()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
		db := client.Database("app")
		locker, err := lock.New(db, lock.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		session, err := lock.NewSession(locker, lock.WithKeeperID("A"))
		if err != nil {
			t.Fatal(err)
		}
		s, err := scheduler.New(db, session, scheduler.WithOpTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ran := make(chan struct{}, 100)
		if err := s.AddJob("ok", "@every 1s", func(context.Context) error { ran <- struct{}{}; return nil }); err != nil {
			t.Fatal(err)
		}
		if err := s.AddJob("fails", "@every 1s", func(context.Context) error { return errors.New("boom") }); err != nil {
			t.Fatal(err)
		}
		ctx := testCtx(t, 30*time.Second)
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if i == 1 {
				if _, err := s.Trigger(ctx, "ok"); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-ran:
			case <-ctx.Done():
				t.Fatal("the job did not run")
			}
		}
		if err := s.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := session.Close(); err != nil {
			t.Fatal(err)
		}
		for _, coll := range []string{scheduler.DefaultJobsCollection, scheduler.DefaultRunsCollection, lock.DefaultCollection} {
			if ups.Count(coll) == 0 {
				t.Errorf("no upsert into %q seen: the test no longer covers it", coll)
			}
		}
		for _, u := range ups.IDOnly() {
			t.Errorf("%s: its filter is the _id alone", u)
		}
	})
}
