package simclock

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestWithMonotonic(t *testing.T) {
	now := time.Now()
	a := withMonotonic(now, 1000)
	b := withMonotonic(now.Add(time.Hour), 1000+int64(time.Second))
	if got := b.Sub(a); got != time.Second {
		t.Errorf("monotonic Sub = %v, want 1s", got)
	}
	if got := b.Round(0).Sub(a.Round(0)); got != time.Hour {
		t.Errorf("wall Sub = %v, want 1h", got)
	}
	if !a.Round(0).Equal(now.Round(0)) {
		t.Errorf("wall %v, want %v", a.Round(0), now.Round(0))
	}
	if got := a.Add(time.Minute).Sub(a); got != time.Minute {
		t.Errorf("Add keeps the monotonic reading: %v", got)
	}
}

func TestClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New(10 * time.Minute)
		start := c.Now()
		if d := start.Round(0).Sub(time.Now()); d != 10*time.Minute {
			t.Fatalf("offset %v", d)
		}
		fired := c.After(time.Second)
		c.Step(time.Hour) // the wall clock only
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case <-fired:
			t.Fatal("timer fired on the instant: want it late, as an OS's")
		default:
		}
		time.Sleep(late)
		synctest.Wait()
		select {
		case <-fired:
		default:
			t.Fatal("timer did not fire after a second of monotonic time")
		}
		if got := c.Since(start); got != time.Second+late {
			t.Errorf("Since = %v after a wall step, want 1s and a nanosecond", got)
		}

		// Frozen: timers wait for the thaw.
		fired = c.After(time.Second)
		c.Freeze()
		time.Sleep(5 * time.Second)
		select {
		case <-fired:
			t.Fatal("fired while frozen")
		default:
		}
		c.Thaw()
		synctest.Wait()
		select {
		case <-fired:
		default:
			t.Fatal("not fired at the thaw")
		}

		// Suspended: the monotonic clock stops, the wall clock does not.
		before := c.Now()
		fired = c.After(time.Second)
		time.Sleep(500 * time.Millisecond)
		c.Suspend()
		time.Sleep(time.Hour)
		c.Thaw()
		after := c.Now()
		if got := after.Sub(before); got != 500*time.Millisecond {
			t.Errorf("monotonic elapsed over a suspend = %v, want 500ms", got)
		}
		if got := after.Round(0).Sub(before.Round(0)); got != time.Hour+500*time.Millisecond {
			t.Errorf("wall elapsed over a suspend = %v", got)
		}
		synctest.Wait()
		select {
		case <-fired:
			t.Fatal("fired before a second of monotonic time")
		default:
		}
		time.Sleep(500*time.Millisecond + late)
		synctest.Wait()
		select {
		case <-fired:
		default:
			t.Fatal("not fired after a second of monotonic time")
		}

		tk := c.NewTicker(time.Second)
		for range 3 {
			<-tk.Chan()
		}
		tk.Stop()
		done := make(chan struct{})
		tm := c.AfterFunc(time.Second, func() { close(done) })
		<-done
		if tm.Stop() {
			t.Error("Stop after firing reported active")
		}
	})
}
