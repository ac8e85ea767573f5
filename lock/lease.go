package lock

import (
	"context"
	"fmt"
	"time"

	"github.com/mongolock/mongolock/internal/planted"
)

// Lease is a lock held by a Session, which keeps it alive until it is
// released or lost. Its end is observable: Done is closed and Err tells
// the cause — ErrLeaseLost a safety margin before anyone else could take
// the lock over, ErrSessionClosed, or ErrNotHeld once released.
type Lease struct {
	s      *Session
	grant  Grant
	ctx    context.Context // cancelled, with the cause, when the lease ends
	cancel context.CancelCauseFunc

	// Guarded by s.mu.
	lastSent   time.Time // sending of the last successful acquire or renew
	trustUntil time.Time
	bootUntil  bootReading // trustUntil on the boot clock (elapsed.go)
	ended      bool
	releasing  bool
}

// newLease returns the lease g granted; boot is the boot clock read
// before g's command was sent.
func (s *Session) newLease(g Grant, boot bootReading) *Lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	until := s.trustUntil(g)
	return &Lease{s: s, grant: g, ctx: ctx, cancel: cancel, lastSent: g.Sent, trustUntil: until,
		bootUntil: bootDeadline(until, g.Sent, boot)}
}

// endLocked ends l with cause: it is no longer kept alive. It reports
// whether l was still going.
func (s *Session) endLocked(l *Lease, cause error) bool {
	if l.ended {
		return false
	}
	l.ended = true
	l.cancel(cause)
	return true
}

// LockID returns the id of the lock.
func (l *Lease) LockID() string { return l.grant.LockID }

// KeeperID returns the keeper id of the Session holding it.
func (l *Lease) KeeperID() string { return l.grant.KeeperID }

// Fence returns the term's fencing token. It strictly increases for a lock
// id with every acquisition. Pass it to the resource you protect and have
// that reject writes carrying a smaller one.
func (l *Lease) Fence() uint64 { return l.grant.Fence }

// AcquiredAt returns the server's time when the term began.
func (l *Lease) AcquiredAt() time.Time { return l.grant.AcquiredAt }

// Deadline returns the instant, on the Session's clock, until which the
// lease is trusted unless renewed again; the keep-alive moves it on.
func (l *Lease) Deadline() time.Time {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.bootUntil.ok {
		// The boot clock may say less is left (a suspend hidden by a
		// step back of the wall clock, elapsed.go).
		now := l.s.clock.Now()
		if d := now.Add(max(0, l.s.leaseLeft(l, now))); d.Before(l.trustUntil) {
			return d
		}
	}
	return l.trustUntil
}

// Remaining returns how long the lease is still trusted, on the local
// monotonic clock, or on the wall clock or the boot clock if that says
// less (a suspended host's monotonic clock stops, see elapsed.go): zero
// once it ended or its deadline passed.
func (l *Lease) Remaining() time.Duration {
	l.s.mu.Lock()
	ended, until, boot := l.ended, l.trustUntil, l.bootUntil
	l.s.mu.Unlock()
	if ended {
		return 0
	}
	return max(0, l.s.leftOf(until, boot, l.s.clock.Now()))
}

// Done is closed when the lease ends.
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// Err returns nil while the lease is trusted, and then why it is not:
// ErrLeaseLost, ErrSessionClosed, or ErrNotHeld after a release. It reads
// the clock, so it turns to ErrLeaseLost at the deadline even if the
// keep-alive has not run yet.
func (l *Lease) Err() error {
	if err := context.Cause(l.ctx); err != nil {
		return err
	}
	if l.Remaining() == 0 && !planted.On(planted.TrustExpired) { // planted: trusted past its deadline
		return ErrLeaseLost
	}
	return nil
}

// Renew renews the lease now, in one round trip, and returns an error
// wrapping ErrLeaseLost if it was lost (it then ends), or was already
// not trusted. The keep-alive renews by itself; Renew is for a holder
// that wants proof of the lease before an irreversible step.
func (l *Lease) Renew(ctx context.Context) error {
	s := l.s
	if err := checkContext(ctx, "renew", l.grant.LockID); err != nil {
		return err
	}
	if err := l.Err(); err != nil {
		return fmt.Errorf("renew %q: %w", l.grant.LockID, err)
	}
	ctx, span := s.trace(ctx, OpRenew, 0, l.grant.Fence, []string{l.grant.LockID})
	boot := s.bootNow()
	sent := s.clock.Now()
	r, err := s.storeRenew(ctx, []string{l.grant.LockID})
	if err != nil {
		span.End(err)
		return fmt.Errorf("renew %q: %w", l.grant.LockID, err)
	}
	ev := s.applyRenewal([]*Lease{l}, r, sent, boot)
	for _, e := range ev {
		s.Emit(e)
		span.Event(e)
	}
	err = l.Err()
	span.End(err)
	if err != nil {
		return fmt.Errorf("renew %q: %w", l.grant.LockID, err)
	}
	return nil
}

// Abandon ends the lease with cause without releasing its lock: the
// keep-alive stops renewing it, so it expires a TTL after its last renewal,
// while the lock stays taken in the Session until ReleaseLock (or Close),
// so nobody in this process takes it beside work that would not stop. Use
// it for work that ignored its cancelled context.
func (l *Lease) Abandon(cause error) {
	l.s.mu.Lock()
	ended := l.s.endLocked(l, cause)
	l.s.mu.Unlock()
	if ended && l.s.observed() {
		l.s.Emit(Event{Kind: LeaseLost, LockID: l.grant.LockID, Fence: l.grant.Fence, Err: cause, Reason: "abandoned"})
	}
}

type leaseKey struct{}

// Bind returns a context derived from parent that is also cancelled when
// the lease ends, with the lease's cause (ErrLeaseLost when it was lost),
// and that carries the lease for LeaseFrom. Call cancel when done with it.
func (l *Lease) Bind(parent context.Context) (context.Context, context.CancelCauseFunc) {
	ctx, cancel := context.WithCancelCause(context.WithValue(parent, leaseKey{}, l))
	stop := context.AfterFunc(l.ctx, func() { cancel(context.Cause(l.ctx)) })
	return ctx, func(cause error) {
		stop()
		cancel(cause)
	}
}

// LeaseFrom returns the lease a context was bound to (Lease.Bind, Do).
func LeaseFrom(ctx context.Context) (*Lease, bool) {
	l, ok := ctx.Value(leaseKey{}).(*Lease)
	return l, ok
}

// FenceFrom returns the fencing token of the lease a context was bound to.
func FenceFrom(ctx context.Context) (uint64, bool) {
	if l, ok := LeaseFrom(ctx); ok {
		return l.Fence(), true
	}
	return 0, false
}
