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
	ctx, jobs := t.Context(), db.Collection(scheduler.DefaultJobsCollection)
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
