package lock

import (
	"context"
	"time"

	"github.com/jonboulle/clockwork"
)

// backoffJitter: each pause is drawn uniformly from [1-backoffJitter, 1]
// times its nominal length, so waiters do not move in step and none waits
// longer than Max.
const backoffJitter = 0.2

// Backoff is the one retry policy of this module: pauses that start at
// First, double with every attempt up to Max, and are each shortened by a
// part of up to a fifth drawn from the time the pause begins.
type Backoff struct {
	First, Max time.Duration
}

// Pause returns the pause after the given attempt (counted from 1) that
// begins at now. Its jitter is drawn from now and attempt (a hash of the
// nanoseconds): pauses that begin at different times differ, waiters on
// different clocks do not move in step, and the injected clock is the only
// source of it, so that a simulation replays it.
func (b Backoff) Pause(now time.Time, attempt int) time.Duration {
	p := max(b.First, time.Nanosecond)
	for i := 1; i < attempt && p < b.Max; i++ {
		p *= 2
	}
	p = min(p, b.Max)
	return time.Duration(float64(p) * (1 - jitter(now, attempt)*backoffJitter))
}

// jitter is a number in [0, 1) drawn from now and attempt.
func jitter(now time.Time, attempt int) float64 {
	// splitmix64's finalizer: every bit of the input moves the output.
	x := uint64(now.UnixNano()) ^ uint64(attempt)*0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

// Wait pauses after the given attempt on clk, or until ctx ends (then it
// returns ctx's error).
func (b Backoff) Wait(ctx context.Context, clk clockwork.Clock, attempt int) error {
	return Sleep(ctx, clk, b.Pause(clk.Now(), attempt))
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
// Advance fires, its cause context.DeadlineExceeded (read it with
// context.Cause). It also carries a deadline d from now on the real
// clock, which the driver sends with each command as maxTimeMS: a command
// that waits on the server (in its queue, for a lock) longer than its
// caller waits for it is refused there rather than applied after the
// caller gave up, which for an acquisition would begin a term nobody knows
// of (a network that holds a command back is not covered: it is not
// counted by maxTimeMS). Its Err is context.Canceled or, if the real
// deadline came first, context.DeadlineExceeded.
func WithTimeout(parent context.Context, clk clockwork.Clock, d time.Duration) (context.Context, context.CancelFunc) {
	//nolint:forbidigo // the driver computes maxTimeMS from the real clock
	dctx, dcancel := context.WithDeadline(parent, time.Now().Add(d))
	ctx, cancel := context.WithCancelCause(dctx)
	t := clk.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })
	return ctx, func() {
		t.Stop()
		cancel(context.Canceled)
		dcancel()
	}
}
