package runner

import (
	"context"
	"time"

	"github.com/jonboulle/clockwork"
)

// alarm fires once, at an instant of a clock. The runner schedules by
// instants (renew at lastSent+RenewInterval, stop trusting at trustUntil),
// so that time spent elsewhere never shifts a deadline.
type alarm struct {
	done   <-chan struct{}
	cancel context.CancelFunc
}

// newAlarm fires when clk reads at. With a fake clock, clockwork's
// WithDeadline registers the instant atomically, where a timer of
// Until(at) could miss an Advance in between. Any other clock is asked how
// long until at: WithDeadline would compare at with the system clock, so a
// clock that reads other than the system's (a skewed one, say) would fire
// early or late by the difference.
func newAlarm(clk clockwork.Clock, at time.Time) *alarm {
	var ctx context.Context
	var cancel context.CancelFunc
	if fc, ok := clk.(*clockwork.FakeClock); ok {
		ctx, cancel = clockwork.WithDeadline(context.Background(), fc, at)
	} else {
		ctx, cancel = clockwork.WithTimeout(context.Background(), clk, clk.Until(at))
	}
	return &alarm{done: ctx.Done(), cancel: cancel}
}

// C is closed when the alarm fires; nil for a nil alarm, so a select on it
// blocks.
func (a *alarm) C() <-chan struct{} {
	if a == nil {
		return nil
	}
	return a.done
}

// stop releases the alarm's resources. A nil alarm is fine.
func (a *alarm) stop() {
	if a != nil {
		a.cancel()
	}
}
