package migrations

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mongolock/mongolock/lock"
)

// Locker is what a Migrator needs from a lock store. *lock.Locker has it.
type Locker interface {
	AcquireLock(ctx context.Context, lockID, keeperID string) (lock.Lease, bool, error)
	Renew(ctx context.Context, keeperID string, lockIDs ...string) (lock.Renewal, error)
	ReleaseLock(ctx context.Context, lockID, keeperID string) error
}

var _ Locker = (*lock.Locker)(nil)

// guarded runs work holding the migrations lock. While another migrator
// holds it, it polls every retry period: settled reports whether there is
// still work to do (if not, guarded returns without running work) or an
// error to give up with. work's context is cancelled with cause
// lock.ErrLeaseLost when the lease can no longer be trusted.
func (m *Migrator) guarded(ctx context.Context, settled func(context.Context) (bool, error),
	work func(ctx context.Context, fence uint64) error) (waited time.Duration, err error) {
	start := m.cfg.clock.Now()
	giveUp := start.Add(m.cfg.wait)
	var lease lock.Lease
	for attempt := 0; ; attempt++ {
		var ok bool
		lease, ok, err = m.locker.AcquireLock(ctx, m.cfg.lockID, m.cfg.keeperID)
		if err != nil {
			return m.cfg.clock.Since(start), fmt.Errorf("take migrations lock %q: %w", m.cfg.lockID, err)
		}
		if ok {
			break
		}
		if attempt == 0 {
			m.cfg.log.Info().Str("lock", m.cfg.lockID).Dur("wait", m.cfg.wait).Msg("another migrator is running; waiting")
		}
		done, err := settled(ctx)
		if err != nil || done {
			return m.cfg.clock.Since(start), err
		}
		left := giveUp.Sub(m.cfg.clock.Now())
		if left <= 0 {
			return m.cfg.clock.Since(start), fmt.Errorf("%w: lock %q still held after %v", ErrWaitTimeout, m.cfg.lockID, m.cfg.wait)
		}
		t := m.cfg.clock.NewTimer(min(left, m.cfg.retry))
		select {
		case <-ctx.Done():
			t.Stop()
			return m.cfg.clock.Since(start), fmt.Errorf("wait for migrations lock %q: %w", m.cfg.lockID, ctx.Err())
		case <-t.Chan():
		}
	}
	waited = m.cfg.clock.Since(start)
	m.cfg.log.Debug().Str("lock", m.cfg.lockID).Uint64("fence", lease.Fence).Msg("took migrations lock")

	runCtx, cancel := context.WithCancelCause(ctx)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		m.keepAlive(runCtx, cancel, lease.Deadline, stop)
	}()
	err = work(runCtx, lease.Fence)
	close(stop)
	<-stopped
	lost := errors.Is(context.Cause(runCtx), lock.ErrLeaseLost)
	cancel(nil)

	relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultReleaseTimeout)
	defer relCancel()
	if rerr := m.locker.ReleaseLock(relCtx, m.cfg.lockID, m.cfg.keeperID); rerr != nil {
		if !lost || !errors.Is(rerr, lock.ErrNotHeld) {
			m.cfg.log.Warn().Err(rerr).Str("lock", m.cfg.lockID).Msg("release migrations lock")
		}
	}
	if err == nil && lost {
		// Everything was recorded in time; say so but do not fail.
		m.cfg.log.Warn().Str("lock", m.cfg.lockID).Msg("migrations lock was lost at the end of the run")
	}
	return waited, err
}

// keepAlive renews the lease halfway to its deadline until stop is closed,
// and cancels ctx with lock.ErrLeaseLost once the lease is lost or its
// deadline passed without a successful renewal.
func (m *Migrator) keepAlive(ctx context.Context, cancel context.CancelCauseFunc, deadline time.Time, stop <-chan struct{}) {
	clk := m.cfg.clock
	failed := false
	for {
		left := deadline.Sub(clk.Now())
		if left <= 0 {
			m.cfg.log.Error().Str("lock", m.cfg.lockID).Msg("migrations lease expired before it could be renewed")
			cancel(lock.ErrLeaseLost)
			return
		}
		wait := left / 2
		if failed {
			wait = min(wait, m.cfg.retry)
		}
		t := clk.NewTimer(wait)
		select {
		case <-stop:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.Chan():
		}
		left = deadline.Sub(clk.Now())
		if left <= 0 {
			continue // reported at the top
		}
		rctx, rcancel := context.WithTimeout(ctx, left)
		r, err := m.locker.Renew(rctx, m.cfg.keeperID, m.cfg.lockID)
		rcancel()
		switch {
		case err != nil:
			failed = true
			m.cfg.log.Warn().Err(err).Str("lock", m.cfg.lockID).Msg("renew migrations lock")
		case len(r.Lost) > 0:
			m.cfg.log.Error().Str("lock", m.cfg.lockID).Msg("migrations lock lost")
			cancel(lock.ErrLeaseLost)
			return
		default:
			failed = false
			deadline = r.Deadline
		}
	}
}
