package migrations

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mongolock/mongolock/lock"
)

// run is one call's hold of the migrations lock: the Session it holds it
// in and the lease's fencing token, which claims the records.
type run struct {
	s     *lock.Session
	fence uint64
}

// session returns the Session a call takes the lock through and what to
// do when the call ends: the migrator's (WithSession), or a new one on the
// migrator's Locker, closed at the end of the call.
func (m *Migrator) session() (*lock.Session, func(), error) {
	if m.cfg.session != nil {
		return m.cfg.session, func() {}, nil
	}
	s, err := lock.NewSession(m.locker, m.cfg.sessionOpts...)
	if err != nil {
		return nil, nil, fmt.Errorf("session for migrations lock %q: %w", m.cfg.lockID, err)
	}
	// Close releases nothing the call did not: it released the lock. Its
	// failures are the Session's events.
	return s, func() { _ = s.Close() }, nil
}

// guarded runs work holding the migrations lock, through a Mutex of its
// own, so that two calls exclude each other even on one Migrator and one
// Session. While another holder has the lock it polls (waitLock). work's
// context is cancelled with cause lock.ErrLeaseLost when the Session stops
// trusting the lease, a safety margin before anyone else could take the
// lock over. The lock is released when work returns, even if ctx was
// cancelled (bounded by the Session's release timeout). A lease lost after
// work returned without error is not an error: the records are fenced, so
// everything work recorded was recorded under the lease.
func (m *Migrator) guarded(ctx context.Context, settled func(context.Context) (bool, error),
	work func(ctx context.Context, r run) error) (waited time.Duration, err error) {
	s, end, err := m.session()
	if err != nil {
		return 0, err
	}
	defer end()
	mu, err := s.Mutex(m.cfg.lockID)
	if err != nil {
		return 0, fmt.Errorf("migrations lock: %w", err)
	}
	lease, waited, err := m.waitLock(ctx, s, mu, settled)
	if err != nil || lease == nil {
		return waited, err
	}
	runCtx, cancel := lease.Bind(ctx)
	defer func() {
		cancel(nil)
		_ = mu.ReleaseLock(ctx) // a failure or a loss is the Session's event
	}()
	return waited, work(runCtx, run{s: s, fence: lease.Fence()})
}

// waitLock takes the lock through mu. While another holder has it, it
// checks settled (whether there is still work to do: if not, it returns a
// nil lease; or an error to give up with) and tries again after a pause
// that grows with jitter up to the retry period (lock.Backoff), until it
// takes the lock, the wait allowed (WithWait) is over (ErrWaitTimeout) or
// ctx ends. If it found the lock held, it emits lock.MigrationWaited once
// when the wait ends, however it ends.
func (m *Migrator) waitLock(ctx context.Context, s *lock.Session, mu *lock.Mutex,
	settled func(context.Context) (bool, error)) (lease *lock.Lease, waited time.Duration, err error) {
	clk := s.Clock()
	start := clk.Now()
	giveUp := start.Add(m.cfg.wait)
	// The session's policy, scaled to this migrator's poll period.
	backoff := lock.Backoff{First: max(time.Millisecond, m.cfg.retry/16), Max: m.cfg.retry}
	var reason string
	defer func() {
		if reason == "" { // taken at the first attempt, or failed
			return
		}
		s.Emit(lock.Event{Kind: lock.MigrationWaited, LockID: m.cfg.lockID, Took: waited, Reason: reason, Err: err,
			Fence: fenceOf(lease)})
	}()
	for attempt := 1; ; attempt++ {
		l, ok, err := mu.AcquireLock(ctx)
		switch {
		case ok:
			if attempt > 1 {
				reason = "lock acquired"
			}
			return l, clk.Since(start), nil
		case errors.Is(err, lock.ErrNotTrusted):
			// Granted too late and released again: try again, as Lock does.
		case err != nil:
			if attempt > 1 {
				reason = "lock acquisition failed"
			}
			return nil, clk.Since(start), fmt.Errorf("take migrations lock %q: %w", m.cfg.lockID, err)
		}
		reason = "lock held by another migrator"
		done, err := settled(ctx)
		switch {
		case err != nil:
			return nil, clk.Since(start), err
		case done:
			reason = "done by another migrator"
			return nil, clk.Since(start), nil
		}
		left := giveUp.Sub(clk.Now())
		if left <= 0 {
			return nil, clk.Since(start), fmt.Errorf("%w: lock %q still held after %v", ErrWaitTimeout, m.cfg.lockID, m.cfg.wait)
		}
		// Woken early when another call of this session releases the lock.
		if err := mu.Wait(ctx, min(left, backoff.Pause(clk.Now(), attempt))); err != nil {
			return nil, clk.Since(start), fmt.Errorf("wait for migrations lock %q: %w", m.cfg.lockID, err)
		}
	}
}

func fenceOf(l *lock.Lease) uint64 {
	if l == nil {
		return 0
	}
	return l.Fence()
}
