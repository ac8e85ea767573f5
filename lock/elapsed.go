package lock

import (
	"reflect"
	"time"

	"github.com/jonboulle/clockwork"
)

// A lease's trust is measured on the monotonic clock, which a clock step
// does not move. But the monotonic clock Go reads (CLOCK_MONOTONIC on
// Linux) stops while the host is suspended, and a hypervisor pausing a VM
// often stops it too, while the lease runs out on the server all the same;
// the wall clock, put right on resume, shows that time. So every "how long
// is left" takes the smaller of the two clocks' answers, and every "how
// much time has passed" the larger, when it must not be underestimated:
// a suspend ends the leases it outlasted, and a wall clock stepped forward
// ends leases early (never late). A clock without monotonic readings (a
// fake clock, a testing/synctest bubble) gives the same answer on both.
//
// A wall clock stepped back during a suspend hides the suspend from that
// check, and a step forward is bounded only by the safety margin. So where
// there is one, a third clock is read too: the boot clock (CLOCK_BOOTTIME
// on Linux), which counts the time suspended and which steps do not move.
// Each lease's deadline is kept on it as well, and the smallest answer
// counts.

// BootClock is a clock that can also read the boot clock: the time since
// an arbitrary origin, counting the time the host was suspended, not
// moved by clock steps. A Session on such a clock (its store's) reads it;
// on the real clock (clockwork.NewRealClock, the default; not in a
// testing/synctest bubble) it reads the host's boot clock where there is
// one (Linux); on other clocks, wrappers of the real one included, none.
type BootClock interface {
	clockwork.Clock
	SinceBoot() time.Duration
}

// bootReading is a reading of the boot clock; ok is false where there is
// none.
type bootReading struct {
	at time.Duration
	ok bool
}

var realClockType = reflect.TypeOf(clockwork.NewRealClock())

// bootClockOf returns how a Session on clk reads the boot clock, or nil.
func bootClockOf(clk clockwork.Clock) func() bootReading {
	if b, ok := clk.(BootClock); ok {
		return func() bootReading { return bootReading{b.SinceBoot(), true} }
	}
	if t := clk.Now(); reflect.TypeOf(clk) != realClockType || t == t.Round(0) {
		// A fake clock, or the real one in a testing/synctest bubble
		// (its readings have no monotonic clock): the host's boot clock
		// does not tell their time.
		return nil
	}
	if _, ok := sysBoot(); !ok {
		return nil
	}
	return func() bootReading {
		at, ok := sysBoot()
		return bootReading{at, ok}
	}
}

// bootNow reads the Session's boot clock.
func (s *Session) bootNow() bootReading {
	if s.boot == nil {
		return bootReading{}
	}
	return s.boot()
}

// bootDeadline returns deadline, an instant on the Session's clock set
// from a command sent at from, on the boot clock read at or before from.
func bootDeadline(deadline, from time.Time, sent bootReading) bootReading {
	if !sent.ok {
		return sent
	}
	return bootReading{sent.at + deadline.Sub(from), true}
}

// leftOf returns how long until deadline at now, by whichever clock says
// less, the boot clock included (boot: deadline on it).
func (s *Session) leftOf(deadline time.Time, boot bootReading, now time.Time) time.Duration {
	d := left(deadline, now)
	if boot.ok {
		if b := s.bootNow(); b.ok {
			d = min(d, boot.at-b.at)
		}
	}
	return d
}

// leaseLeft returns how long l is still trusted at now. Called with s.mu
// held.
func (s *Session) leaseLeft(l *Lease, now time.Time) time.Duration {
	return s.leftOf(l.trustUntil, l.bootUntil, now)
}

// left returns how long until deadline at now, by whichever clock says
// less.
func left(deadline, now time.Time) time.Duration {
	return min(deadline.Sub(now), deadline.Round(0).Sub(now.Round(0)))
}

// elapsedMax returns the time from then to now by whichever clock says
// more.
func elapsedMax(then, now time.Time) time.Duration {
	return max(now.Sub(then), now.Round(0).Sub(then.Round(0)))
}

// elapsedMin returns a lower bound of the time from then to now: the
// monotonic clock's count, which no step moves and which never counts more
// than passed (a suspend it undercounts); the wall clock's for readings
// without a monotonic clock, as Sub does. Not the smaller of the two: a
// wall clock stepped back by d would put the bound d low, and with it the
// server's clock as a Locker estimates it, until its next reading
// (a scheduler fired nothing meanwhile, TestServerClockLowerBoundIgnoresWallStepBack).
func elapsedMin(then, now time.Time) time.Duration {
	return now.Sub(then)
}
