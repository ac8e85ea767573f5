package runner

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/internal/planted"
	"github.com/mongolock/mongolock/lock"
)

// campaign tries once to acquire the lock and, if it did, begins a term.
// On a failed campaign it learns who leads. The error is the acquisition's;
// (nil, nil) means another keeper leads, or the grant came too late to
// trust (the session released it again). r.lastCampaign is set to the
// sending of the acquisition, the origin of the next campaign's schedule.
//
// It does not campaign while an abandoned task still runs: the term would
// run a second copy of the task beside it.
func (r *LeaderAwareRunner) campaign(ctx context.Context) (*term, error) {
	if r.abandonedRunning() {
		return nil, fmt.Errorf("campaign for %q: not while an abandoned task still runs: %w",
			r.lockID, ErrTaskDidNotStop)
	}
	// A term left over (from RunTaskOnLeader, trusted or lost unreported)
	// ends before the next one begins, so that callbacks pair up; its
	// release frees the Mutex for the acquisition.
	r.mu.Lock()
	old := r.term
	r.mu.Unlock()
	if old != nil {
		if cause := old.lease.Err(); cause != nil {
			r.endTerm(old, cause, lostReason(cause))
		} else {
			r.endTerm(old, nil, "superseded by a new campaign")
		}
		_ = r.release(ctx)
	}
	if r.yield(ctx) {
		return nil, nil // a higher candidate waits: it campaigns first
	}
	// An acquisition slower than the renew deadline gives a lease that is
	// not trusted on arrival, so waiting longer is pointless.
	actx, cancel := lock.WithTimeout(ctx, r.clock, r.session.Timings().RenewDeadline)
	r.lastCampaign = r.clock.Now()
	lease, ok, err := r.mutex.AcquireLock(actx)
	cancel()
	switch {
	case errors.Is(err, lock.ErrNotTrusted):
		return nil, nil
	case err != nil:
		return nil, err
	case !ok:
		r.observe(ctx)
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		// Nobody wants the task any more: this term never starts.
		_ = r.release(ctx)
		return nil, fmt.Errorf("campaign for %q: %w", r.lockID, err)
	}
	value, err := r.publish(ctx, lease)
	if err != nil {
		// Followers could not reach a leader without its value.
		_ = r.release(ctx)
		return nil, err
	}

	// The candidacy stays while leading: withdrawing it here would put a
	// round trip, unbounded but by the release timeout, between the
	// grant and the task (sim seed 35: the lease was lost meanwhile).
	t := &term{lease: lease, started: r.clock.Now()}
	r.cand.lastCheck = t.started
	t.ctx, t.span = r.traceTerm(ctx, lease)
	me := r.KeeperID()
	r.mu.Lock()
	r.term = t
	prev := r.leader
	r.leader, r.leaderValue, r.leaderFence = me, value, lease.Fence()
	r.mu.Unlock()
	r.republish(ctx, lease, value)
	if prev != me {
		r.session.Emit(lock.Event{Kind: lock.LeaderSeen, LockID: r.lockID, Leader: me, Fence: lease.Fence()})
		if r.cfg.onNewLeader != nil {
			r.cfg.onNewLeader(me)
		}
	}
	// The gap is known when the previous term's end was read: its release,
	// or its last renewal before it expired. A lease read live and taken
	// before it could expire was released after the read, at an instant
	// this runner never saw: the gap is not known (the term log's End of
	// the previous term tells it).
	var gap time.Duration
	releasedUnseen := !r.prevExpires.IsZero() && lease.AcquiredAt().Before(r.prevExpires)
	if !r.prevEnd.IsZero() && r.prevFence < lease.Fence() && !releasedUnseen {
		gap = max(lease.AcquiredAt().Sub(r.prevEnd), 0)
	}
	r.prevEnd, r.prevExpires, r.prevFence = time.Time{}, time.Time{}, 0
	started := lock.Event{Kind: lock.TermStarted, LockID: r.lockID, Fence: lease.Fence(), Remaining: lease.Remaining(), Gap: gap}
	r.session.Emit(started)
	t.span.Event(started)
	if r.cfg.onStarted != nil {
		r.cfg.onStarted(lease.Fence())
	}
	return t, nil
}

// traceTerm begins the span of a term just acquired (lock.OpTerm). Under
// Run it is a child of Run's context, which the term's context carries on
// to the task; a term begun by RunTaskOnLeader outlives the call, so its
// span begins a trace of its own, linked to the call's. It returns ctx and
// a Span that does nothing when the session has no tracer.
func (r *LeaderAwareRunner) traceTerm(ctx context.Context, lease *lock.Lease) (context.Context, lock.Span) {
	if !r.session.Traced() {
		return r.session.Trace(ctx, lock.Op{}) // ctx, and a Span that does nothing
	}
	op := lock.Op{Kind: lock.OpTerm, LockIDs: []string{r.lockID}, Fence: lease.Fence()}
	if !r.underRun() {
		op.Links = []context.Context{ctx}
		ctx = context.Background()
	}
	return r.session.Trace(ctx, op)
}

// observe reads who holds the lock after a failed campaign, and reports
// whether another keeper leads.
func (r *LeaderAwareRunner) observe(ctx context.Context) bool {
	hctx, cancel := lock.WithTimeout(ctx, r.clock, r.session.Timings().RenewDeadline)
	h, err := r.session.Holder(hctx, r.lockID)
	cancel()
	if (err == nil || errors.Is(err, lock.ErrNotHeld)) && !h.RenewedAt.IsZero() {
		// The takeover comes after the previous term's last renewal or its
		// release, so a read after a refused campaign saw it, unless the
		// term ended between this read and the takeover.
		r.prevEnd, r.prevFence = h.RenewedAt, h.Fence
		r.prevExpires = time.Time{}
		if !h.Released && !h.Expired {
			r.prevExpires = h.ExpiresAt
		}
	}
	var id string
	switch {
	case err == nil && h.KeeperID != r.KeeperID(): // Holder reports expired leases as ErrNotHeld
		id = h.KeeperID
	case err == nil || errors.Is(err, lock.ErrNotHeld):
		// Free, expired, or held by another holder in this session: no
		// other keeper leads.
	default:
		return false // unknown; the next campaign asks again
	}
	r.mu.Lock()
	changed := id != r.leader
	r.leader, r.leaderValue, r.leaderFence = id, nil, 0
	if id != "" {
		r.leaderValue, r.leaderFence = h.Value, h.Fence
	}
	r.mu.Unlock()
	if changed && id != "" {
		r.session.Emit(lock.Event{Kind: lock.LeaderSeen, LockID: r.lockID, Leader: id, Fence: h.Fence})
		if r.cfg.onNewLeader != nil {
			r.cfg.onNewLeader(id)
		}
	}
	return id != ""
}

// leadResult is how a task run under a term ended.
type leadResult struct {
	taskErr  error // what the task returned
	returned bool  // false: the task was abandoned
	cause    error // why the term ended while the task ran; nil if it did not
	// stepDown is why the runner stepped down while the task ran, with the
	// lease still good (wraps ErrSteppedDown), and stepReason the
	// TermEnded reason: the caller ends the term and releases.
	stepDown   error
	stepReason string
	// panicked: the task panicked with panicValue (the term has ended);
	// the caller releases the lock and raises it again.
	panicked   bool
	panicValue any
}

// repanic raises again, in the caller's goroutine, the panic of a task
// whose term ended and whose lock was released.
func (res leadResult) repanic() {
	if res.panicked {
		panic(res.panicValue)
	}
}

// lead runs task under term t and returns when task returns or is
// abandoned. The session keeps the lease alive meanwhile. The term ends
// here when the lease is lost, the task stalls, or the task is abandoned;
// otherwise it outlives the task. The loop runs in the caller's goroutine,
// so state changes and callbacks stay there; only the task gets a goroutine.
func (r *LeaderAwareRunner) lead(ctx context.Context, t *term, task func(context.Context) error) (res leadResult) {
	if r.session.Traced() {
		if r.underRun() {
			ctx = t.ctx // Run's context with the term's span
		} else {
			var span lock.Span
			ctx, span = r.traceTask(ctx, t)
			defer func() { span.End(res.err()) }()
		}
	}
	clk := r.clock
	// Cancelled with the lease's cause when the lease ends, and carrying
	// the lease for lock.LeaseFrom and FenceFrom.
	leaseCtx, unbind := t.lease.Bind(ctx)
	defer unbind(nil)
	taskCtx, cancelTask := context.WithCancelCause(leaseCtx)
	defer cancelTask(nil)
	info := &taskInfo{clock: clk, start: clk.Now()}
	taskCtx = context.WithValue(taskCtx, taskKey{}, info)
	// done is closed when the task returns, even by runtime.Goexit or a
	// panic (recovered: lead's caller raises it again); it outlives lead if
	// the task is abandoned (a panic then is dropped, as Session.Do does).
	done := make(chan struct{})
	var taskErr error
	var panicked bool
	var panicValue any
	var stack []byte
	go func() {
		returned := false
		defer func() {
			if !returned {
				if p := recover(); p != nil {
					panicked, panicValue, stack = true, p, debug.Stack()
				}
			}
			close(done)
		}()
		taskErr = task(taskCtx)
		returned = true
	}()

	var stall, grace clockwork.Timer
	var stallC, graceC <-chan time.Time
	if r.cfg.stallTimeout > 0 {
		stall = clk.NewTimer(r.cfg.stallTimeout)
		stallC = stall.Chan()
	}
	defer func() {
		if stall != nil {
			stall.Stop()
		}
		if grace != nil {
			grace.Stop()
		}
	}()
	// The grace period counts from the instant the task was told to stop.
	startGrace := func() {
		if grace == nil {
			grace = clk.NewTimer(r.cfg.gracePeriod)
			graceC = grace.Chan()
		}
	}
	ctxDone, leaseDone := ctx.Done(), t.lease.Done()
	// A leader with a priority looks for a preferred candidate every
	// retry period; one under RunTaskOnLeader also heeds Resign.
	var pref clockwork.Timer
	var prefC <-chan time.Time
	if r.cfg.hasPriority {
		pref = clk.NewTimer(r.session.Timings().RetryPeriod)
		prefC = pref.Chan()
		defer pref.Stop()
	}
	var stepC chan error
	if !r.underRun() {
		stepC = make(chan error, 1)
		r.mu.Lock()
		r.stepCh = stepC
		if r.resigns > 0 { // Resign came between the campaign and now
			stepC <- errResigning
		}
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			r.stepCh = nil
			r.mu.Unlock()
		}()
	}
	stepDown := func(cause error, reason string) {
		if res.cause != nil || res.stepDown != nil {
			return
		}
		res.stepDown, res.stepReason = cause, reason
		cancelTask(cause)
		if planted.On(planted.ReleaseUnderTask) { // planted: let go at once
			_ = r.mutex.ReleaseLock(ctx)
		}
		prefC, stepC = nil, nil
		startGrace() // then it is abandoned, and its lease left to lapse
	}
	end := func(cause error, reason string) {
		cancelTask(cause)
		r.endTerm(t, cause, reason)
		res.cause = cause
		stallC, leaseDone = nil, nil
		startGrace()
	}
	for {
		select {
		case <-done:
			if panicked {
				// The term ends here, whatever ended it before (endTerm
				// reports once); the caller releases and raises it again.
				cancelTask(ErrTaskPanicked)
				r.endTerm(t, fmt.Errorf("%w: %v", ErrTaskPanicked, panicValue), "task panicked at:\n"+string(stack))
				res.panicked, res.panicValue, res.returned = true, panicValue, true
				if res.cause == nil {
					res.cause = ErrTaskPanicked
				}
				return res
			}
			// The task may have seen the lease end before this loop did.
			if res.cause == nil {
				if cause := t.lease.Err(); cause != nil {
					r.endTerm(t, cause, lostReason(cause))
					res.cause = cause
				}
			}
			res.taskErr, res.returned = taskErr, true
			return res

		case <-ctxDone:
			ctxDone = nil
			startGrace()
			if planted.On(planted.ReleaseUnderTask) { // planted: let go at once
				_ = r.mutex.ReleaseLock(ctx)
			}

		case <-prefC:
			if cause := r.preferred(ctx, t); cause != nil {
				stepDown(cause, reasonPreferred)
			} else {
				pref.Reset(r.session.Timings().RetryPeriod)
			}

		case cause := <-stepC:
			stepDown(cause, reasonResigned)

		case <-leaseDone:
			cause := t.lease.Err()
			end(cause, lostReason(cause))

		case <-stallC:
			due := info.lastBeat().Add(r.cfg.stallTimeout)
			if now := clk.Now(); now.Before(due) {
				stall.Reset(due.Sub(now))
				continue
			}
			end(ErrStalled, "task stalled")
			t.lease.Abandon(ErrStalled) // not renewed any more: it expires

		case <-graceC:
			if res.cause == nil {
				end(ErrTaskDidNotStop, "task did not stop")
			}
			t.lease.Abandon(ErrTaskDidNotStop) // not renewed any more: it expires
			r.session.Emit(lock.Event{Kind: lock.TaskAbandoned, LockID: r.lockID, Fence: t.lease.Fence(), Err: ErrTaskDidNotStop})
			r.abandon(done)
			return res
		}
	}
}

// traceTask begins the span of a task run by RunTaskOnLeader under t
// (lock.OpTask): a child of the call's context, linked to the term. Under
// Run the task runs in the term's own span instead: t.ctx is Run's context
// (the one lead is given) with that span.
func (r *LeaderAwareRunner) traceTask(ctx context.Context, t *term) (context.Context, lock.Span) {
	return r.session.Trace(ctx, lock.Op{Kind: lock.OpTask, LockIDs: []string{r.lockID},
		Fence: t.lease.Fence(), Links: []context.Context{t.ctx}})
}

// underRun reports whether Run holds the gate, for the shape of spans.
func (r *LeaderAwareRunner) underRun() bool {
	r.gateMu.Lock()
	defer r.gateMu.Unlock()
	return r.running
}

// err is how a task's span ends: the task's error, joined with the term's
// end (the lease lost, the task stalled or abandoned) while it ran.
func (res leadResult) err() error {
	if res.cause != nil {
		return errors.Join(res.taskErr, res.cause)
	}
	return res.taskErr
}

// lostReason is the TermEnded reason of a term whose lease ended with
// cause.
func lostReason(cause error) string {
	if errors.Is(cause, lock.ErrSessionClosed) {
		return "session closed"
	}
	return "lease lost"
}

// abandon stops waiting for a task that ignores its cancelled context. Its
// lease is no longer renewed (lock.Lease.Abandon), so other instances take
// the lock once it expires, but it is not released while the task runs,
// so nobody in this session takes it meanwhile; a goroutine that lives as
// long as the task lets the lock go once it returns.
func (r *LeaderAwareRunner) abandon(returned <-chan struct{}) {
	released := make(chan struct{})
	r.abandoned = &abandonedTask{returned: returned, released: released}
	go func() {
		defer close(released)
		<-returned
		_ = r.mutex.ReleaseLock(context.Background())
	}()
}

// endTerm ends t, once: because the lease was lost (err is the cause),
// the task stalled or was abandoned, the task failed under Run (err is its
// error), or the runner steps down (err nil). reason says which, in the
// lock.TermEnded event.
func (r *LeaderAwareRunner) endTerm(t *term, err error, reason string) {
	if t.ended {
		return
	}
	t.ended = true
	r.mu.Lock()
	if r.term == t {
		r.term = nil
		r.leader, r.leaderValue, r.leaderFence = "", nil, 0
	}
	r.mu.Unlock()
	// A loss noticed late (between RunTaskOnLeader calls) ended the term
	// when the lease stopped being trusted.
	end := r.clock.Now()
	if d := t.lease.Deadline(); d.Before(end) {
		end = d
	}
	ended := lock.Event{Kind: lock.TermEnded, LockID: r.lockID, Fence: t.lease.Fence(),
		Took: end.Sub(t.started), Err: err, Reason: reason}
	r.session.Emit(ended)
	t.span.Event(ended)
	t.span.End(err)
	if r.cfg.onStopped != nil {
		r.cfg.onStopped()
	}
}

// release lets the lock go through the Mutex, bounded by the session's
// release timeout whatever ctx's deadline: the lease of the last term, or,
// with none, a lock an earlier failed call may have left ours. A lease lost
// before the release, or nothing to release, is not an error. It does
// nothing while an abandoned task runs: that task's goroutine releases.
func (r *LeaderAwareRunner) release(ctx context.Context) error {
	if r.abandoned != nil {
		return nil
	}
	r.lastRelease = r.clock.Now()
	err := r.mutex.ReleaseLock(ctx)
	switch {
	case err == nil, errors.Is(err, lock.ErrNotHeld), errors.Is(err, lock.ErrLeaseLost), errors.Is(err, lock.ErrSessionClosed):
		return nil
	}
	return err
}
