package runner

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/mongolock/mongolock/lock"
)

// Locker is what a runner needs from a lock store. *lock.Locker implements
// it; see package lock for the meaning of each method.
type Locker interface {
	AcquireLock(ctx context.Context, lockID, keeperID string) (lock.Lease, bool, error)
	Renew(ctx context.Context, keeperID string, lockIDs ...string) (lock.Renewal, error)
	ReleaseLock(ctx context.Context, lockID, keeperID string) error
	// Holder is read after a failed campaign, to learn who leads.
	Holder(ctx context.Context, lockID string) (lock.Holder, error)
	TTL() time.Duration
}

var _ Locker = (*lock.Locker)(nil)

// LeaderAwareRunner runs work on whichever instance holds one lock. Create it
// with New. Its observers (IsLeader, Fence, Leader) may be called from any
// goroutine. RunTaskOnLeader and Resign wait for each other; Run runs
// alongside neither, nor alongside another Run (ErrBusy).
type LeaderAwareRunner struct {
	locker   Locker
	lockID   string
	keeperID string
	cfg      config

	// The gate is held by Run for its whole life, and by each
	// RunTaskOnLeader and Resign call. Every state change happens under it,
	// in one goroutine at a time, and so does every callback. Run takes it
	// and marks itself running in one step, so a call waiting for the gate
	// wakes up to ErrBusy rather than waiting for the whole of Run.
	gateMu  sync.Mutex
	held    bool          // someone holds the gate
	running bool          // Run holds it
	freed   chan struct{} // closed when the gate is left; nil if nobody waits

	// ambiguous: the last acquisition or release failed with an error, so
	// the lock may be ours without a term. Guarded by the gate, like the
	// rest of this block. lastCampaign and lastRelease are the sending of the
	// last acquisition and release, from which Run schedules its next
	// campaign.
	ambiguous    bool
	lastCampaign time.Time
	lastRelease  time.Time
	// abandoned is closed when the task abandoned last returns; nil when no
	// abandoned task is known to be running. Until it is closed the runner
	// does not campaign: a new term would run a second copy of the task
	// beside it.
	abandoned <-chan struct{}

	// hookRunEntered, if set (by tests), is called once Run holds the gate.
	hookRunEntered func()

	mu     sync.Mutex
	term   *term  // the current term; nil when not leading
	leader string // last observed leader: keeperID while leading, "" if unknown
}

// term is one acquisition of the lock and what the runner knows of it. Fields
// are written only by the goroutine holding the gate; trustUntil is also read by
// observers, so it is written under mu.
type term struct {
	fence     uint64
	started   time.Time // runner clock
	lastSent  time.Time // sending of the last successful acquire or renew
	nextRenew time.Time
	failures  int // renewals failed in a row

	// trustUntil is min(lease deadline reported by the locker,
	// lastSent+RenewDeadline): after it the lease is not trusted.
	trustUntil time.Time
	ended      bool
}

// New returns a runner that leads through lockID on locker as keeperID.
// keeperID must be unique to the process (lock.NewKeeperID); lockID names the
// leadership. Timings default to fractions of the Locker's TTL (see the
// Default constants); New rejects timings that cannot be safe.
func New(locker Locker, lockID, keeperID string, opts ...Option) (*LeaderAwareRunner, error) {
	if locker == nil {
		return nil, fmt.Errorf("%w: nil Locker", ErrInvalidOption)
	}
	if err := lock.ValidateID("lockID", lockID); err != nil {
		return nil, err
	}
	if err := lock.ValidateID("keeperID", keeperID); err != nil {
		return nil, err
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
	if err := cfg.finish(locker.TTL()); err != nil {
		return nil, err
	}
	cfg.log = cfg.log.With().Str("lock", lockID).Str("keeper", keeperID).Logger()
	return &LeaderAwareRunner{
		locker:   locker,
		lockID:   lockID,
		keeperID: keeperID,
		cfg:      cfg,
	}, nil
}

// LockID returns the lock the runner campaigns for.
func (r *LeaderAwareRunner) LockID() string { return r.lockID }

// KeeperID returns the runner's own keeper id.
func (r *LeaderAwareRunner) KeeperID() string { return r.keeperID }

// Timings returns the renew interval, renew deadline and retry period in
// effect, defaults included.
func (r *LeaderAwareRunner) Timings() (renewInterval, renewDeadline, retryPeriod time.Duration) {
	return r.cfg.renewInterval, r.cfg.renewDeadline, r.cfg.retryPeriod
}

// IsLeader reports whether this instance leads and its lease is still
// trusted. It reads the clock, not the database: it turns false at the trust
// deadline even if nothing else runs.
func (r *LeaderAwareRunner) IsLeader() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.trustedLocked()
}

func (r *LeaderAwareRunner) trustedLocked() bool {
	return r.term != nil && r.cfg.clock.Now().Before(r.term.trustUntil)
}

// Fence returns the fencing token of the current term, or 0 when not leader.
func (r *LeaderAwareRunner) Fence() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.trustedLocked() {
		return 0
	}
	return r.term.fence
}

// Leader returns the keeper id of the leader as last observed: this
// instance's own while IsLeader, another's as learned at the last failed
// campaign (it may have changed since), or "" when unknown or none.
func (r *LeaderAwareRunner) Leader() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.term != nil && !r.trustedLocked() {
		return ""
	}
	return r.leader
}

// Run campaigns for the lock until ctx ends, and runs task whenever it leads.
//
// It campaigns every retry period (jittered). Once it holds the lock it calls
// task with a context that is cancelled, with cause lock.ErrLeaseLost, as
// soon as the lease can no longer be trusted, and renews the lease in the
// background while task runs. When task returns, or ctx ends, Run waits for
// task to return (renewing meanwhile), releases the lock so that another
// instance takes over at once, and then campaigns again after a retry period
// (WithCampaignAgain(true), the default) or returns. A term left over from
// RunTaskOnLeader ends (OnStoppedLeading) before Run's first campaign.
//
// When ctx ends, Run returns an error wrapping ctx.Err(). Until then, with
// WithCampaignAgain(true) a task's error is logged and Run goes on; with
// WithCampaignAgain(false) Run returns after the first term: the task's
// error, joined with an error wrapping the cause when the lease was lost.
//
// Run returns only after the task returned and the release was tried
// (bounded by WithReleaseTimeout), with one exception: a task still running a
// grace period (WithGracePeriod) after its context was cancelled is
// abandoned, logged, and reported by an error wrapping ErrTaskDidNotStop.
// The lock is then not released; it expires. A later Run waits for the
// abandoned task to return before it campaigns.
//
// Run returns ErrBusy at once if another Run, a RunTaskOnLeader or a
// Resign is in progress; while Run runs, RunTaskOnLeader and Resign return
// ErrBusy.
func (r *LeaderAwareRunner) Run(ctx context.Context, task func(leaderCtx context.Context) error) error {
	if task == nil {
		return fmt.Errorf("runner: Run: nil task: %w", lock.ErrInvalidArgument)
	}
	r.gateMu.Lock()
	if r.held {
		r.gateMu.Unlock()
		return fmt.Errorf("%w: Run called while the runner is in use", ErrBusy)
	}
	r.held, r.running = true, true
	r.gateMu.Unlock()
	defer r.leave()
	if r.hookRunEntered != nil {
		r.hookRunEntered()
	}

	for {
		if ctx.Err() != nil {
			return r.stopped(ctx)
		}
		if !r.awaitAbandoned(ctx) {
			return r.stopped(ctx)
		}
		t, _ := r.campaign(ctx) // failures are logged; campaigning goes on
		if t == nil {
			if ctx.Err() != nil {
				return r.stopped(ctx)
			}
			if !r.sleepUntil(ctx, r.lastCampaign.Add(r.jittered())) {
				return r.stopped(ctx)
			}
			continue
		}
		res := r.lead(ctx, t, task)
		if !res.returned {
			return fmt.Errorf("runner: lock %q fence %d: %w", r.lockID, t.fence, ErrTaskDidNotStop)
		}
		r.lost(t, nil, "task returned or stopped")
		_ = r.release(context.WithoutCancel(ctx), t.fence)
		if !r.cfg.campaignAgain && ctx.Err() == nil {
			if res.cause != nil {
				return errors.Join(fmt.Errorf("runner: lock %q fence %d: %w", r.lockID, t.fence, res.cause), res.taskErr)
			}
			return res.taskErr
		}
		switch {
		case res.taskErr == nil:
		case (res.cause != nil || ctx.Err() != nil) && errors.Is(res.taskErr, context.Canceled):
			// The task did as told when its context was cancelled.
		default:
			r.cfg.log.Error().Err(res.taskErr).Uint64("fence", t.fence).Msg("task failed")
		}
		if err := ctx.Err(); err != nil {
			// The release just had its full timeout; stopped would retry it.
			return fmt.Errorf("runner: lock %q: %w", r.lockID, err)
		}
		// Give the others a retry period to take over.
		if !r.sleepUntil(ctx, r.lastRelease.Add(r.jittered())) {
			return r.stopped(ctx)
		}
	}
}

// stopped ends Run after ctx ended. An acquisition or release that failed
// with an error may have left the lock ours: release it rather than make the
// others wait for it to expire.
func (r *LeaderAwareRunner) stopped(ctx context.Context) error {
	if r.ambiguous {
		_ = r.release(context.WithoutCancel(ctx), 0)
	}
	return fmt.Errorf("runner: lock %q: %w", r.lockID, ctx.Err())
}

// awaitAbandoned waits, in Run, for a task abandoned earlier to return; false
// if ctx ended first.
func (r *LeaderAwareRunner) awaitAbandoned(ctx context.Context) bool {
	if !r.abandonedRunning() {
		return true
	}
	r.cfg.log.Warn().Msg("waiting for the abandoned task to return before campaigning")
	select {
	case <-r.abandoned:
		return !r.abandonedRunning() // clears it and logs
	case <-ctx.Done():
		return false
	}
}

// abandonedRunning reports whether a task abandoned earlier is still running.
func (r *LeaderAwareRunner) abandonedRunning() bool {
	if r.abandoned == nil {
		return false
	}
	select {
	case <-r.abandoned:
		r.abandoned = nil
		r.cfg.log.Info().Msg("abandoned task returned")
		return false
	default:
		return true
	}
}

// RunTaskOnLeader runs task if this instance leads, and reports whether it
// ran. Not being leader is not an error: it returns false and nil.
//
// If it does not lead it campaigns once; if it leads and the renew interval
// has passed it renews first. A renewal that fails while the lease is still
// trusted does not stop the task; one that finds the lease lost ends the term
// and campaigns again at once. While task runs the lease is renewed in the
// background, and task's context is cancelled with cause lock.ErrLeaseLost
// as soon as the lease can no longer be trusted (the term then ends and the
// lock is released once task returned). If ctx has ended by the time the
// campaign answers, task does not start and a lock just acquired is released.
//
// Nothing runs between calls, so call it at least once per renew deadline
// (once per renew interval is best) to keep leadership from one call to the
// next. A lease whose deadline passes between calls is not trusted any more:
// IsLeader turns false at the deadline, the end of that term
// (OnStoppedLeading) is reported by the next call, Run or Resign, and the
// next call campaigns again (a new term, with a new fencing token, if the
// lock was still free). Call Resign at shutdown to hand over at once.
//
// Calls are serialized. It returns the campaign's error if that failed, the
// task's error otherwise, and an error wrapping ErrTaskDidNotStop if task
// ignored its cancelled context for a grace period (it is then abandoned and
// the term ends without a release). Until an abandoned task returns, calls
// neither campaign nor run anything: they return false and an error wrapping
// ErrTaskDidNotStop.
func (r *LeaderAwareRunner) RunTaskOnLeader(ctx context.Context, task func(ctx context.Context) error) (ran bool, err error) {
	if task == nil {
		return false, fmt.Errorf("runner: RunTaskOnLeader: nil task: %w", lock.ErrInvalidArgument)
	}
	if err := r.enter(ctx); err != nil {
		return false, err
	}
	defer r.leave()

	t, err := r.ensureLeader(ctx)
	if t == nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		// Ended during a renewal: the term goes on, the task does not start.
		return false, fmt.Errorf("runner: lock %q: %w", r.lockID, err)
	}
	res := r.lead(ctx, t, task)
	switch {
	case !res.returned:
		return true, fmt.Errorf("runner: lock %q fence %d: %w", r.lockID, t.fence, ErrTaskDidNotStop)
	case res.cause != nil:
		_ = r.release(context.WithoutCancel(ctx), t.fence)
	}
	return true, res.taskErr
}

// Resign ends the current term, if any, and releases the lock so another
// instance takes over at once. It is for the RunTaskOnLeader shape; Run
// releases by itself when its context ends. It also retries a release that
// failed earlier. The release is bounded by ctx and WithReleaseTimeout. Not
// holding the lock is not an error.
func (r *LeaderAwareRunner) Resign(ctx context.Context) error {
	if err := r.enter(ctx); err != nil {
		return err
	}
	defer r.leave()

	r.mu.Lock()
	t := r.term
	r.mu.Unlock()
	if t == nil && !r.ambiguous {
		return nil
	}
	var fence uint64
	if t != nil {
		fence = t.fence
		r.lost(t, nil, "resigned")
	}
	return r.release(ctx, fence)
}

// enter takes the gate for one call, unless Run holds it or takes it while
// the call waits.
func (r *LeaderAwareRunner) enter(ctx context.Context) error {
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
				return fmt.Errorf("runner: lock %q: %w", r.lockID, err)
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
			return fmt.Errorf("runner: lock %q: %w", r.lockID, ctx.Err())
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

// ensureLeader returns the current term, renewing it if due, or campaigns.
func (r *LeaderAwareRunner) ensureLeader(ctx context.Context) (*term, error) {
	r.mu.Lock()
	t := r.term
	r.mu.Unlock()
	if t != nil {
		now := r.cfg.clock.Now()
		switch {
		case !now.Before(t.trustUntil):
			// Lapsed between calls. AcquireLock takes it back if nobody else
			// did, so a release would only cost a round trip.
			r.lost(t, lock.ErrLeaseLost, "renew deadline passed between calls")
		case !now.Before(t.nextRenew):
			if r.applyRenewal(t, r.renewOnce(ctx, t.trustUntil)) == renewLost {
				r.lost(t, lock.ErrLeaseLost, "renewal found the lease lost")
			}
		}
		if !t.ended && r.cfg.clock.Now().Before(t.trustUntil) {
			return t, nil
		}
		r.lost(t, lock.ErrLeaseLost, "renew deadline passed")
	}
	return r.campaign(ctx)
}

// sleepUntil waits until at on the runner's clock; false if ctx ended first.
// Schedules are absolute so that time spent elsewhere does not shift them.
func (r *LeaderAwareRunner) sleepUntil(ctx context.Context, at time.Time) bool {
	a := newAlarm(r.cfg.clock, at)
	defer a.stop()
	select {
	case <-a.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// jittered is a retry period shortened by up to retryJitter.
func (r *LeaderAwareRunner) jittered() time.Duration {
	rp := float64(r.cfg.retryPeriod)
	return time.Duration(rp - rand.Float64()*retryJitter*rp)
}
