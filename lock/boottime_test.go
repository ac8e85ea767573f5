package lock_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/mongolock/mongolock/internal/simclock"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
)

// TestSuspendHiddenByStepBack: a suspend that outlasts a lease ends it,
// even when the wall clock was stepped back across it by about as much, so
// that neither the monotonic clock (stopped) nor the wall clock (put back)
// shows the time that passed: the boot clock does. (Found by the
// simulation, seed 76: a step back of 760ms, then a suspend of 1.055s.)
func TestSuspendHiddenByStepBack(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		clk := simclock.New(0)
		store := locktest.New(locktest.WithTTL(10*time.Second), locktest.WithClock(clk))
		s, err := lock.NewSession(store, lock.WithKeeperID("me"))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		m, _ := s.Mutex("critical")
		lease, err := m.Lock(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if left := lease.Remaining(); left <= 0 || left > 10*time.Second {
			t.Fatalf("remaining %v after the acquisition", left)
		}
		clk.Suspend()
		time.Sleep(15 * time.Second) // past the TTL: someone else may hold it now
		clk.Step(-15 * time.Second)
		clk.Thaw()
		if err := lease.Err(); !errors.Is(err, lock.ErrLeaseLost) {
			t.Fatalf("after a suspend past the TTL hidden by a step back: Err() = %v, want ErrLeaseLost", err)
		}
		if left := lease.Remaining(); left != 0 {
			t.Fatalf("remaining %v, want 0", left)
		}
		if d := lease.Deadline(); d.After(clk.Now()) {
			t.Fatalf("deadline %v, after now (%v)", d, clk.Now())
		}
	})
}
