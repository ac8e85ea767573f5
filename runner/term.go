package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/lock"
)

// campaign tries once to acquire the lock and, if it did, begins a term.
// On a failed campaign it learns who leads. The error is the acquisition's;
// (nil, nil) means another keeper leads. r.lastCampaign is set to the
// sending of the acquisition, the origin of the next campaign's schedule.
//
// It does not campaign while an abandoned task still runs: AcquireLock gives
// a keeper its own lock back at once, so the task would run twice here.
func (r *LeaderAwareRunner) campaign(ctx context.Context) (*term, error) {
	clk := r.cfg.clock
	log := r.cfg.log
	if r.abandonedRunning() {
		return nil, fmt.Errorf("runner: lock %q: not campaigning while an abandoned task still runs: %w",
			r.lockID, ErrTaskDidNotStop)
	}
	// A term left over (from RunTaskOnLeader, trusted or lapsed unreported)
	// ends before the next one begins, so that callbacks pair up.
	r.mu.Lock()
	old, trusted := r.term, r.trustedLocked()
	r.mu.Unlock()
	if old != nil {
		if trusted {
			r.lost(old, nil, "superseded by a new campaign")
		} else {
			r.lost(old, lock.ErrLeaseLost, "renew deadline passed between calls")
		}
	}
	// An acquisition slower than the renew deadline gives a lease that is
	// not trusted on arrival, so waiting longer is pointless.
	actx, cancel := clockwork.WithTimeout(ctx, clk, r.cfg.renewDeadline)
	sent := clk.Now()
	r.lastCampaign = sent
	lease, ok, err := r.locker.AcquireLock(actx, r.lockID, r.keeperID)
	cancel()
	now := clk.Now()
	took := now.Sub(sent)
	switch {
	case err != nil:
		r.ambiguous = true
		if ctx.Err() == nil {
			log.Warn().Err(err).Dur("took", took).Msg("campaign failed")
		}
		return nil, fmt.Errorf("runner: campaign for %q: %w", r.lockID, err)
	case !ok:
		r.ambiguous = false
		log.Debug().Dur("took", took).Msg("campaign: held by another keeper")
		r.observe(ctx)
		return nil, nil
	}
	r.ambiguous = false
	if err := ctx.Err(); err != nil {
		// Nobody wants the task any more: this term never starts.
		log.Info().Uint64("fence", lease.Fence).Dur("took", took).Msg("acquired after the context ended; releasing")
		_ = r.release(context.WithoutCancel(ctx), lease.Fence)
		return nil, fmt.Errorf("runner: campaign for %q: %w", r.lockID, err)
	}
	trust := earliest(lease.Deadline, sent.Add(r.cfg.renewDeadline))
	if !now.Before(trust) {
		// Held, but not trustworthy: this term never starts.
		log.Warn().Uint64("fence", lease.Fence).Dur("took", took).Msg("acquired too late to trust; releasing")
		_ = r.release(context.WithoutCancel(ctx), lease.Fence)
		return nil, nil
	}
	t := &term{
		fence:      lease.Fence,
		started:    now,
		lastSent:   sent,
		nextRenew:  sent.Add(r.cfg.renewInterval),
		trustUntil: trust,
	}
	r.mu.Lock()
	r.term = t
	prev := r.leader
	r.leader = r.keeperID
	r.mu.Unlock()
	log.Info().Uint64("fence", t.fence).Dur("took", took).Dur("trusted_for", trust.Sub(now)).Msg("acquired")
	if prev != r.keeperID && r.cfg.onNewLeader != nil {
		r.cfg.onNewLeader(r.keeperID)
	}
	if r.cfg.onStarted != nil {
		r.cfg.onStarted(t.fence)
	}
	return t, nil
}

// observe reads who holds the lock after a failed campaign.
func (r *LeaderAwareRunner) observe(ctx context.Context) {
	hctx, cancel := clockwork.WithTimeout(ctx, r.cfg.clock, r.cfg.renewDeadline)
	h, err := r.locker.Holder(hctx, r.lockID)
	cancel()
	var id string
	switch {
	case err == nil && h.KeeperID != r.keeperID: // Holder reports expired leases as ErrNotHeld
		id = h.KeeperID
	case err == nil || errors.Is(err, lock.ErrNotHeld):
		// Free, expired, or a stale document of ours: nobody leads.
	default:
		r.cfg.log.Debug().Err(err).Msg("could not read the holder")
		return
	}
	r.mu.Lock()
	changed := id != r.leader
	r.leader = id
	r.mu.Unlock()
	if changed && id != "" {
		r.cfg.log.Debug().Str("leader", id).Msg("new leader")
		if r.cfg.onNewLeader != nil {
			r.cfg.onNewLeader(id)
		}
	}
}

// leadResult is how a task run under a term ended.
type leadResult struct {
	taskErr  error // what the task returned
	returned bool  // false: the task was abandoned
	cause    error // why the term ended while the task ran; nil if it did not
}

// renewResult is the outcome of one renewal.
type renewResult struct {
	sent    time.Time
	renewal lock.Renewal
	err     error
}

type renewOutcome int

const (
	renewed renewOutcome = iota
	renewFailed
	renewLost
)

// lead runs task under term t, renewing the lease in the background, and
// returns when task returns or is abandoned. It ends the term when the lease
// can no longer be trusted, the renewal finds it lost, the task stalls, or the
// task is abandoned; otherwise the term outlives it. The event loop runs in
// the caller's goroutine, so state changes and callbacks stay there; only the
// task and renewals get goroutines, and every renewal is waited for.
func (r *LeaderAwareRunner) lead(ctx context.Context, t *term, task func(context.Context) error) leadResult {
	clk := r.cfg.clock
	taskCtx, cancelTask := context.WithCancelCause(ctx)
	defer cancelTask(nil)
	info := &taskInfo{fence: t.fence, clock: clk, start: clk.Now()}
	taskCtx = context.WithValue(taskCtx, taskKey{}, info)
	// done is closed when the task returns, even by runtime.Goexit; it
	// outlives lead if the task is abandoned.
	done := make(chan struct{})
	var taskErr error
	go func() {
		defer close(done)
		taskErr = task(taskCtx)
	}()

	var res leadResult
	// Each alarm is nil when nothing is scheduled, and replaced once fired.
	renewAlarm := newAlarm(clk, t.nextRenew)
	trustAlarm := newAlarm(clk, t.trustUntil)
	var stallAlarm, graceAlarm *alarm
	if r.cfg.stallTimeout > 0 {
		stallAlarm = newAlarm(clk, info.start.Add(r.cfg.stallTimeout))
	}
	defer func() {
		renewAlarm.stop()
		trustAlarm.stop()
		stallAlarm.stop()
		graceAlarm.stop()
	}()
	set := func(a **alarm, at time.Time) {
		(*a).stop()
		*a = newAlarm(clk, at)
	}
	unset := func(a **alarm) {
		(*a).stop()
		*a = nil
	}
	// The grace period counts from the instant the task was told to stop.
	startGrace := func(from time.Time) {
		if graceAlarm == nil {
			graceAlarm = newAlarm(clk, from.Add(r.cfg.gracePeriod))
		}
	}
	end := func(cause error, reason string) {
		cancelTask(cause)
		r.lost(t, cause, reason)
		res.cause = cause
		unset(&renewAlarm)
		unset(&trustAlarm)
		unset(&stallAlarm)
	}

	// Renewals outlive ctx: while the task winds down the lease must hold.
	renewBase := context.WithoutCancel(ctx)
	var renewC chan renewResult
	var cancelRenew context.CancelFunc
	stopRenewal := func() {
		if renewC != nil {
			cancelRenew()
			<-renewC
			renewC, cancelRenew = nil, nil
		}
	}
	defer stopRenewal()
	onRenewal := func(rr renewResult) {
		cancelRenew()
		renewC, cancelRenew = nil, nil
		switch r.applyRenewal(t, rr) {
		case renewed:
			set(&trustAlarm, t.trustUntil)
			set(&renewAlarm, t.nextRenew)
		case renewFailed:
			set(&renewAlarm, t.nextRenew)
		case renewLost:
			end(lock.ErrLeaseLost, "renewal found the lease lost")
			startGrace(clk.Now())
		}
	}

	ctxDone := ctx.Done()
	for {
		select {
		case <-done:
			res.taskErr, res.returned = taskErr, true
			return res

		case <-ctxDone:
			ctxDone = nil
			startGrace(clk.Now())
			r.cfg.log.Debug().Uint64("fence", t.fence).Dur("grace", r.cfg.gracePeriod).
				Msg("context ended; waiting for the task")

		case <-trustAlarm.C():
			// A renewal that came back while this alarm fired counts.
			select {
			case rr := <-renewC:
				onRenewal(rr)
			default:
			}
			if res.cause != nil {
				continue
			}
			if now := clk.Now(); now.Before(t.trustUntil) {
				set(&trustAlarm, t.trustUntil)
				continue
			}
			// Cancel first: a renewal in flight may take a while to give up.
			end(lock.ErrLeaseLost, "renew deadline passed")
			stopRenewal()
			startGrace(t.trustUntil)

		case <-renewAlarm.C():
			if now := clk.Now(); now.Before(t.nextRenew) {
				set(&renewAlarm, t.nextRenew)
				continue
			}
			unset(&renewAlarm)
			rctx, cancel := context.WithCancel(renewBase)
			ch := make(chan renewResult, 1)
			renewC, cancelRenew = ch, cancel
			until := t.trustUntil
			go func() { ch <- r.renewOnce(rctx, until) }()

		case rr := <-renewC:
			onRenewal(rr)

		case <-stallAlarm.C():
			now := clk.Now()
			due := info.lastBeat().Add(r.cfg.stallTimeout)
			if now.Before(due) {
				set(&stallAlarm, due)
				continue
			}
			r.cfg.log.Error().Uint64("fence", t.fence).Dur("since_heartbeat", now.Sub(info.lastBeat())).
				Dur("stall_timeout", r.cfg.stallTimeout).Msg("task stalled; stepping down")
			end(errStalledCause, "task stalled")
			stopRenewal()
			startGrace(due)

		case <-graceAlarm.C():
			r.cfg.log.Error().Uint64("fence", t.fence).Dur("grace", r.cfg.gracePeriod).
				Msg("task did not stop after its context was cancelled; abandoning it")
			if res.cause == nil {
				end(ErrTaskDidNotStop, "task did not stop")
			}
			stopRenewal()
			r.abandoned = done
			return res
		}
	}
}

// renewOnce sends one renewal of a lease trusted until trustUntil. It gives
// up when half the remaining trust (at least a retry period) has passed, so
// a hung connection leaves time to retry on another one.
func (r *LeaderAwareRunner) renewOnce(ctx context.Context, trustUntil time.Time) renewResult {
	clk := r.cfg.clock
	remaining := clk.Until(trustUntil)
	if remaining <= 0 {
		return renewResult{sent: clk.Now(), err: fmt.Errorf("runner: renew %q: %w", r.lockID, lock.ErrLeaseLost)}
	}
	rctx, cancel := clockwork.WithTimeout(ctx, clk, r.attemptTimeout(remaining))
	defer cancel()
	sent := clk.Now()
	ren, err := r.locker.Renew(rctx, r.keeperID, r.lockID)
	return renewResult{sent: sent, renewal: ren, err: err}
}

// applyRenewal updates t with a renewal's outcome.
func (r *LeaderAwareRunner) applyRenewal(t *term, rr renewResult) renewOutcome {
	clk := r.cfg.clock
	now := clk.Now()
	log := r.cfg.log
	if rr.err != nil {
		t.failures++
		// From the sending, so attempts keep a steady pace; one that took
		// longer than a retry period is followed at once.
		t.nextRenew = rr.sent.Add(r.cfg.retryPeriod)
		log.Warn().Err(rr.err).Uint64("fence", t.fence).Int("failures", t.failures).
			Dur("took", now.Sub(rr.sent)).Dur("trusted_for", t.trustUntil.Sub(now)).Msg("renewal failed")
		return renewFailed
	}
	if !slices.Contains(rr.renewal.Held, r.lockID) {
		return renewLost
	}
	trust := earliest(rr.renewal.Deadline, rr.sent.Add(r.cfg.renewDeadline))
	r.mu.Lock()
	if trust.After(t.trustUntil) {
		t.trustUntil = trust
	}
	r.mu.Unlock()
	t.lastSent = rr.sent
	t.nextRenew = rr.sent.Add(r.cfg.renewInterval)
	t.failures = 0
	log.Debug().Uint64("fence", t.fence).Dur("took", now.Sub(rr.sent)).
		Dur("trusted_for", t.trustUntil.Sub(now)).Msg("renewed")
	return renewed
}

// lost ends t because it can no longer be trusted (cause non-nil), or
// because the runner steps down (cause nil).
func (r *LeaderAwareRunner) lost(t *term, cause error, reason string) {
	if t.ended {
		return
	}
	t.ended = true
	r.mu.Lock()
	if r.term == t {
		r.term = nil
		r.leader = ""
	}
	r.mu.Unlock()
	ev, msg := r.cfg.log.Info(), "stepped down"
	if cause != nil {
		ev, msg = r.cfg.log.Warn().AnErr("cause", cause), "lost"
	}
	ev.Uint64("fence", t.fence).Str("reason", reason).Dur("led_for", r.cfg.clock.Since(t.started)).
		Dur("since_last_renewal", r.cfg.clock.Since(t.lastSent)).Msg(msg)
	if r.cfg.onStopped != nil {
		r.cfg.onStopped()
	}
}

// release deletes the lock if this keeper holds it, bounded by the release
// timeout and ctx. Not holding it is not an error. A failed attempt is
// retried every retry period while the timeout allows, each attempt bounded
// like a renewal so a hung connection leaves time for another; if none
// answers, the lock is left ambiguous so that stopped or Resign tries again.
// fence is the term's, for the log (0 if none started).
func (r *LeaderAwareRunner) release(ctx context.Context, fence uint64) error {
	clk := r.cfg.clock
	deadline := clk.Now().Add(r.cfg.releaseTimeout)
	for attempt := 1; ; attempt++ {
		sent := clk.Now()
		r.lastRelease = sent
		remaining := deadline.Sub(sent)
		rctx, cancel := clockwork.WithTimeout(ctx, clk, r.attemptTimeout(remaining))
		err := r.locker.ReleaseLock(rctx, r.lockID, r.keeperID)
		cancel()
		took := clk.Since(sent)
		switch {
		case err == nil:
			r.ambiguous = false
			r.cfg.log.Info().Uint64("fence", fence).Dur("took", took).Int("attempt", attempt).Msg("released")
			return nil
		case errors.Is(err, lock.ErrNotHeld):
			r.ambiguous = false
			r.cfg.log.Debug().Uint64("fence", fence).Dur("took", took).Int("attempt", attempt).Msg("release: not held")
			return nil
		}
		// The delete may have happened, or not: the lock may still be ours.
		r.ambiguous = true
		next := sent.Add(r.cfg.retryPeriod)
		retry := ctx.Err() == nil && next.Before(deadline)
		r.cfg.log.Warn().Err(err).Uint64("fence", fence).Dur("took", took).Int("attempt", attempt).
			Bool("retrying", retry).Msg("release failed")
		if !retry || !r.sleepUntil(ctx, next) {
			return fmt.Errorf("runner: release %q: %w", r.lockID, err)
		}
	}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// attemptTimeout bounds one renewal or release attempt when remaining is
// left: half of it (at least a retry period), so a hung connection still
// leaves time for another attempt.
func (r *LeaderAwareRunner) attemptTimeout(remaining time.Duration) time.Duration {
	return min(remaining, max(r.cfg.retryPeriod, remaining/2))
}
