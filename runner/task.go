package runner

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/lock"
)

// taskKey is the context key of a task's taskInfo.
type taskKey struct{}

// taskInfo is what a task's context carries besides its lease: its
// heartbeat.
type taskInfo struct {
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
	if ctx == nil {
		return
	}
	if ti, ok := ctx.Value(taskKey{}).(*taskInfo); ok {
		ti.beat.Store(int64(ti.clock.Since(ti.start)))
	}
}

// FenceFrom returns the fencing token of the term a task's context belongs
// to (lock.FenceFrom: a task's context is bound to its term's lease). Pass
// it to the resource the task writes to, and have that resource reject
// tokens smaller than the largest it has seen: that is what keeps a paused
// former leader from doing harm. ok is false on contexts bound to no lease.
func FenceFrom(ctx context.Context) (fence uint64, ok bool) {
	if ctx == nil {
		return 0, false
	}
	return lock.FenceFrom(ctx)
}
