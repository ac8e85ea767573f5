package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongoutil"
)

// Holder describes a lock document. Times are the server's.
type Holder struct {
	LockID   string
	KeeperID string
	// Token is the token of the Session holding the lease (empty for a
	// lease the Locker's own methods or an earlier version wrote): two
	// live leases with one KeeperID and different tokens are held by two
	// Sessions sharing a keeper id (KeeperIDShared).
	Token string
	Fence uint64
	// Value is what the term's holder published (SetValue), nil if
	// nothing: a new term starts without one.
	Value      []byte
	AcquiredAt time.Time
	RenewedAt  time.Time
	ExpiresAt  time.Time
	// Expired reports that the lease had lapsed by the server's clock when it
	// was read; the document stays until it is taken over, purged or removed
	// by the TTL monitor.
	Expired bool
	// Released reports a lock released by its last keeper (KeeperID is
	// empty then); RenewedAt is the time of the release.
	Released bool
	// ReadAt is the server's time when the document was read, as Expired
	// judged it: the lower bound of the Locker's estimate of the server's
	// clock (zero if it has none). ExpiresAt.Sub(ReadAt) is how long the
	// lease had left.
	ReadAt time.Time
	// Bad is set only by Watch, for a lock whose document could not be
	// read (it names the field; reported as Locks reports one): LockID is
	// then the only other field set. Every other method returns the
	// BadDocument as its error instead.
	Bad *BadDocument
}

// Holder returns who holds lockID. A free, released or expired lock gives
// an error wrapping ErrNotHeld; for a released or expired one, the Holder
// returned with it describes the last term (Released, Expired). A lock
// whose document is bad gives an error wrapping ErrBadDocument, naming
// the field (BadDocument; reported as for Locks).
func (l *Locker) Holder(ctx context.Context, lockID string) (Holder, error) {
	if err := checkContext(ctx, "holder", lockID); err != nil {
		return Holder{}, err
	}
	if err := ValidateID("lockID", lockID); err != nil {
		return Holder{}, err
	}
	if err := l.readClock(ctx); err != nil {
		return Holder{}, fmt.Errorf("holder of %q: %w", lockID, err)
	}
	var raw bson.Raw
	err := l.coll.FindOne(ctx, bson.D{{Key: fieldID, Value: lockID}}).Decode(&raw)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return Holder{}, fmt.Errorf("holder of %q: %w", lockID, ErrNotHeld)
	}
	if err != nil {
		return Holder{}, wrapErr(ctx, "holder of", lockID, err)
	}
	var doc lockDoc
	if bad := parseLockDoc(raw, &doc); bad != nil {
		return Holder{}, fmt.Errorf("holder of %q: %w", lockID, l.reportBad(bad, doc))
	}
	h := l.holderOf(doc)
	if h.Released {
		return h, fmt.Errorf("holder of %q: released at %s: %w", lockID, h.RenewedAt.Format(time.RFC3339Nano), ErrNotHeld)
	}
	if h.Expired {
		return h, fmt.Errorf("holder of %q: lease of %q expired at %s: %w", lockID, h.KeeperID, h.ExpiresAt.Format(time.RFC3339Nano), ErrNotHeld)
	}
	return h, nil
}

// Locks lists every held lock, expired ones included, ordered by id. It
// skips bad documents (BadDocument), and reports each to the Locker's
// WithBadDocuments function; so does LocksWithPrefix.
func (l *Locker) Locks(ctx context.Context) ([]Holder, error) {
	if err := checkContext(ctx, "list locks", ""); err != nil {
		return nil, err
	}
	if err := l.readClock(ctx); err != nil {
		return nil, fmt.Errorf("list locks: %w", err)
	}
	return l.list(ctx, bson.D{{Key: fieldKeeper, Value: bson.D{{Key: "$exists", Value: true}}}}, 0)
}

// LocksPage lists at most limit held locks (as Locks) whose ids begin
// with prefix ("": any) and sort after after ("": from the first),
// ordered by id: a page of Locks, read by a range of ids, which the _id
// index serves. The next page is the one after the last id returned.
func (l *Locker) LocksPage(ctx context.Context, prefix, after string, limit int) ([]Holder, error) {
	if err := checkContext(ctx, "list locks", ""); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, fmt.Errorf("%w: LocksPage: limit %d, want at least 1", ErrInvalidArgument, limit)
	}
	if err := l.readClock(ctx); err != nil {
		return nil, fmt.Errorf("list locks %q… after %q: %w", prefix, after, err)
	}
	id := bson.D{}
	switch {
	case after != "" && after >= prefix:
		id = append(id, bson.E{Key: "$gt", Value: after})
	case prefix != "":
		id = append(id, bson.E{Key: "$gte", Value: prefix})
	}
	if prefix != "" {
		id = append(id, bson.E{Key: "$lt", Value: prefix + "\U0010ffff"})
	}
	filter := bson.D{{Key: fieldKeeper, Value: bson.D{{Key: "$exists", Value: true}}}}
	if len(id) > 0 {
		filter = append(bson.D{{Key: fieldID, Value: id}}, filter...)
	}
	return l.list(ctx, filter, int64(limit))
}

// LocksWithPrefix lists the lock documents whose ids begin with prefix,
// held or released (Released), ordered by id: the last term of each, from
// its start (AcquiredAt) to its last renewal or its release (RenewedAt).
// It reads by a range of ids, which the _id index serves.
func (l *Locker) LocksWithPrefix(ctx context.Context, prefix string) ([]Holder, error) {
	if err := checkContext(ctx, "list locks", ""); err != nil {
		return nil, err
	}
	if prefix == "" {
		return nil, fmt.Errorf("%w: LocksWithPrefix: empty prefix", ErrInvalidArgument)
	}
	if err := l.readClock(ctx); err != nil {
		return nil, fmt.Errorf("list locks %q…: %w", prefix, err)
	}
	return l.list(ctx, bson.D{{Key: fieldID, Value: bson.D{{Key: "$gte", Value: prefix}, {Key: "$lt", Value: prefix + "\U0010ffff"}}}}, 0)
}

// holdersOf reads the lock documents of ids, in one batch: a semaphore's
// slots (slotReader).
func (l *Locker) holdersOf(ctx context.Context, ids []string) ([]Holder, error) {
	if err := l.readClock(ctx); err != nil {
		return nil, fmt.Errorf("read %d locks: %w", len(ids), err)
	}
	return l.list(ctx, bson.D{{Key: fieldID, Value: bson.D{{Key: "$in", Value: ids}}}}, int64(len(ids)))
}

// list reads the lock documents filter matches, ordered by id, at most
// limit of them (0: all; a limit is read in one batch, mongoutil.OneBatch).
func (l *Locker) list(ctx context.Context, filter bson.D, limit int64) ([]Holder, error) {
	opts := options.Find()
	if limit > 0 {
		opts = mongoutil.OneBatch(int(limit)).SetLimit(limit)
	}
	opts.SetSort(bson.D{{Key: fieldID, Value: 1}})
	cur, err := l.coll.Find(ctx, filter, opts)
	if err != nil {
		return nil, mongoutil.WrapErr(ctx, "list locks in "+lockColl(l.coll), err)
	}
	defer cur.Close(context.WithoutCancel(ctx))
	var out []Holder
	for cur.Next(ctx) {
		var d lockDoc
		if bad := parseLockDoc(cur.Current, &d); bad != nil {
			l.reportBad(bad, d)
			continue
		}
		out = append(out, l.holderOf(d))
	}
	if err := cur.Err(); err != nil {
		return nil, mongoutil.WrapErr(ctx, "list locks in "+lockColl(l.coll), err)
	}
	if out == nil {
		out = []Holder{}
	}
	return out, nil
}

func (l *Locker) holderOf(d lockDoc) Holder {
	ttl := time.Duration(d.TTL) * time.Millisecond
	if d.TTL <= 0 {
		ttl = l.cfg.ttl
	}
	h := Holder{
		LockID:     d.ID,
		KeeperID:   d.Keeper,
		Token:      d.Token,
		Fence:      d.fence(),
		Value:      d.Value,
		AcquiredAt: d.Acquired,
		RenewedAt:  d.Renewed,
		ExpiresAt:  d.Renewed.Add(ttl),
		Released:   d.Keeper == "",
	}
	if h.Released {
		h.ExpiresAt = h.RenewedAt
	}
	lo, _, ok := l.clock.bounds(l.cfg.clock.Now())
	if !ok {
		lo, _, ok = l.readOnly.bounds(l.cfg.clock.Now())
	}
	if ok {
		h.ReadAt, h.Expired = lo, h.ExpiresAt.Before(lo)
	}
	return h
}
