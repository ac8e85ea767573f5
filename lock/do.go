package lock

import (
	"context"
	"errors"
	"fmt"
)

// Do runs fn holding lockID: it waits for the lock (Mutex.Lock), keeps it
// alive while fn runs, and releases it when fn returns, even if ctx was
// cancelled meanwhile (bounded by the release timeout).
//
// fn's context is cancelled when ctx ends, and, with cause ErrLeaseLost, a
// safety margin before anyone else could take the lock over if the lease
// is lost; LeaseFrom and FenceFrom read the lease and its fencing token
// from it. Do returns fn's error, joined with an error wrapping
// ErrLeaseLost if the lease ended while fn ran. A fn that ignores its
// cancelled context for the grace period (WithGracePeriod) is abandoned:
// Do returns an error wrapping ErrTaskDidNotStop, and the lock stays taken
// in this Session, unrenewed, until fn returns (other processes may take
// it once its lease expires). A panic in fn is raised again in Do's
// goroutine after the release. A nil ctx is an error wrapping
// ErrInvalidArgument.
func (s *Session) Do(ctx context.Context, lockID string, fn func(ctx context.Context) error) error {
	if fn == nil {
		return fmt.Errorf("do %q: %w: nil function", lockID, ErrInvalidArgument)
	}
	if err := checkContext(ctx, "do", lockID); err != nil {
		return err
	}
	m, err := s.Mutex(lockID)
	if err != nil {
		return err
	}
	return s.do(ctx, lockID, m, fn)
}

// holding is what do needs of a Mutex or a Semaphore.
type holding interface {
	Lock(ctx context.Context) (*Lease, error)
	ReleaseLock(ctx context.Context) error
}

// do is Do with m, whose name (lockID) the errors give.
func (s *Session) do(ctx context.Context, lockID string, m holding, fn func(ctx context.Context) error) error {
	lease, err := m.Lock(ctx)
	if err != nil {
		return err
	}
	fctx, cancel := lease.Bind(ctx)
	defer cancel(nil)

	type result struct {
		err      error
		panic    any
		returned bool // false: fn panicked or called runtime.Goexit
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if !r.returned {
				r.panic = recover()
				if r.panic == nil {
					r.err = fmt.Errorf("do %q: the function called runtime.Goexit", lockID)
				}
			}
			done <- r
		}()
		r.err = fn(fctx)
		r.returned = true
	}()

	var res result
	select {
	case res = <-done:
	case <-fctx.Done():
		grace := s.clock.NewTimer(s.cfg.gracePeriod)
		select {
		case res = <-done:
			grace.Stop()
		case <-grace.Chan():
			// Stop renewing: the lease runs out, and the slot stays taken
			// until fn returns, so nobody in this Session runs beside it.
			lease.Abandon(ErrTaskDidNotStop)
			s.Emit(Event{Kind: TaskAbandoned, LockID: lease.LockID(), Fence: lease.Fence(), Err: ErrTaskDidNotStop})
			go func() {
				<-done
				_ = m.ReleaseLock(context.Background())
			}()
			return errors.Join(
				fmt.Errorf("do %q fence %d: %w", lockID, lease.Fence(), ErrTaskDidNotStop),
				context.Cause(fctx))
		}
	}
	rerr := m.ReleaseLock(ctx)
	if res.panic != nil {
		panic(res.panic)
	}
	if errors.Is(rerr, ErrLeaseLost) {
		return errors.Join(res.err, fmt.Errorf("do %q fence %d: %w", lockID, lease.Fence(), ErrLeaseLost))
	}
	return errors.Join(res.err, rerr)
}
