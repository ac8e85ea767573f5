package runner

import (
	"context"
	"time"

	"github.com/jonboulle/clockwork"
)

// alarm fires once, at an instant of a clock. The runner schedules by
// instants (renew at lastSent+RenewInterval, stop trusting at trustUntil),
// so that time spent elsewhere never shifts a deadline. clockwork's
// WithDeadline registers the instant with a fake clock atomically, where
// NewTimer(Until(t)) could miss an Advance in between.
type alarm struct {
	done   <-chan struct{}
	cancel context.CancelFunc
}

func newAlarm(clk clockwork.Clock, at time.Time) *alarm {
	ctx, cancel := clockwork.WithDeadline(context.Background(), clk, at)
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
