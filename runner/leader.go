package runner

import (
	"bytes"
	"context"
	"fmt"

	"github.com/mongolock/mongolock/lock"
)

// Leader is the leader as a runner last observed it.
type Leader struct {
	// KeeperID is the leader's keeper id; "" when unknown or none.
	KeeperID string
	// Value is what the leader published with its term (WithValue): how to
	// reach it. Nil if it published none.
	Value []byte
	// Fence is the fencing token of the leader's term.
	Fence uint64
}

// LeaderInfo returns the leader as last observed, with its value and
// fence: this instance's own term while IsLeader; another's as read at the
// last failed campaign (within a retry period under Run; it may have
// changed since: lock.Locker.Watch follows every change); the zero Leader
// when unknown or none. No round trip.
func (r *LeaderAwareRunner) LeaderInfo() Leader {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.term != nil && !r.trustedLocked() {
		return Leader{}
	}
	return Leader{KeeperID: r.leader, Value: bytes.Clone(r.leaderValue), Fence: r.leaderFence}
}

// SetValue changes the value the runner publishes (WithValue): written at
// once, fenced, if this instance leads (one round trip), and with every
// later term. A write refused because the term ended gives an error
// wrapping lock.ErrStaleTerm or the lease's cause; the value still goes
// with the next term. More than lock.MaxValueSize bytes: an error wrapping
// lock.ErrValueTooLarge, and nothing changes.
func (r *LeaderAwareRunner) SetValue(ctx context.Context, v []byte) error {
	if err := checkArgs(fmt.Sprintf("set value of %q", r.lockID), ctx); err != nil {
		return err
	}
	if err := lock.CheckValue(v); err != nil {
		return fmt.Errorf("set value of %q: %w", r.lockID, err)
	}
	r.mu.Lock()
	r.value = bytes.Clone(v)
	var lease *lock.Lease
	if r.trustedLocked() {
		lease = r.term.lease
	}
	r.mu.Unlock()
	if lease == nil {
		return nil
	}
	if err := lease.SetValue(ctx, v); err != nil {
		return err
	}
	r.mu.Lock()
	if r.term != nil && r.term.lease == lease {
		r.leaderValue = bytes.Clone(v)
	}
	r.mu.Unlock()
	return nil
}

// publish writes the runner's value with a term just acquired, bounded by
// the renew deadline, and returns what it wrote (nil: none to write).
func (r *LeaderAwareRunner) publish(ctx context.Context, lease *lock.Lease) ([]byte, error) {
	r.mu.Lock()
	v := r.value
	r.mu.Unlock()
	if len(v) == 0 {
		return nil, nil
	}
	vctx, cancel := lock.WithTimeout(ctx, r.clock, r.session.Timings().RenewDeadline)
	defer cancel()
	if err := lease.SetValue(vctx, v); err != nil {
		return nil, fmt.Errorf("campaign for %q: publish the value: %w", r.lockID, err)
	}
	return v, nil
}

// republish writes the runner's value again if a SetValue changed it
// while the campaign wrote the one before (SetValue found no term to
// write to then). A failure leaves the term with what publish wrote; the
// next SetValue tries again.
func (r *LeaderAwareRunner) republish(ctx context.Context, lease *lock.Lease, written []byte) {
	r.mu.Lock()
	v := r.value
	r.mu.Unlock()
	if bytes.Equal(v, written) {
		return
	}
	vctx, cancel := lock.WithTimeout(ctx, r.clock, r.session.Timings().RenewDeadline)
	defer cancel()
	if lease.SetValue(vctx, v) != nil {
		return
	}
	r.mu.Lock()
	if r.term != nil && r.term.lease == lease {
		r.leaderValue = bytes.Clone(v)
	}
	r.mu.Unlock()
}
