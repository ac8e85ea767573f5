package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/internal/planted"
	"github.com/mongolock/mongolock/lock"
)

// LeaderAwareRunner runs work on whichever instance holds one lock. Create it
// with New. Its observers (IsLeader, Fence, Leader) may be called from any
// goroutine. RunTaskOnLeader and Resign wait for each other; Run runs
// alongside neither, nor alongside another Run (ErrBusy).
type LeaderAwareRunner struct {
	session *lock.Session
	mutex   *lock.Mutex
	lockID  string
	clock   clockwork.Clock
	cfg     config

	// The gate is held by Run for its whole life, and by each
	// RunTaskOnLeader and Resign call. Every state change happens under it,
	// in one goroutine at a time, and so does every callback. Run takes it
	// and marks itself running in one step, so a call waiting for the gate
	// wakes up to ErrBusy rather than waiting for the whole of Run.
	gateMu  sync.Mutex
	held    bool          // someone holds the gate
	running bool          // Run holds it
	freed   chan struct{} // closed when the gate is left; nil if nobody waits

	// Guarded by the gate, like the rest of this block. lastCampaign and
	// lastRelease are the sending of the last acquisition and release, from
	// which Run schedules its next campaign.
	lastCampaign time.Time
	lastRelease  time.Time
	// prevEnd is the last instant, on the server's clock, the previous
	// term held the lock as last read (its last renewal, or its release),
	// and prevFence that term's fence: for the failover gap. prevExpires
	// is when that lease would have expired if it was live when read
	// (zero if it was released or expired): a takeover before then came
	// after a release this runner did not see.
	prevEnd, prevExpires time.Time
	prevFence            uint64
	// abandoned is the task abandoned last, nil when none is known to be
	// running. Until it returns the runner does not campaign: a new term
	// would run a second copy of the task beside it.
	abandoned *abandonedTask
	// cand is the runner's part among candidates (WithPriority).
	cand candidacy

	// hookRunEntered, if set (by tests), is called once Run holds the gate.
	hookRunEntered func()

	mu     sync.Mutex
	term   *term  // the current term; nil when not leading
	leader string // last observed leader: the keeper id while leading, "" if unknown
	// The last observed leader's value and fence (leader.go), and the
	// value this runner publishes (WithValue, SetValue).
	leaderValue []byte
	leaderFence uint64
	value       []byte

	// stepCh, while a RunTaskOnLeader task runs, takes a request to step
	// down (Resign) to its lead loop.
	stepCh chan error
	// resigns counts the Resign calls waiting for a RunTaskOnLeader call:
	// while one waits, a task does not start, and one starting is told to
	// stop at once.
	resigns int
}

// term is one acquisition of the lock. ended is written only by the
// goroutine holding the gate.
type term struct {
	lease   *lock.Lease
	started time.Time // runner clock
	ended   bool
	// ctx carries the term's span (lock.OpTerm), and span is it: under Run,
	// ctx is Run's context with the span; otherwise only the span.
	ctx  context.Context
	span lock.Span
}

// abandonedTask is a task the runner stopped waiting for.
type abandonedTask struct {
	returned <-chan struct{} // closed when the task returns
	released <-chan struct{} // closed once its lock was let go, after that
}

// New returns a runner that leads through lockID, holding it in session as
// the session's keeper. The session renews the lease and gives the timings
// (lock.Session.Timings) and the clock; the runner must not be given a
// closed session. lockID names the leadership. The runner is added to the
// session's components (lock.Session.AddComponent), so that the metrics and
// health of the session cover it.
func New(session *lock.Session, lockID string, opts ...Option) (*LeaderAwareRunner, error) {
	if session == nil {
		return nil, fmt.Errorf("new runner: %w: nil session", lock.ErrInvalidArgument)
	}
	select {
	case <-session.Done():
		return nil, fmt.Errorf("new runner: %w", lock.ErrSessionClosed)
	default:
	}
	m, err := session.Mutex(lockID)
	if err != nil {
		return nil, fmt.Errorf("new runner: %w", err)
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil Option", ErrInvalidOption)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.gracePeriod == 0 {
		cfg.gracePeriod = session.GracePeriod()
	}
	if _, ok := session.Store().(lock.ValueStore); cfg.value != nil && !ok {
		// Else every term would be given up for the value it cannot write.
		return nil, fmt.Errorf("%w: WithValue: the session's store (%T) keeps no values (lock.ValueStore)", ErrInvalidOption, session.Store())
	}
	r := &LeaderAwareRunner{
		session: session,
		mutex:   m,
		lockID:  lockID,
		clock:   session.Clock(),
		cfg:     cfg,
		value:   cfg.value,
	}
	if err := r.initCandidacy(); err != nil {
		return nil, err
	}
	session.AddComponent(r) // for those who watch the session: metrics, health
	return r, nil
}

// LockID returns the lock the runner campaigns for.
func (r *LeaderAwareRunner) LockID() string { return r.lockID }

// KeeperID returns the runner's keeper id: its session's.
func (r *LeaderAwareRunner) KeeperID() string { return r.session.KeeperID() }

// IsLeader reports whether this instance leads and its lease is still
// trusted. It reads the clock, not the database: it turns false at the trust
// deadline even if nothing else runs.
func (r *LeaderAwareRunner) IsLeader() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.trustedLocked()
}

func (r *LeaderAwareRunner) trustedLocked() bool {
	return r.term != nil && r.term.lease.Err() == nil
}

// Fence returns the fencing token of the current term, or 0 when not leader.
func (r *LeaderAwareRunner) Fence() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.trustedLocked() {
		return 0
	}
	return r.term.lease.Fence()
}

// Leader returns the keeper id of the leader as last observed: this
// instance's own while IsLeader, another's as learned at the last failed
// campaign (it may have changed since), or "" when unknown or none.
func (r *LeaderAwareRunner) Leader() string { return r.LeaderInfo().KeeperID }

// Run campaigns for the lock until ctx ends, and runs task whenever it leads.
//
// It campaigns every retry period of the session (jittered). Once it holds
// the lock it calls task with a context that is cancelled, with cause
// lock.ErrLeaseLost, as soon as the lease can no longer be trusted; the
// session renews the lease meanwhile. When task returns, or ctx ends, Run
// waits for task to return (the lease still renewed), releases the lock so
// that another instance takes over at once, and then campaigns again after
// a retry period (WithCampaignAgain(true), the default) or returns. A term
// left over from RunTaskOnLeader ends (OnStoppedLeading) before Run's first
// campaign.
//
// When ctx ends, Run stops and returns nil: a normal stop, whatever the
// state of the store (a release that failed is reported by a lock.Released
// event with its error, and the lock expires with its lease). When the
// session is closed it returns an error wrapping lock.ErrSessionClosed.
// Until then, with WithCampaignAgain(true) a task's error ends the term (a
// lock.TermEnded event with the error, Reason "task failed") and Run goes
// on; with WithCampaignAgain(false) Run returns after the first term: the
// task's error (nil if it only returned its context's cancellation after
// ctx ended), joined with an error wrapping the cause when the lease was
// lost.
//
// Once ctx ends, Run returns after the task returned (its grace period
// bounds the wait) and the release was tried: the session's release
// timeout (lock.WithReleaseTimeout, default 5s) bounds that, also when
// the store is down, with one exception: a task
// still running a grace period (WithGracePeriod) after its context was
// cancelled is abandoned and reported by an error wrapping
// ErrTaskDidNotStop. Its lease is no longer renewed, so it expires and
// another instance may lead; its lock stays taken in this session until the
// task returns, and is released then. A later Run waits for the
// abandoned task to return before it campaigns.
//
// A panic in task ends the term, releases the lock and is raised again in
// Run's goroutine (see the package doc).
//
// With WithPriority, Run steps down for a preferred candidate (see the
// package doc, Candidates): the task's context is cancelled with a cause
// wrapping ErrSteppedDown, the lease is still renewed while the task
// returns, the term ends (Reason "stepped down for a preferred
// candidate") and the lock is released only then; a task still running a
// grace period later is abandoned as above. With WithCampaignAgain(false)
// Run then returns an error wrapping ErrSteppedDown. With WithNeverLead,
// Run never campaigns: it reads who leads every retry period until ctx
// ends, and returns nil.
//
// Run returns ErrBusy at once if another Run, a RunTaskOnLeader or a
// Resign is in progress; while Run runs, RunTaskOnLeader and Resign return
// ErrBusy.
func (r *LeaderAwareRunner) Run(ctx context.Context, task func(leaderCtx context.Context) error) error {
	if task == nil {
		return fmt.Errorf("run %q: %w: nil task", r.lockID, lock.ErrInvalidArgument)
	}
	if err := checkArgs(fmt.Sprintf("run %q", r.lockID), ctx); err != nil {
		return err
	}
	r.gateMu.Lock()
	if r.held {
		r.gateMu.Unlock()
		return fmt.Errorf("%w: Run called while the runner is in use", ErrBusy)
	}
	r.held, r.running = true, true
	r.gateMu.Unlock()
	defer r.leave()
	defer r.withdraw()
	if r.hookRunEntered != nil {
		r.hookRunEntered()
	}
	if r.cfg.neverLead && !planted.On(planted.NeverLeadCampaigns) { // planted: it campaigns
		return r.watch(ctx)
	}

	for {
		if ctx.Err() != nil || !r.awaitAbandoned(ctx) {
			return r.stopped(ctx)
		}
		t, err := r.campaign(ctx)
		if t == nil {
			switch {
			case ctx.Err() != nil:
				return r.stopped(ctx)
			case errors.Is(err, lock.ErrSessionClosed):
				return err
			}
			// Any other failure: campaigning goes on.
			if err := r.session.Sleep(ctx, r.clock.Until(r.lastCampaign.Add(r.retryPause()))); err != nil {
				return r.sleepFailed(ctx, err)
			}
			continue
		}
		fence := t.lease.Fence()
		res := r.lead(ctx, t, task)
		if !res.returned {
			return fmt.Errorf("run %q fence %d: %w", r.lockID, fence, ErrTaskDidNotStop)
		}
		if res.panicked {
			_ = r.release(ctx)
			res.repanic()
		}
		switch {
		case res.cause != nil:
			// Ended when the lease was lost or the task stalled.
		case res.stepDown != nil:
			// Stepped down for a preferred candidate: the task returned.
			r.endTerm(t, res.stepDown, res.stepReason)
		case res.taskErr != nil && !(ctx.Err() != nil && errors.Is(res.taskErr, context.Canceled)):
			r.endTerm(t, res.taskErr, "task failed")
		case ctx.Err() != nil:
			r.endTerm(t, nil, "context ended")
		default:
			r.endTerm(t, nil, "task returned")
		}
		_ = r.release(ctx)
		stopping := ctx.Err() != nil
		if !r.cfg.campaignAgain {
			switch {
			case res.cause != nil && !stopping:
				return errors.Join(fmt.Errorf("run %q fence %d: %w", r.lockID, fence, res.cause), res.taskErr)
			case res.stepDown != nil && !stopping:
				err := fmt.Errorf("run %q fence %d: %w", r.lockID, fence, res.stepDown)
				if errors.Is(res.taskErr, context.Canceled) {
					return err
				}
				return errors.Join(err, res.taskErr)
			case stopping && errors.Is(res.taskErr, context.Canceled):
				return nil // the task returned its cancellation: a normal stop
			}
			return res.taskErr
		}
		if stopping {
			// A normal stop. The release just had its full timeout; stopped
			// would retry it.
			return nil
		}
		// Give the others a retry period to take over.
		if err := r.session.Sleep(ctx, r.clock.Until(r.lastRelease.Add(r.retryPause()))); err != nil {
			return r.sleepFailed(ctx, err)
		}
	}
}

// stopped ends Run after ctx ended: a normal stop, nil. An acquisition or
// release that failed with an error may have left the lock ours: the Mutex
// deletes it then, rather than make the others wait for it to expire.
func (r *LeaderAwareRunner) stopped(ctx context.Context) error {
	_ = r.release(ctx)
	return nil
}

// sleepFailed ends Run after a pause between campaigns was cut short by
// err: ctx ended, or the session was closed.
func (r *LeaderAwareRunner) sleepFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return r.stopped(ctx)
	}
	return fmt.Errorf("run %q: %w", r.lockID, err)
}

// awaitAbandoned waits, in Run, for a task abandoned earlier to return and
// its lock to be let go; false if ctx ended first.
func (r *LeaderAwareRunner) awaitAbandoned(ctx context.Context) bool {
	a := r.abandoned
	if a == nil {
		return true
	}
	select {
	case <-a.returned:
	case <-ctx.Done():
		return false
	}
	<-a.released // bounded by the session's release timeout
	r.abandoned = nil
	return true
}

// abandonedRunning reports whether a task abandoned earlier is still
// running. Once it returned, it waits for its lock to be let go.
func (r *LeaderAwareRunner) abandonedRunning() bool {
	a := r.abandoned
	if a == nil {
		return false
	}
	select {
	case <-a.returned:
		<-a.released
		r.abandoned = nil
		return false
	default:
		return true
	}
}

// RunTaskOnLeader runs task if this instance leads, and reports whether it
// ran. Not being leader is not an error: it returns false and nil.
//
// If this instance leads it runs task at once, with no round trip;
// otherwise it campaigns once. Leadership lasts from one call to the next:
// the session renews the lease whether or not a task runs, so a leader stays
// leader until it resigns, its session is closed, or the session's renewals
// fail past the renew deadline. In that last case IsLeader turns false at
// the deadline, the end of that term (OnStoppedLeading, lock.TermEnded) is
// reported by the next call, Run or Resign, and the next call campaigns
// again (a new term, with a new fencing token, if the lock is free). Call
// Resign to hand over, at the latest at shutdown (closing the session does
// it too).
//
// While task runs, its context is cancelled with cause lock.ErrLeaseLost as
// soon as the lease can no longer be trusted (the term then ends and the
// lock is released once task returned). If ctx has ended by the time the
// campaign answers, task does not start and a lock just acquired is
// released.
//
// With WithNeverLead it only reads who leads, and returns false and nil.
// With WithPriority, a leader looks for a preferred candidate at most once
// a retry period, at a call or while a task runs: it then steps down (a
// running task is cancelled with a cause wrapping ErrSteppedDown and the
// lock released once it returned) and the call returns false, or the
// task's result.
//
// Calls are serialized. It returns the campaign's error if that failed, the
// task's error otherwise, and an error wrapping ErrTaskDidNotStop if task
// ignored its cancelled context for a grace period (it is then abandoned and
// the term ends; its lock stays held until it returns). Until an abandoned
// task returns, calls neither campaign nor run anything: they return false
// and an error wrapping ErrTaskDidNotStop. A panic in task ends the term,
// releases the lock and is raised again in the caller's goroutine.
func (r *LeaderAwareRunner) RunTaskOnLeader(ctx context.Context, task func(ctx context.Context) error) (ran bool, err error) {
	if task == nil {
		return false, fmt.Errorf("run task on leader %q: %w: nil task", r.lockID, lock.ErrInvalidArgument)
	}
	if err := r.enter(ctx); err != nil {
		return false, err
	}
	defer r.leave()
	if r.cfg.neverLead && !planted.On(planted.NeverLeadCampaigns) { // planted: it campaigns
		r.observe(ctx)
		return false, nil
	}

	t, err := r.ensureLeader(ctx)
	if t == nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		// The term goes on; the task does not start.
		return false, fmt.Errorf("run task on leader %q: %w", r.lockID, err)
	}
	if r.resignPending() {
		// Resign was called while this call campaigned: it ends the term.
		return false, nil
	}
	fence := t.lease.Fence()
	res := r.lead(ctx, t, task)
	switch {
	case !res.returned:
		return true, fmt.Errorf("run task on leader %q fence %d: %w", r.lockID, fence, ErrTaskDidNotStop)
	case res.cause != nil:
		_ = r.release(ctx)
	case res.stepDown != nil:
		// Resigned while the task ran: it returned, so the lock goes.
		r.endTerm(t, res.stepDown, res.stepReason)
		_ = r.release(ctx)
	}
	res.repanic()
	return true, res.taskErr
}

// ensureLeader returns the current term if its lease is trusted, or
// campaigns.
func (r *LeaderAwareRunner) ensureLeader(ctx context.Context) (*term, error) {
	r.mu.Lock()
	t, trusted := r.term, r.trustedLocked()
	r.mu.Unlock()
	if trusted && r.preferenceDue() {
		if cause := r.preferred(ctx, t); cause != nil {
			// No task runs: the term ends and the lock goes at once.
			r.endTerm(t, cause, reasonPreferred)
			_ = r.release(ctx)
			return nil, nil
		}
	}
	if trusted {
		return t, nil
	}
	return r.campaign(ctx)
}

// errResigning is the cause a RunTaskOnLeader task is cancelled with by
// Resign.
var errResigning = fmt.Errorf("%w: resigning", ErrSteppedDown)

// resignPending reports whether a Resign waits for the current call.
func (r *LeaderAwareRunner) resignPending() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.resigns > 0
}

// Resign ends the current term, if any, and releases the lock so another
// instance takes over at once. It is for the RunTaskOnLeader shape; Run
// releases by itself when its context ends. It also releases the lock if an
// earlier acquisition or release failed in a way that may have left it
// ours. The release is bounded by the session's release timeout, whatever
// ctx's deadline. Not holding the lock is not an error, and neither is a
// lease lost before the release. A RunTaskOnLeader task running when
// Resign is called is told to stop (its context is cancelled with a cause
// wrapping ErrSteppedDown, "resigning"), and Resign waits for it to return
// (until ctx ends) before releasing: the lock never goes under running
// work. A RunTaskOnLeader call still campaigning when Resign is called
// starts no task (it returns false and nil), and Resign then ends the term
// it won. A task that ignores it for the grace period is abandoned and its
// lease left to lapse. While an abandoned task still runs, Resign does
// nothing: its lock is released when it returns. Resign also withdraws the
// candidacy (WithPriority) until the next campaign.
func (r *LeaderAwareRunner) Resign(ctx context.Context) error {
	if !r.underRun() {
		// A RunTaskOnLeader task running now is told to stop, and waited
		// for: the lock goes only once it returned. A call still
		// campaigning starts no task.
		r.mu.Lock()
		r.resigns++
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			r.resigns--
			r.mu.Unlock()
		}()
		r.stepDownRequest(errResigning)
	}
	if err := r.enter(ctx); err != nil {
		return err
	}
	defer r.leave()
	r.withdraw()
	if r.abandonedRunning() {
		return nil
	}
	r.mu.Lock()
	t := r.term
	r.mu.Unlock()
	if t != nil {
		if cause := t.lease.Err(); cause != nil {
			r.endTerm(t, cause, lostReason(cause))
		} else {
			r.endTerm(t, nil, reasonResigned)
		}
	}
	return r.release(ctx)
}

// enter takes the gate for one call, unless Run holds it or takes it while
// the call waits.
func (r *LeaderAwareRunner) enter(ctx context.Context) error {
	if err := checkArgs(fmt.Sprintf("lock %q", r.lockID), ctx); err != nil {
		return err
	}
	for {
		r.gateMu.Lock()
		if r.running {
			r.gateMu.Unlock()
			return fmt.Errorf("%w: Run is running", ErrBusy)
		}
		if !r.held {
			r.held = true
			r.gateMu.Unlock()
			if err := ctx.Err(); err != nil {
				r.leave()
				return fmt.Errorf("lock %q: %w", r.lockID, err)
			}
			return nil
		}
		if r.freed == nil {
			r.freed = make(chan struct{})
		}
		freed := r.freed
		r.gateMu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return fmt.Errorf("lock %q: %w", r.lockID, ctx.Err())
		}
	}
}

// leave gives the gate up and wakes whoever waits for it.
func (r *LeaderAwareRunner) leave() {
	r.gateMu.Lock()
	defer r.gateMu.Unlock()
	r.held, r.running = false, false
	if r.freed != nil {
		close(r.freed)
		r.freed = nil
	}
}

// retryPause is the session's retry period shortened by the shared jitter
// (lock.Backoff), so that followers do not campaign in step and none waits
// longer than a retry period.
func (r *LeaderAwareRunner) retryPause() time.Duration {
	rp := r.session.Timings().RetryPeriod
	return lock.Backoff{First: rp, Max: rp}.Pause(r.session.Clock().Now(), 1)
}

// watch is Run for an observer (WithNeverLead): it reads who leads every
// retry period until ctx ends, and never campaigns.
func (r *LeaderAwareRunner) watch(ctx context.Context) error {
	for {
		r.lastCampaign = r.clock.Now()
		r.observe(ctx)
		if err := r.session.Sleep(ctx, r.clock.Until(r.lastCampaign.Add(r.retryPause()))); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("run %q: %w", r.lockID, err)
		}
	}
}
