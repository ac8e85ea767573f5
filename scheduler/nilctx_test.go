package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
	"github.com/mongolock/mongolock/scheduler"
)

// TestNilContextAndCollection: the control functions and methods, and
// Stop, given a nil context or a nil jobs collection return an error
// wrapping lock.ErrInvalidArgument that names it, and do nothing, rather
// than panic.
func TestNilContextAndCollection(t *testing.T) {
	t.Parallel()
	// A client that never reaches a server: nothing here needs one.
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=100"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	db := client.Database("nilctx")
	session, err := lock.NewSession(locktest.New(locktest.WithClock(clockwork.NewFakeClock()), locktest.WithTTL(30*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	s, err := scheduler.New(db, session)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddJob("j", "@every 1h", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	}()
	var nilCtx context.Context
	var nilColl *mongo.Collection
	ctx, jobs, runs := t.Context(), db.Collection(scheduler.DefaultJobsCollection), db.Collection(scheduler.DefaultRunsCollection)
	p := scheduler.Pause{Note: "n"}
	ops := []struct {
		call, what string
		f          func() error
	}{
		{"PauseJob", "nil context", func() error { return scheduler.PauseJob(nilCtx, jobs, "j", p) }},
		{"PauseJob", "nil jobs collection", func() error { return scheduler.PauseJob(ctx, nilColl, "j", p) }},
		{"ResumeJob", "nil context", func() error { return scheduler.ResumeJob(nilCtx, jobs, "j") }},
		{"ResumeJob", "nil jobs collection", func() error { return scheduler.ResumeJob(ctx, nilColl, "j") }},
		{"TriggerJob", "nil context", func() error { _, err := scheduler.TriggerJob(nilCtx, jobs, "j"); return err }},
		{"TriggerJob", "nil jobs collection", func() error { _, err := scheduler.TriggerJob(ctx, nilColl, "j"); return err }},
		{"RemoveJob", "nil context", func() error { return scheduler.RemoveJob(nilCtx, jobs, "j") }},
		{"RemoveJob", "nil jobs collection", func() error { return scheduler.RemoveJob(ctx, nilColl, "j") }},
		{"Scheduler.Pause", "nil context", func() error { return s.Pause(nilCtx, "j", p) }},
		{"Scheduler.Resume", "nil context", func() error { return s.Resume(nilCtx, "j") }},
		{"Scheduler.Trigger", "nil context", func() error { _, err := s.Trigger(nilCtx, "j"); return err }},
		{"Scheduler.Remove", "nil context", func() error { return s.Remove(nilCtx, "j") }},
		// Reads and maintenance, of a Scheduler and of the collections.
		{"Scheduler.Jobs", "nil context", func() error { _, err := s.Jobs(nilCtx); return err }},
		{"Scheduler.History", "nil context", func() error { _, err := s.History(nilCtx, "j", 5); return err }},
		{"Scheduler.EnsureIndexes", "nil context", func() error { return s.EnsureIndexes(nilCtx) }},
		{"Scheduler.PurgeHistory", "nil context", func() error { _, err := s.PurgeHistory(nilCtx); return err }},
		{"LoadRecords", "nil context", func() error { _, _, err := scheduler.LoadRecords(nilCtx, jobs); return err }},
		{"LoadRecords", "nil jobs collection", func() error { _, _, err := scheduler.LoadRecords(ctx, nilColl); return err }},
		{"LoadRecordsPage", "nil context", func() error {
			_, err := scheduler.LoadRecordsPage(nilCtx, jobs, scheduler.RecordsQuery{Limit: 10})
			return err
		}},
		{"LoadRecordsPage", "nil jobs collection", func() error {
			_, err := scheduler.LoadRecordsPage(ctx, nilColl, scheduler.RecordsQuery{Limit: 10})
			return err
		}},
		{"LoadHistory", "nil context", func() error { _, _, err := scheduler.LoadHistory(nilCtx, runs, "j", 5); return err }},
		{"LoadHistory", "nil runs collection", func() error { _, _, err := scheduler.LoadHistory(ctx, nilColl, "j", 5); return err }},
		{"LoadHistoryPage", "nil context", func() error {
			_, err := scheduler.LoadHistoryPage(nilCtx, runs, scheduler.HistoryQuery{Job: "j", Limit: 10})
			return err
		}},
		{"LoadHistoryPage", "nil runs collection", func() error {
			_, err := scheduler.LoadHistoryPage(ctx, nilColl, scheduler.HistoryQuery{Job: "j", Limit: 10})
			return err
		}},
		{"EnsureIndexes", "nil context", func() error { return scheduler.EnsureIndexes(nilCtx, runs, time.Hour, nil) }},
		{"EnsureIndexes", "nil runs collection", func() error { return scheduler.EnsureIndexes(ctx, nilColl, time.Hour, nil) }},
		{"Scheduler.Stop", "nil context", func() error { return s.Stop(nilCtx) }},
	}
	for _, op := range ops {
		err := recovered(op.f)
		if !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), op.what) {
			t.Errorf("%s(%s): %v, want an error wrapping lock.ErrInvalidArgument naming the %s", op.call, op.what, err, op.what)
		}
	}
}

// recovered calls f and turns a panic into an error, so that a table of
// bad calls reports each one that panics instead of dying at the first.
func recovered(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panicked: %v", p)
		}
	}()
	return f()
}
