package runner_test

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
	"github.com/mongolock/mongolock/runner"
)

// TestNilContextAndCollection: every exported entry point of the package
// that takes a context or a collection returns an error wrapping
// lock.ErrInvalidArgument naming the nil argument, and does nothing,
// rather than panic; Heartbeat and FenceFrom do nothing on a nil context,
// as on any context that is not a task's.
func TestNilContextAndCollection(t *testing.T) {
	t.Parallel()
	s, err := lock.NewSession(locktest.New(locktest.WithClock(clockwork.NewFakeClock()), locktest.WithTTL(30*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := runner.New(s, "l")
	if err != nil {
		t.Fatal(err)
	}
	// A client that never connects: nothing is sent.
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	tl, err := runner.NewTermLog(client.Database("nilctx"))
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close(context.Background())
	var nilCtx context.Context
	var nilColl *mongo.Collection
	ctx := t.Context()
	ran := false
	task := func(context.Context) error { ran = true; return nil }
	ops := []struct {
		call, what string
		f          func() error
	}{
		{"Run", "nil context", func() error { return r.Run(nilCtx, task) }},
		{"RunTaskOnLeader", "nil context", func() error { _, err := r.RunTaskOnLeader(nilCtx, task); return err }},
		{"Resign", "nil context", func() error { return r.Resign(nilCtx) }},
		{"LoadTerms", "nil context", func() error { _, _, err := runner.LoadTerms(nilCtx, &mongo.Collection{}, "", 10); return err }},
		{"LoadTerms", "nil collection", func() error { _, _, err := runner.LoadTerms(ctx, nilColl, "", 10); return err }},
		{"EnsureTermIndexes", "nil context", func() error {
			return runner.EnsureTermIndexes(nilCtx, &mongo.Collection{}, time.Hour, nil)
		}},
		{"TermLog.Close", "nil context", func() error { return tl.Close(nilCtx) }},
		{"EnsureTermIndexes", "nil collection", func() error { return runner.EnsureTermIndexes(ctx, nilColl, time.Hour, nil) }},
	}
	for _, op := range ops {
		err := recovered(op.f)
		if !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), op.what) {
			t.Errorf("%s(%s): %v, want an error wrapping lock.ErrInvalidArgument naming the %s", op.call, op.what, err, op.what)
		}
	}
	if ran || r.IsLeader() {
		t.Errorf("a call with a nil context ran the task (%v) or led (%v)", ran, r.IsLeader())
	}
	if err := recovered(func() error { runner.Heartbeat(nilCtx); return nil }); err != nil {
		t.Errorf("Heartbeat(nil): %v", err)
	}
	if err := recovered(func() error {
		if f, ok := runner.FenceFrom(nilCtx); ok || f != 0 {
			return fmt.Errorf("fence %d, ok %v", f, ok)
		}
		return nil
	}); err != nil {
		t.Errorf("FenceFrom(nil): %v", err)
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
