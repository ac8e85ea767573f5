package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Mutex is a handle on one lock of a Session. It holds at most one lease
// at a time and is not re-entrant: two Mutexes on one lock exclude each
// other, in one Session as in two, and acquiring through a Mutex that
// already holds its lock is an error (ErrAlreadyHeld), never a second
// owner. Its methods may be called from several goroutines, but a Mutex
// belongs to one holder: give each goroutine its own. A method given a nil
// context returns an error wrapping ErrInvalidArgument and does nothing.
type Mutex struct {
	s  *Session
	id string

	mu    sync.Mutex
	lease *Lease
}

// Mutex returns a handle on lockID. It does no I/O.
func (s *Session) Mutex(lockID string) (*Mutex, error) {
	if err := ValidateID("lockID", lockID); err != nil {
		return nil, err
	}
	return &Mutex{s: s, id: lockID}, nil
}

// LockID returns the id of the lock.
func (m *Mutex) LockID() string { return m.id }

// Lease returns the lease the Mutex holds, nil if none. It may have ended
// (Lease.Err) and not yet been released.
func (m *Mutex) Lease() *Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lease
}

// AcquireLock tries once to take the lock, in one round trip (plus, at
// most once a minute, one to read the server's clock). It returns the
// lease and true if it took it; false and a nil error if another keeper,
// or another holder in this Session, holds it. The lease is kept alive
// until ReleaseLock, or until it is lost (Lease.Done). A lease granted too
// late to be trusted when the answer came is released again and reported
// as an error wrapping ErrNotTrusted. Any other error means the lock was
// not acquired as far as the caller may assume (the write may have
// happened: the Session then releases it at Close, or the next
// acquisition in the Session takes it as a new term).
func (m *Mutex) AcquireLock(ctx context.Context) (*Lease, bool, error) {
	if err := checkContext(ctx, "acquire", m.id); err != nil {
		return nil, false, err
	}
	return m.acquireLock(ctx, 0)
}

// acquireLock is AcquireLock; attempt counts Lock's tries, for the span.
func (m *Mutex) acquireLock(ctx context.Context, attempt int) (*Lease, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lease != nil {
		if err := m.lease.Err(); errors.Is(err, ErrSessionClosed) {
			return nil, false, fmt.Errorf("acquire %q: %w", m.id, err)
		}
		return nil, false, fmt.Errorf("acquire %q: %w; release it first", m.id, ErrAlreadyHeld)
	}
	// A grant slower than the renew deadline is not trusted on arrival:
	// waiting longer is pointless, and the deadline, sent to the server,
	// keeps an acquisition it holds back from landing after this one gave
	// up (WithTimeout).
	actx, cancel := WithTimeout(ctx, m.s.clock, m.s.cfg.timings.RenewDeadline)
	t, err := m.s.acquire(actx, []string{m.id}, attempt)
	cancel()
	switch {
	case len(t.Leases) == 1:
		m.lease = t.Leases[0]
		return m.lease, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("acquire %q: %w", m.id, err)
	case len(t.Untrusted) == 1:
		return nil, false, fmt.Errorf("acquire %q: %w", m.id, ErrNotTrusted)
	}
	return nil, false, nil
}

// Lock waits until it takes the lock or ctx ends, trying again after
// pauses that grow with jitter up to the Session's retry period, and at
// once when another holder in this Session releases it. Failed attempts
// (a network error, a grant too late to trust) are retried too, and
// reported as AcquireFailed or Refused events; when ctx ends Lock returns
// its error (wrapped) joined with the last attempt's. It returns at once
// on ErrAlreadyHeld, ErrSessionClosed and ErrInvalidArgument.
func (m *Mutex) Lock(ctx context.Context) (*Lease, error) {
	if err := checkContext(ctx, "lock", m.id); err != nil {
		return nil, err
	}
	return waitFor(ctx, m.s, fmt.Sprintf("lock %q", m.id), m.acquireLock, m.Wait)
}

// Wait pauses d on the Session's clock, or until the lock's holder in this
// Session lets it go, between attempts of a caller's own waiting loop
// (Lock is one; pauses from Session.Backoff). It returns ctx's error if ctx
// ends first, ErrSessionClosed if the Session closes.
func (m *Mutex) Wait(ctx context.Context, d time.Duration) error {
	if err := checkContext(ctx, "wait for", m.id); err != nil {
		return err
	}
	s := m.s
	s.mu.Lock()
	var freed <-chan struct{}
	if sl := s.slots[m.id]; sl != nil {
		freed = sl.freed
	}
	s.mu.Unlock()
	return s.sleep(ctx, d, freed)
}

// ReleaseLock releases the lock, in one round trip. It is bounded by the
// Session's release timeout, not by ctx's cancellation or deadline, so a
// deferred ReleaseLock works after the caller's context ended. It returns
// an error wrapping the lease's cause (ErrLeaseLost) if the lease ended
// before the release: the work under it may have overlapped another
// holder's. Either way the Mutex holds nothing afterwards. With no lease
// it returns an error wrapping ErrNotHeld, after releasing the lock if a
// failed AcquireLock may have left it this Session's (a read of its term,
// then a release of that term only).
func (m *Mutex) ReleaseLock(ctx context.Context) error {
	if err := checkContext(ctx, "release", m.id); err != nil {
		return err // the lease, if any, stays held
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.lease
	if l == nil {
		if err := m.s.releaseMaybe(ctx, m.id); err != nil {
			return err // names the lock already
		}
		return fmt.Errorf("release %q: %w", m.id, ErrNotHeld)
	}
	m.lease = nil
	cause := context.Cause(l.ctx)
	if cause == nil && l.Remaining() == 0 {
		cause = ErrLeaseLost
	}
	err := m.s.ReleaseLocks(ctx, l)
	switch {
	case cause != nil && isLoss(cause):
		return fmt.Errorf("release %q: lease ended before the release: %w", m.id, cause)
	case err != nil:
		return err // names the lock already
	}
	return nil
}

// checkContext returns an error wrapping ErrInvalidArgument if ctx is nil:
// the calls of a Locker, a Session, a Mutex, a Semaphore and a Lease check
// it first (lockID "" for a call of many locks or none),
// so that a nil context is an error naming the call, never a panic.
func checkContext(ctx context.Context, call, lockID string) error {
	switch {
	case ctx != nil:
		return nil
	case lockID == "": // a call of many locks, or of none
		return fmt.Errorf("%s: %w: nil context", call, ErrInvalidArgument)
	}
	return fmt.Errorf("%s %q: %w: nil context", call, lockID, ErrInvalidArgument)
}
