package lock

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/jonboulle/clockwork"
)

// backoffJitter: each pause is drawn uniformly from [1-backoffJitter, 1]
// times its nominal length, so waiters do not move in step and none waits
// longer than Max.
const backoffJitter = 0.2

// Backoff is the one retry policy of this module: pauses that start at
// First, double with every attempt up to Max, and are each shortened by a
// random part of up to a fifth.
type Backoff struct {
	First, Max time.Duration
}

// Pause returns the pause after the given attempt (counted from 1).
func (b Backoff) Pause(attempt int) time.Duration {
	p := max(b.First, time.Nanosecond)
	for i := 1; i < attempt && p < b.Max; i++ {
		p *= 2
	}
	p = min(p, b.Max)
	return time.Duration(float64(p) * (1 - rand.Float64()*backoffJitter))
}

// Wait pauses after the given attempt on clk, or until ctx ends (then it
// returns ctx's error).
func (b Backoff) Wait(ctx context.Context, clk clockwork.Clock, attempt int) error {
	return Sleep(ctx, clk, b.Pause(attempt))
}

// Sleep waits d on clk, or until ctx ends (then it returns ctx's error).
func Sleep(ctx context.Context, clk clockwork.Clock, d time.Duration) error {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WithTimeout returns a context derived from parent that is cancelled d
// from now on clk, and its cancel function: a timeout that a fake clock's
// Advance fires. Unlike context.WithTimeout's, its Err is then
// context.Canceled and its cause context.DeadlineExceeded (read it with
// context.Cause), and it has no Deadline for the driver to see.
func WithTimeout(parent context.Context, clk clockwork.Clock, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	t := clk.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })
	return ctx, func() {
		t.Stop()
		cancel(context.Canceled)
	}
}
