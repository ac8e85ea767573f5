package runner_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
	"github.com/mongolock/mongolock/runner"
)

// valueRunner returns a runner of keeper kid on lock "leader" of l,
// publishing value, with a session closed at cleanup.
func valueRunner(t *testing.T, l *lock.Locker, kid, value string) *runner.LeaderAwareRunner {
	t.Helper()
	s, err := lock.NewSession(l, lock.WithKeeperID(kid))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	r, err := runner.New(s, "leader", runner.WithValue([]byte(value)))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// within polls ok every 10ms until it holds, failing after d.
func within(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond) //nolint:forbidigo // a poll with a deadline
	}
}

// TestValuePublished: a leader publishes its value with its term
// (WithValue) before its task starts; Holder, a Watch and a follower's
// LeaderInfo return it with the fence; SetValue changes it while leading;
// the next leader's term carries its own value, never the last one's.
func TestValuePublished(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	l, err := lock.New(db, lock.WithTTL(dbTTL), lock.WithWatchPeriod(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	a := valueRunner(t, l, "A", "10.0.0.1:80")
	b := valueRunner(t, l, "B", "10.0.0.2:80")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	started := make(chan lock.Holder, 1)
	actx, stopA := context.WithCancel(ctx)
	aDone := make(chan error, 1)
	go func() {
		aDone <- a.Run(actx, func(ctx context.Context) error {
			h, err := l.Holder(ctx, "leader")
			if err != nil {
				return err
			}
			started <- h
			<-ctx.Done()
			return nil
		})
	}()
	var h lock.Holder
	select {
	case h = <-started:
	case <-ctx.Done():
		t.Fatal("A never led")
	}
	if h.KeeperID != "A" || string(h.Value) != "10.0.0.1:80" {
		t.Fatalf("when A's task started: holder %q value %q, want A's value", h.KeeperID, h.Value)
	}
	if got := a.LeaderInfo(); got.KeeperID != "A" || string(got.Value) != "10.0.0.1:80" || got.Fence != h.Fence {
		t.Fatalf("A's LeaderInfo %+v, want itself, its value, fence %d", got, h.Fence)
	}

	bctx, stopB := context.WithCancel(ctx)
	bDone := make(chan error, 1)
	bLed := make(chan lock.Holder, 1)
	go func() {
		bDone <- b.Run(bctx, func(ctx context.Context) error {
			h, err := l.Holder(ctx, "leader")
			if err != nil {
				return err
			}
			bLed <- h
			<-ctx.Done()
			return nil
		})
	}()
	within(t, 5*time.Second, "B's LeaderInfo names A", func() bool {
		got := b.LeaderInfo()
		return got.KeeperID == "A" && string(got.Value) == "10.0.0.1:80" && got.Fence == h.Fence
	})

	seq, err := l.Watch(ctx, "leader")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetValue(ctx, []byte("10.0.0.1:81")); err != nil {
		t.Fatal(err)
	}
	seen := false
	for w := range seq {
		if seen = string(w.Value) == "10.0.0.1:81" && w.KeeperID == "A"; seen {
			break
		}
	}
	if !seen {
		t.Fatalf("the watch never showed A's new value (%v)", ctx.Err())
	}
	if err := a.SetValue(ctx, make([]byte, lock.MaxValueSize+1)); !errors.Is(err, lock.ErrValueTooLarge) {
		t.Fatalf("SetValue too large: %v, want ErrValueTooLarge", err)
	}

	stopA() // A releases; B takes over with its own value
	if err := <-aDone; err != nil {
		t.Fatalf("A's Run: %v", err)
	}
	select {
	case h = <-bLed:
	case <-ctx.Done():
		t.Fatal("B never led")
	}
	if h.KeeperID != "B" || string(h.Value) != "10.0.0.2:80" {
		t.Fatalf("when B's task started: holder %q value %q, want B's value", h.KeeperID, h.Value)
	}
	if got := a.LeaderInfo(); got.KeeperID == "A" {
		t.Fatalf("A, stopped, still names itself: %+v", got)
	}
	stopB()
	if err := <-bDone; err != nil {
		t.Fatalf("B's Run: %v", err)
	}
}

// TestWithValueTooLarge: a value over lock.MaxValueSize is refused by
// New, naming the option.
func TestWithValueTooLarge(t *testing.T) {
	t.Parallel()
	s, err := lock.NewSession(locktest.New(locktest.WithClock(clockwork.NewFakeClock())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	r, err := runner.New(s, "x", runner.WithValue(make([]byte, lock.MaxValueSize+1)))
	if !errors.Is(err, runner.ErrInvalidOption) || !errors.Is(err, lock.ErrValueTooLarge) || r != nil {
		t.Fatalf("WithValue too large: %v, want ErrInvalidOption and ErrValueTooLarge", err)
	}
}

// TestWithValueNeedsValueStore: on a store that keeps no values, New
// refuses WithValue (else every term would be given up for the value it
// cannot write, and the runner would never lead).
func TestWithValueNeedsValueStore(t *testing.T) {
	t.Parallel()
	store := struct{ lock.Store }{locktest.New(locktest.WithClock(clockwork.NewFakeClock()))}
	s, err := lock.NewSession(store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	r, err := runner.New(s, "x", runner.WithValue([]byte("10.0.0.7:8080")))
	if !errors.Is(err, runner.ErrInvalidOption) || r != nil {
		t.Fatalf("WithValue on a store without values: %v, want ErrInvalidOption", err)
	}
	if _, err := runner.New(s, "x"); err != nil {
		t.Fatalf("without WithValue: %v", err)
	}
}
