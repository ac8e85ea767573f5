package locktest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
)

func newStore(t *testing.T, opts ...locktest.Option) (*locktest.Store, *clockwork.FakeClock) {
	t.Helper()
	clk := clockwork.NewFakeClock()
	return locktest.New(append([]locktest.Option{locktest.WithClock(clk), locktest.WithTTL(30 * time.Second)}, opts...)...), clk
}

func grant(t *testing.T, s *locktest.Store, keeper, id string) lock.Grant {
	t.Helper()
	a, err := s.AcquireLocks(context.Background(), keeper, id)
	if err != nil || len(a.Granted) != 1 {
		t.Fatalf("%s acquiring %q: %+v, %v", keeper, id, a, err)
	}
	return a.Granted[0]
}

func TestDeadlineAndExpiry(t *testing.T) {
	t.Parallel()
	s, clk := newStore(t)
	g := grant(t, s, "A", "x")
	if want := g.Sent.Add(30*time.Second - time.Millisecond - 30*time.Millisecond); !g.Deadline.Equal(want) {
		t.Errorf("deadline %v after sending, want the TTL less the Locker's safety", g.Deadline.Sub(g.Sent))
	}
	clk.Advance(30*time.Second - time.Nanosecond)
	if s.HeldBy("x") != "A" {
		t.Fatal("lease ended before its TTL")
	}
	clk.Advance(time.Nanosecond)
	if s.HeldBy("x") != "" {
		t.Fatal("lease still live at its TTL")
	}
	s2, _ := newStore(t, locktest.WithSafety(0))
	if g := grant(t, s2, "A", "x"); !g.Deadline.Equal(g.Sent.Add(30 * time.Second)) {
		t.Errorf("WithSafety(0): deadline %v after sending", g.Deadline.Sub(g.Sent))
	}
}

func TestFail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t)
	g := grant(t, s, "A", "x")
	boom := errors.New("boom")
	s.Fail(locktest.OpRenew, 2, boom)
	for range 2 {
		if _, err := s.Renew(ctx, "A", "x"); !errors.Is(err, boom) {
			t.Fatalf("renewal with the switch on: %v", err)
		}
	}
	if r, err := s.Renew(ctx, "A", "x"); err != nil || len(r.Held) != 1 {
		t.Fatalf("third renewal: %+v, %v", r, err)
	}
	s.Fail(locktest.OpAcquire, locktest.Always, nil)
	for range 3 {
		if _, err := s.AcquireLocks(ctx, "B", "y"); !errors.Is(err, locktest.ErrInjected) {
			t.Fatalf("acquisition with the switch on: %v", err)
		}
	}
	if s.HeldBy("y") != "" {
		t.Fatal("a failed acquisition took the lock")
	}
	s.Restore()
	grant(t, s, "B", "y")

	// FailAfter: the release happens, its reply is lost.
	s.FailAfter(locktest.OpRelease, 1, nil)
	if _, err := s.ReleaseTerms(ctx, "A", lock.Term{LockID: "x", Fence: g.Fence}); !errors.Is(err, locktest.ErrInjected) {
		t.Fatalf("release: %v", err)
	}
	if s.HeldBy("x") != "" {
		t.Fatal("FailAfter: the release did not take effect")
	}
	calls := s.Calls(locktest.OpRelease)
	if len(calls) != 1 || calls[0].Released != 1 || !errors.Is(calls[0].Err, locktest.ErrInjected) {
		t.Fatalf("release calls %+v", calls)
	}
}

func TestDelayAndPause(t *testing.T) {
	t.Parallel()
	s, clk := newStore(t)
	s.Delay(locktest.OpAcquire, time.Second)
	done := make(chan lock.Grant, 1)
	go func() {
		a, _ := s.AcquireLocks(context.Background(), "A", "x")
		done <- a.Granted[0]
	}()
	if err := clk.BlockUntilContext(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	start := clk.Now()
	clk.Advance(time.Second)
	if g := <-done; !g.Sent.Equal(start) || !g.AcquiredAt.Equal(start.Add(time.Second)) {
		t.Errorf("delayed grant sent %v, acquired %v after the call began; want 0, 1s", g.Sent.Sub(start), g.AcquiredAt.Sub(start))
	}

	s.Pause(locktest.OpRenew)
	if h, err := s.Holder(context.Background(), "x"); err != nil || h.KeeperID != "A" {
		t.Fatalf("holder while renewals are paused: %+v, %v", h, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := s.Renew(ctx, "A", "x"); errc <- err }()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("paused renewal whose context ended: %v", err)
	}
	sent := make(chan struct{}, 1)
	s.BeforeCall(func(context.Context, locktest.Call) error { sent <- struct{}{}; return nil })
	held := make(chan int, 1)
	go func() { r, _ := s.Renew(context.Background(), "A", "x"); held <- len(r.Held) }()
	<-sent // it waits after its hook, until resumed
	select {
	case <-held:
		t.Fatal("renewal returned while paused")
	default:
	}
	s.Resume()
	if n := <-held; n != 1 {
		t.Fatal("resumed renewal did not renew")
	}
}

func TestLevers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t)
	g := grant(t, s, "A", "x")
	if !s.Expire("x") || s.Expire("x") {
		t.Fatal("Expire of a live lease, then of an expired one")
	}
	if h, err := s.Holder(ctx, "x"); !errors.Is(err, lock.ErrNotHeld) || !h.Expired || h.KeeperID != "A" {
		t.Fatalf("holder of an expired lease: %+v, %v", h, err)
	}
	if r, _ := s.Renew(ctx, "A", "x"); len(r.Lost) != 1 {
		t.Fatalf("renewal of an expired lease: %+v", r)
	}
	if o := s.TakeOver("x", "B"); o.Fence <= g.Fence || s.HeldBy("x") != "B" {
		t.Fatalf("TakeOver: %+v, held by %q", o, s.HeldBy("x"))
	}
	if !s.ForceRelease("x") || s.ForceRelease("x") || s.HeldBy("x") != "" {
		t.Fatal("ForceRelease of a held lock, then of a released one")
	}

	var before, after []locktest.Op
	s.BeforeCall(func(_ context.Context, c locktest.Call) error {
		before = append(before, c.Op)
		if c.KeeperID == "refused" {
			return errors.New("refused by the hook")
		}
		return nil
	})
	s.AfterCall(func(c locktest.Call) { after = append(after, c.Op) })
	if _, err := s.AcquireLocks(ctx, "refused", "y"); err == nil || s.HeldBy("y") != "" {
		t.Fatalf("acquisition failed by the hook: %v, held by %q", err, s.HeldBy("y"))
	}
	grant(t, s, "C", "y")
	if len(before) != 2 || len(after) != 2 {
		t.Fatalf("hooks saw %v before and %v after", before, after)
	}
}

func TestWithoutCallLog(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, locktest.WithoutCallLog())
	grant(t, s, "A", "x")
	if n := len(s.Calls()); n != 0 {
		t.Fatalf("%d calls logged", n)
	}
}

func TestNewPanicsOnBadOption(t *testing.T) {
	t.Parallel()
	for name, opt := range map[string]locktest.Option{
		"zero TTL":        locktest.WithTTL(0),
		"nil clock":       locktest.WithClock(nil),
		"safety ≥ TTL":    locktest.WithSafety(lock.DefaultTTL),
		"negative safety": locktest.WithSafety(-1),
		"nil option":      nil,
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: New did not panic", name)
				}
			}()
			locktest.New(opt)
		}()
	}
}
