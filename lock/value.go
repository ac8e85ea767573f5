package lock

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/planted"
)

// MaxValueSize is the largest value a lease carries (SetValue), in bytes:
// enough for an address or a small descriptor, small enough that every
// read of a lock document stays cheap.
const MaxValueSize = 1024

// ErrValueTooLarge reports a value longer than MaxValueSize; nothing was
// written.
var ErrValueTooLarge = errors.New("lock: value too large")

// ErrStaleTerm reports a value written for a term that is no longer the
// lock's current one by its holder: the lease was released, lapsed or was
// taken over, so the write was refused and the stored value is unchanged.
var ErrStaleTerm = errors.New("lock: not the current term")

// CheckValue returns an error wrapping ErrValueTooLarge if v is longer
// than MaxValueSize.
func CheckValue(v []byte) error {
	if len(v) > MaxValueSize {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrValueTooLarge, len(v), MaxValueSize)
	}
	return nil
}

// SetValue publishes value with term t of lockID, held by keeperID:
// Holder and Watch return it until the term ends (every new term and every
// release clears it), or until the holder sets another (nil or empty
// clears it). It is one round trip (plus a clock reading when the
// estimate is old), and is fenced: the write's filter matches only the
// term whose fencing token is t.Fence, while keeperID still holds it and
// its lease cannot have expired by the server's clock, so a holder whose
// term ended can never overwrite its successor's value; it then gets an
// error wrapping ErrStaleTerm. t.Fence must be given (not 0). As the
// Locker's other methods, it acts for every Session of keeperID; a
// Session's Lease.SetValue writes for that Session's term only.
func (l *Locker) SetValue(ctx context.Context, keeperID string, t Term, value []byte) error {
	if err := checkContext(ctx, "set value of", t.LockID); err != nil {
		return err
	}
	return l.setValueAs(ctx, owner{kid: keeperID}, t, value)
}

// setValueAs is SetValue for o (valueStore).
func (l *Locker) setValueAs(ctx context.Context, o owner, t Term, value []byte) error {
	if err := validateMany(o.kid, []string{t.LockID}); err != nil {
		return err
	}
	if t.Fence == 0 {
		return fmt.Errorf("set value of %q: %w: no fencing token", t.LockID, ErrInvalidArgument)
	}
	if err := CheckValue(value); err != nil {
		return fmt.Errorf("set value of %q: %w", t.LockID, err)
	}
	if err := l.refreshClock(ctx); err != nil {
		return fmt.Errorf("set value of %q: %w", t.LockID, err)
	}
	_, hi, _ := l.clock.bounds(l.cfg.clock.Now())
	filter := append(bson.D{{Key: fieldID, Value: t.LockID}}, o.mine()...)
	filter = append(filter, fenceFilter(t.Fence)...)
	// As Renew: refuse a lease that may have lapsed, even if nobody took it.
	filter = append(filter, bson.E{Key: fieldRenewed, Value: bson.D{{Key: "$gte", Value: hi.Add(-l.cfg.ttl)}}})
	update := bson.D{{Key: "$unset", Value: bson.D{{Key: fieldValue, Value: ""}}}}
	if len(value) > 0 {
		update = bson.D{{Key: "$set", Value: bson.D{{Key: fieldValue, Value: bson.Binary{Data: value}}}}}
	}
	if planted.On(planted.StaleValue) { // planted: whoever holds it, whatever its term
		filter = bson.D{{Key: fieldID, Value: t.LockID}}
	}
	res, err := l.coll.UpdateOne(ctx, filter, update)
	if err != nil {
		l.failed(ctx)
		return wrapErr(ctx, "set value of", t.LockID, err)
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("set value of %q: fence %d of keeper %q: %w", t.LockID, t.Fence, o.kid, ErrStaleTerm)
	}
	return nil
}

// ValueStore is a Store that keeps the values of leases (*Locker, and
// locktest.Store): Lease.SetValue needs one.
type ValueStore interface {
	// SetValue publishes value with term t of a lock keeperID holds,
	// refusing it with ErrStaleTerm unless t is that lock's live term.
	SetValue(ctx context.Context, keeperID string, t Term, value []byte) error
}

// valueStore is a ValueStore that tells Sessions apart by their tokens
// (*Locker: owner), as tokenStore.
type valueStore interface {
	setValueAs(ctx context.Context, o owner, t Term, value []byte) error
}

var (
	_ ValueStore = (*Locker)(nil)
	_ valueStore = (*Locker)(nil)
)

// SetValue publishes value with this lease's term (Locker.SetValue): one
// fenced write, refused with an error wrapping ErrStaleTerm once the term
// is no longer this Session's, and with the lease's cause if it already
// ended here. A value longer than MaxValueSize gives an error wrapping
// ErrValueTooLarge; nothing is written then. The store must keep values
// (ValueStore: *Locker and locktest.Store do).
func (l *Lease) SetValue(ctx context.Context, value []byte) error {
	if err := checkContext(ctx, "set value of", l.LockID()); err != nil {
		return err
	}
	if err := CheckValue(value); err != nil {
		return fmt.Errorf("set value of %q: %w", l.LockID(), err)
	}
	if err := l.Err(); err != nil {
		return fmt.Errorf("set value of %q fence %d: %w", l.LockID(), l.Fence(), err)
	}
	t := Term{LockID: l.LockID(), Fence: l.Fence()}
	switch vs := l.s.store.(type) {
	case valueStore:
		return vs.setValueAs(ctx, l.s.owner, t, value)
	case ValueStore:
		return vs.SetValue(ctx, l.s.cfg.keeperID, t, value)
	}
	return fmt.Errorf("set value of %q: %w: the store keeps no values (not a lock.ValueStore)", l.LockID(), ErrInvalidArgument)
}
