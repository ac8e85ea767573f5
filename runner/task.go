package runner

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
)

// taskKey is the context key of a task's taskInfo.
type taskKey struct{}

// taskInfo is what a task's context carries: its term's fencing token and
// its heartbeat.
type taskInfo struct {
	fence uint64
	clock clockwork.Clock
	start time.Time
	beat  atomic.Int64 // time of the last Heartbeat, as clock.Since(start)
}

func (ti *taskInfo) lastBeat() time.Time {
	return ti.start.Add(time.Duration(ti.beat.Load()))
}

// Heartbeat tells the runner that the task whose context is ctx is making
// progress. With WithStallTimeout, a task that does not call it often enough
// is considered hung: its context is cancelled and the runner steps down.
// It is cheap (one atomic store) and does nothing on other contexts.
func Heartbeat(ctx context.Context) {
	if ti, ok := ctx.Value(taskKey{}).(*taskInfo); ok {
		ti.beat.Store(int64(ti.clock.Since(ti.start)))
	}
}

// FenceFrom returns the fencing token of the term a task's context belongs
// to. Pass it to the resource the task writes to, and have that resource
// reject tokens smaller than the largest it has seen: that is what keeps a
// paused former leader from doing harm. ok is false on other contexts.
func FenceFrom(ctx context.Context) (fence uint64, ok bool) {
	ti, ok := ctx.Value(taskKey{}).(*taskInfo)
	if !ok {
		return 0, false
	}
	return ti.fence, true
}
