package lock

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"

	"github.com/mongolock/mongolock/internal/ctxlock"
	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/internal/planted"
)

// Field names of a lock document.
const (
	fieldID       = "_id"
	fieldKeeper   = "kid"
	fieldToken    = "tok"   // random per Session: tells apart Sessions with one keeper id
	fieldRenewed  = "ts"    // server time of the last acquire or renew; the TTL index is on it
	fieldAcquired = "at"    // server time the current term began
	fieldEpoch    = "epoch" // high half of the fence: never decreases for a lock id
	fieldSeq      = "seq"   // low half of the fence: +1 with every term
	fieldTTL      = "ttl"   // lease length in milliseconds of the keeper that wrote it
	fieldNonce    = "rn"    // random tag of the last renewal or batched acquisition
	fieldValue    = "val"   // the holder's value (value.go); cleared with every new term and release
)

// A lock document without a keeper (kid) is a released lock: kept, with
// its fence, until the TTL index removes it Retention after its last
// renewal, so that the next term's fence is larger.
type lockDoc struct {
	ID     string `bson:"_id"`
	Keeper string `bson:"kid"`
	// Token is the holding Session's (owner); empty for a holder that
	// called the Locker directly, and in documents of earlier versions.
	Token    string    `bson:"tok,omitempty"`
	Renewed  time.Time `bson:"ts"`
	Acquired time.Time `bson:"at"`
	Epoch    int64     `bson:"epoch"`
	// Seq is nil in a document written by an earlier version, whose fence
	// is a server timestamp (Legacy): such a document is never taken over
	// or reused, so that no fence goes below it; EnsureIndexes converts it.
	Seq    *int64         `bson:"seq"`
	Legacy bson.Timestamp `bson:"fence"`
	TTL    int64          `bson:"ttl"`
	Nonce  string         `bson:"rn"`
	// Value is what the term's holder published (SetValue); nil if none.
	Value []byte `bson:"val,omitempty"`

	// Of a bad document (parseLockDoc): its _id as stored, and whether its
	// keeper or its fence could not be read.
	rawID               bson.RawValue `bson:"-"`
	badKeeper, badFence bool          `bson:"-"`
}

// current matches documents this version wrote (lockDoc.Seq).
var current = bson.E{Key: fieldSeq, Value: bson.D{{Key: "$exists", Value: true}}}

// owner is who holds a lease in the store: a keeper id and, for a
// Session, the Session's token. A Session's lease counts as its own only
// if both match, so two Sessions given one keeper id (two replicas with
// WithKeeperID("billing"), or a process restarted with its old id before
// its old leases lapsed) exclude each other. A Locker's exported methods
// act as the keeper id itself (an empty token), an operator's tool: they
// own every lease of that keeper id, whatever its token, as do earlier
// versions, which write none.
type owner struct{ kid, tok string }

// mine matches the lock documents o holds.
func (o owner) mine() bson.D {
	if o.tok == "" {
		return bson.D{{Key: fieldKeeper, Value: o.kid}}
	}
	return bson.D{{Key: fieldKeeper, Value: o.kid}, {Key: fieldToken, Value: o.tok}}
}

// owns reports whether o holds d.
func (o owner) owns(d lockDoc) bool { return d.Keeper == o.kid && (o.tok == "" || d.Token == o.tok) }

// shares reports whether d is held by another holder with o's keeper id.
func (o owner) shares(d lockDoc) bool { return d.Keeper == o.kid && !o.owns(d) }

// fence is the document's fencing token: epoch in the high 32 bits, plus
// seq. Every term increments seq and never lowers epoch, so the token
// strictly increases for as long as the document exists; a document made
// again after the TTL index removed the old one gets an epoch (the
// server's time in seconds) at least Retention later.
func (d lockDoc) fence() uint64 {
	if d.Seq == nil {
		return uint64(d.Legacy.T)<<32 | uint64(d.Legacy.I)
	}
	return uint64(d.Epoch)<<32 + uint64(*d.Seq)
}

// fenceFilter matches the term whose fence is f. Fences strictly increase
// for a document, so only one of its terms has f; but seq passes 2^32 after
// four billion terms and then adds to the epoch's bits, so f splits into
// epoch and seq in more than one way. Two are tried: exact for the first
// 2^33 terms of a document (a lock id taken 8.6 billion times without a
// pause of Retention).
func fenceFilter(f uint64) bson.D {
	e, s := int64(f>>32), int64(f&(1<<32-1))
	either := bson.A{bson.D{{Key: fieldEpoch, Value: e}, {Key: fieldSeq, Value: s}}}
	if e > 0 {
		either = append(either, bson.D{{Key: fieldEpoch, Value: e - 1}, {Key: fieldSeq, Value: s + 1<<32}})
	}
	return bson.D{{Key: "$or", Value: either}}
}

// Locker acquires, renews and releases leases stored in one collection.
// It is safe for concurrent use.
type Locker struct {
	coll   *mongo.Collection
	renew  *mongo.Collection // coll, or its twin on the keep-alive's client (WithKeepAliveDatabase)
	cfg    config
	clock  serverClock
	deploy deployment
	hints  ttlHints
	// readOnly estimates the server's clock from hello when the clock
	// document cannot be written (readClock): for Holder only.
	readOnly serverClock
	seen     atomic.Uint64 // topology changes (WithTopologyWatch) the estimate knows of
	logBad   badLog
	watches  watchSet // the shared readers of Watch (watch.go)
}

// Grant is what the store reports of a lock it granted: one term of one
// keeper. A Session turns grants into Leases it keeps alive.
type Grant struct {
	LockID   string
	KeeperID string
	// Fence strictly increases for a lock id with every acquisition, across
	// releases, expiries, failovers and server restarts (limits: the
	// package documentation). Pass it to the resource you protect and have
	// it reject writes carrying a smaller one.
	Fence uint64
	// AcquiredAt is the server's time when this term began.
	AcquiredAt time.Time
	// Deadline is the instant, on the Locker's clock (WithClock), after which the holder
	// must stop trusting the lease unless it renewed it: nobody can take the
	// lock over before then.
	Deadline time.Time
	// Sent is the instant, on the Locker's clock, the write that won the
	// term was sent; Deadline counts from it.
	Sent time.Time
}

// Renewal is the outcome of Renew.
type Renewal struct {
	// Held lists the locks that were renewed; Lost those not held (any more)
	// by the keeper. Every requested id is in exactly one of them.
	Held, Lost []string
	// Deadline is the new local deadline of every lock in Held.
	Deadline time.Time
}

// New returns a Locker on collection DefaultCollection (or WithCollection) of db.
func New(db *mongo.Database, opts ...Option) (*Locker, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil database", ErrInvalidOption)
	}
	cfg := config{
		collection:   DefaultCollection,
		ttl:          DefaultTTL,
		wc:           DefaultWriteConcern(),
		log:          zerolog.Nop(),
		clock:        clockwork.NewRealClock(),
		clockRefresh: DefaultClockRefresh,
		watchPeriod:  DefaultWatchPeriod,
	}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	// Reads decide who holds what (Renew's read of which leases it
	// renewed, Holder): the primary's answer, whatever the client's read
	// preference.
	copts := options.Collection().SetWriteConcern(cfg.wc).SetReadPreference(readpref.Primary())
	coll := db.Collection(cfg.collection, copts)
	renew := coll
	if k := cfg.keepAlive; k != nil {
		if k.Name() != db.Name() {
			return nil, fmt.Errorf("%w: WithKeepAliveDatabase: database %q is not the Locker's database %q", ErrInvalidOption, k.Name(), db.Name())
		}
		renew = k.Collection(cfg.collection, copts)
	}
	return &Locker{coll: coll, renew: renew, cfg: cfg, deploy: deployment{probing: ctxlock.New()}}, nil
}

// ServerTime returns the interval the server's clock is in now, by the
// Locker's estimate (on its clock, WithClock), and ok=false before its
// first reading. Its width is the estimate's uncertainty: the round trip of
// the reading that bounds it, plus drift since; it comes out of the safety
// margins.
func (l *Locker) ServerTime() (lo, hi time.Time, ok bool) {
	return l.clock.bounds(l.cfg.clock.Now())
}

// TTL returns the lease length.
func (l *Locker) TTL() time.Duration { return l.cfg.ttl }

// Clock returns the local clock lease deadlines are instants of
// (WithClock).
func (l *Locker) Clock() clockwork.Clock { return l.cfg.clock }

// Collection returns the collection holding the lock documents.
func (l *Locker) Collection() *mongo.Collection { return l.coll }

// takeable matches the lock documents keeperID may take, given lo, a
// lower bound of the server's time when it evaluates the filter: its own,
// released ones, and leases that lapsed by the server's clock. A lease
// lapses its own TTL after its last renewal, whatever the TTL of whoever
// takes it over, but a filter without $expr cannot add a field to a date:
// each TTL needs a clause. One matches leases no longer than this
// Locker's TTL once that TTL has passed (late for shorter ones); another,
// hint, names the TTL (ms) a read found the lease has (0 for none), which
// matches that lease as soon as its own TTL has passed.
func (l *Locker) takeable(o owner, lo time.Time, hint int64) bson.A {
	mine := l.ttlMS()
	or := bson.A{
		o.mine(),
		bson.D{{Key: fieldKeeper, Value: bson.D{{Key: "$exists", Value: false}}}},
		// No server time (missing, or not a date): no lease.
		bson.D{{Key: fieldRenewed, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gte", Value: bson.DateTime(math.MinInt64)}}}}}},
		bson.D{
			{Key: fieldRenewed, Value: bson.D{{Key: "$lt", Value: lapsedBefore(lo, mine)}}},
			// No TTL this version writes (none, not a number, longer than
			// MaxTTL): it lapses this Locker's TTL after its renewal.
			{Key: "$or", Value: bson.A{
				bson.D{{Key: fieldTTL, Value: bson.D{{Key: "$lte", Value: mine}}}},
				bson.D{{Key: fieldTTL, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gte", Value: int64(math.MinInt64)}}}}}},
				bson.D{{Key: fieldTTL, Value: bson.D{{Key: "$gt", Value: ttlMillis(MaxTTL)}}}},
			}},
		},
	}
	if hint > 0 && hint != mine {
		or = append(or, bson.D{
			{Key: fieldTTL, Value: hint},
			{Key: fieldRenewed, Value: bson.D{{Key: "$lt", Value: lapsedBefore(lo, hint)}}},
		})
	}
	return or
}

// lapsedBefore is the renewal time before which a lease of ttlMS has
// lapsed, given lo: in the server's milliseconds, so that takeable and
// takeableDoc draw the line at the same instant.
func lapsedBefore(lo time.Time, ttlMS int64) bson.DateTime {
	return bson.NewDateTimeFromTime(lo.Add(-time.Duration(ttlMS) * time.Millisecond))
}

// takeableDoc reports whether takeable(o, lo, hint) matches d.
func (l *Locker) takeableDoc(d lockDoc, o owner, lo time.Time, hint int64) bool {
	mine := l.ttlMS()
	switch {
	case d.Seq == nil: // legacy: the filter requires a seq
		return false
	case o.owns(d):
		return true
	case d.Keeper == "":
		return true
	case d.Renewed.IsZero():
		return true // no server time: no lease
	}
	renewed := bson.NewDateTimeFromTime(d.Renewed)
	return d.TTL <= mine && renewed < lapsedBefore(lo, mine) ||
		hint > 0 && hint != mine && d.TTL == hint && renewed < lapsedBefore(lo, hint)
}

// ttlMS is the TTL stored in lock documents and compared in takeovers:
// whole milliseconds, rounded up, so a keeper whose TTL is shorter by a
// fraction of a millisecond never counts as having the longer TTL.
func (l *Locker) ttlMS() int64 { return ttlMillis(l.cfg.ttl) }

func ttlMillis(ttl time.Duration) int64 {
	return int64((ttl + time.Millisecond - 1) / time.Millisecond)
}

// safety is how much earlier than TTL after sending a holder stops trusting
// its lease: the server stores times in milliseconds, and clocks drift.
func (l *Locker) safety() time.Duration {
	return time.Millisecond + driftOf(l.cfg.ttl)
}

// acquireOne tries to take lockID for keeperID in one round trip (plus a
// clock reading, at most once per clock refresh interval
// (WithClockRefresh)): a findAndModify upsert, which succeeds if the lock
// is free, already held by keeperID, or its lease has expired by the
// server's clock. Another keeper's live lease gives ok=false and a nil
// error; then, at most once per that lease's TTL, a read learns how long
// it is, for the next attempt to take it over when it lapses, and whether
// its holder has o's keeper id (shared).
func (l *Locker) acquireOne(ctx context.Context, o owner, lockID string) (g Grant, ok, shared bool, err error) {
	if err := l.refreshClockFor(ctx, true); err != nil {
		return Grant{}, false, false, fmt.Errorf("acquire %q: %w", lockID, err)
	}
	sent := l.cfg.clock.Now()
	lo, _, _ := l.clock.bounds(sent)
	filter := l.acquireFilter(lockID, o, lo, l.hints.get(lockID))
	update := acquireUpdate(o, l.ttlMS(), "", lo)
	opts := options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)
	var raw bson.Raw
	err = l.coll.FindOneAndUpdate(ctx, filter, update, opts).Decode(&raw)
	recv := l.cfg.clock.Now()
	if mongoutil.IsDuplicateKey(err) {
		return l.refusedOne(ctx, o, lockID, lo, recv)
	}
	if err != nil {
		l.failed(ctx)
		return Grant{}, false, false, wrapErr(ctx, "acquire", lockID, err)
	}
	var doc lockDoc
	if bad := parseLockDoc(raw, &doc); bad != nil {
		// Taken, and still bad (a fractional seq, plus one): its fence
		// is no fence. Written again as a bad document is.
		l.reportBad(bad, doc)
		g, ok, err := l.takeOverBadGrant(ctx, o, raw, doc, lo)
		return g, ok, false, err
	}
	switch {
	case !o.owns(doc):
		// Cannot happen on a server with document-level atomicity.
		return Grant{}, false, false, fmt.Errorf("acquire %q: server returned a lock held by %q", lockID, doc.Keeper)
	}
	l.hints.forget(lockID)
	return l.newLease(doc, sent, recv), true, false, nil
}

// newLease is the grant d records, won by a write sent at sent whose
// answer came by recv; d's renewal time is a reading of the server's clock.
func (l *Locker) newLease(d lockDoc, sent, recv time.Time) Grant {
	l.clock.observe(d.Renewed, sent, recv)
	return Grant{
		Sent:       sent,
		LockID:     d.ID,
		KeeperID:   d.Keeper,
		Fence:      d.fence(),
		AcquiredAt: d.Acquired,
		Deadline:   sent.Add(l.cfg.ttl - l.safety()),
	}
}

// acquireFilter matches lockID if keeperID may take it (takeable). When
// nothing matches, an upsert with it inserts a document with the same id,
// which fails with a duplicate key error if the lock exists (it is held by
// another keeper) and begins a term if it does not.
func (l *Locker) acquireFilter(lockID string, o owner, lo time.Time, hint int64) bson.D {
	return bson.D{
		{Key: fieldID, Value: lockID},
		// A fence this version can add to (a legacy document has no seq:
		// it waits for UpgradeDocuments); a bad one is taken over by
		// takeOverBad, once a read found it bad.
		// In an $and: FerretDB 1.x copies a top-level operator document
		// into the document an upsert inserts.
		{Key: "$and", Value: bson.A{
			bson.D{{Key: fieldSeq, Value: bson.D{{Key: "$gte", Value: int64(0)}, {Key: "$lte", Value: int64(maxSeq)}}}},
			bson.D{{Key: fieldEpoch, Value: bson.D{{Key: "$gte", Value: int64(0)}, {Key: "$lte", Value: int64(maxEpoch)}}}},
		}},
		{Key: "$or", Value: l.takeable(o, lo, hint)},
	}
}

// acquireUpdate begins a term of keeperID, with a new fencing token and,
// unless it is empty, a nonce telling the write that began it. The token
// takes no value the server issues: $inc makes seq one more than the last
// term's, and $max keeps epoch at least lo in seconds, so tokens increase
// on servers whose timestamps are not a unique tick (FerretDB 2.x) and on a
// standalone restarted with its clock set back.
func acquireUpdate(o owner, ttlMS int64, nonce string, lo time.Time) bson.D {
	set := bson.D{{Key: fieldKeeper, Value: o.kid}, {Key: fieldTTL, Value: ttlMS}}
	if o.tok != "" {
		set = append(set, bson.E{Key: fieldToken, Value: o.tok})
	}
	if nonce != "" {
		set = append(set, bson.E{Key: fieldNonce, Value: nonce})
	}
	// The last term's value is not this term's (value.go).
	var unset bson.D
	if !planted.On(planted.KeepValue) { // planted: the value stays
		unset = append(unset, bson.E{Key: fieldValue, Value: ""})
	}
	if o.tok == "" {
		// A lease taken over from a Session is not that Session's any more.
		unset = append(unset, bson.E{Key: fieldToken, Value: ""})
	}
	update := bson.D{{Key: "$set", Value: set}}
	if len(unset) > 0 {
		update = append(update, bson.E{Key: "$unset", Value: unset})
	}
	return append(update,
		bson.E{Key: "$currentDate", Value: bson.D{
			{Key: fieldRenewed, Value: true},
			{Key: fieldAcquired, Value: true},
		}},
		bson.E{Key: "$max", Value: bson.D{{Key: fieldEpoch, Value: max(lo.Unix(), 0)}}},
		bson.E{Key: "$inc", Value: bson.D{{Key: fieldSeq, Value: seqStep()}}},
	)
}

// seqStep is what a new term adds to seq: 1 (-1 with a planted bug).
func seqStep() int64 {
	if planted.On(planted.SmallerFence) {
		return -1
	}
	return 1
}

// Acquisition is the outcome of AcquireLocks.
type Acquisition struct {
	// Granted are the locks acquired, in the order requested.
	Granted []Grant
	// Refused lists the locks other holders hold.
	Refused []string
	// Shared lists those of Refused found held by another holder with the
	// same keeper id: another Session given that id, or a lease written
	// without a Session's token (by an earlier version, or a direct call
	// of the Locker), when a Session asked. A lock refused without a read
	// of its holder (one lock refused again within its lease) is not
	// listed.
	Shared []string
}

// AcquireLocks tries to take each of lockIDs for keeperID. A lock is taken
// if it is free, released, already held by keeperID, or its lease has
// expired by the server's clock (its own TTL after its last renewal); every
// success begins a new term with a new fencing token. Another keeper's live
// lease refuses it. For one lock it is one findAndModify upsert (plus, when
// refused, a read of the holder's TTL at most once per lease length); for
// more, on MongoDB two round trips however many there are: a write of them
// all, then a read of which it took and their fencing tokens. Either adds a
// clock reading when the estimate is old (refreshClock). On FerretDB 1.24, whose bulk writes stop at the
// first lock held by another keeper, the locks after it cost another two,
// and so on for each write that races with another keeper's. The write
// takes the locks in the order of their ids, whatever the order asked, so
// that two calls never wait for each other's locks (FerretDB 2.x's
// PostgreSQL locks the rows of a bulk write in its order, and breaks a
// cycle by rolling one write back). A write FerretDB 2.x rolled back to
// break a deadlock with another command is sent again after a pause (10 ms,
// doubling up to 100 ms), five times at most in a row. Each lease's
// Deadline is timed from the sending of the write that won it.
//
// Every requested id ends up in exactly one of Granted and Refused unless
// it returns an error; then Granted holds the locks known to be acquired,
// and any other may or may not have been: the write may have happened, in
// which case the lock stays held by keeperID until it expires or is
// released. It is the store operation Sessions use; users take locks
// through a Session's Mutex.
func (l *Locker) AcquireLocks(ctx context.Context, keeperID string, lockIDs ...string) (Acquisition, error) {
	if err := checkContext(ctx, "acquire locks", ""); err != nil {
		return Acquisition{}, err
	}
	return l.acquireAs(ctx, owner{kid: keeperID}, lockIDs)
}

// acquireAs is AcquireLocks for o (a Session's token, tokenStore).
func (l *Locker) acquireAs(ctx context.Context, o owner, lockIDs []string) (Acquisition, error) {
	keeperID := o.kid
	if err := validateMany(keeperID, lockIDs); err != nil {
		return Acquisition{}, err
	}
	ids := dedup(lockIDs)
	switch len(ids) {
	case 0:
		return Acquisition{}, nil
	case 1:
		g, ok, shared, err := l.acquireOne(ctx, o, ids[0])
		switch {
		case err != nil:
			return Acquisition{}, err
		case shared:
			return Acquisition{Refused: ids, Shared: ids}, nil
		case !ok:
			return Acquisition{Refused: ids}, nil
		}
		return Acquisition{Granted: []Grant{g}}, nil
	}
	if err := l.refreshClockFor(ctx, true); err != nil {
		return Acquisition{}, fmt.Errorf("acquire %s: %w", idsDesc(keeperID, ids), err)
	}
	leases := make(map[string]Grant, len(ids))
	refused, shared := make(map[string]bool), make(map[string]bool)
	result := func() Acquisition {
		var a Acquisition
		for _, id := range ids {
			if lease, ok := leases[id]; ok {
				a.Granted = append(a.Granted, lease)
			} else if refused[id] {
				a.Refused = append(a.Refused, id)
				if shared[id] {
					a.Shared = append(a.Shared, id)
				}
			}
		}
		return a
	}
	// One pass settles every lock on MongoDB. FerretDB 1.24 ends an
	// unordered bulk write at its first error without reporting the
	// writes it skipped; the read finds them unsettled, and the next pass
	// sends them again. Each pass settles at least the lock that failed.
	// A pass that settles none (every lock changed between its write and
	// its read) ends the call with an error rather than looping, unless
	// a deadlock rolled its writes back: that pass is sent again after a
	// pause, deadlockAttempts times at most.
	todo := slices.Clone(ids)
	for deadlocks := 0; len(todo) > 0; {
		n, err := l.acquirePass(ctx, o, todo, leases, refused, shared)
		if mongoutil.IsDeadlock(err) && deadlocks+1 < deadlockAttempts {
			deadlocks++
			l.cfg.log.Debug().Str("keeper", keeperID).Int("locks", len(todo)).Int("attempt", deadlocks).Err(err).Msg("deadlock, retrying")
			if werr := deadlockBackoff.Wait(ctx, l.cfg.clock, deadlocks); werr != nil {
				return result(), mongoutil.WrapErr(ctx, "acquire "+idsDesc(keeperID, ids), err)
			}
			continue
		}
		deadlocks = 0
		if err != nil {
			return result(), mongoutil.WrapErr(ctx, "acquire "+idsDesc(keeperID, ids), err)
		}
		if n == 0 {
			return result(), fmt.Errorf("acquire %s: %d locks neither acquired nor refused", idsDesc(keeperID, ids), len(todo))
		}
		todo = slices.DeleteFunc(todo, func(id string) bool {
			_, ok := leases[id]
			return ok || refused[id]
		})
	}
	return result(), nil
}

// deadlockAttempts bounds how many passes in a row AcquireLocks sends
// when each is rolled back to break a deadlock (FerretDB 2.x), and
// deadlockBackoff is the pause between them: long enough for the write
// that won to commit.
const deadlockAttempts = 5

var deadlockBackoff = Backoff{First: 10 * time.Millisecond, Max: 100 * time.Millisecond}

// acquirePass sends one write taking ids, unordered, in the order of the
// ids, then reads their documents. It adds to leases those the write took
// and to refused those other keepers hold, and returns how many it added.
// The read, not the write's errors, tells which: FerretDB 1.24 reports the
// wrong index for a failed write of an unordered bulk. A pass that settles
// nothing because a deadlock rolled its writes back returns the server's
// error (mongoutil.IsDeadlock).
func (l *Locker) acquirePass(ctx context.Context, o owner, ids []string, leases map[string]Grant, refused, shared map[string]bool) (int, error) {
	nonce := newNonce()
	sent := l.cfg.clock.Now()
	lo, _, _ := l.clock.bounds(sent)
	update := acquireUpdate(o, l.ttlMS(), nonce, lo)
	// One order for every call's writes, so that no two wait for each
	// other's rows (FerretDB 2.x locks them in the order written).
	ids = slices.Sorted(slices.Values(ids))
	models := make([]mongo.WriteModel, len(ids))
	hint := make(map[string]int64, len(ids))
	for i, id := range ids {
		hint[id] = l.hints.get(id)
		models[i] = mongo.NewUpdateOneModel().SetFilter(l.acquireFilter(id, o, lo, hint[id])).SetUpdate(update).SetUpsert(true)
	}
	_, werr := l.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	// Duplicate keys: locks held by other keepers. Deadlocks (FerretDB
	// 2.x): writes rolled back, the others applied. The read tells which.
	if werr != nil && !mongoutil.OnlyWriteErrors(werr, mongoutil.IsDuplicateKey, mongoutil.IsDeadlock) {
		if !mongoutil.IsDeadlock(werr) { // which says nothing of the primary
			l.failed(ctx)
		}
		return 0, werr
	}
	cur, err := l.coll.Find(ctx, bson.D{{Key: fieldID, Value: bson.D{{Key: "$in", Value: ids}}}}, mongoutil.OneBatch(len(ids)))
	if err != nil {
		l.failed(ctx)
		return 0, err
	}
	var raws []bson.Raw
	if err := cur.All(ctx, &raws); err != nil {
		l.failed(ctx)
		return 0, err
	}
	recv := l.cfg.clock.Now()
	added := 0
	for _, raw := range raws {
		var d lockDoc
		if bad := parseLockDoc(raw, &d); bad != nil {
			// Whatever this pass's write did to it, its fence is no
			// fence: taken over as a bad document, or refused.
			l.reportBad(bad, d)
			if !l.badTakeable(d, o, lo) {
				l.hints.learn(d.ID, d.TTL, l.ttlMS(), recv)
				refused[d.ID] = true
				added++
				continue
			}
			g, ok, err := l.takeOverBadGrant(ctx, o, raw, d, lo)
			if err != nil {
				return added, err
			}
			if ok {
				leases[d.ID] = g
				added++
			}
			continue
		}
		switch {
		case o.owns(d) && d.Nonce == nonce:
			l.hints.forget(d.ID)
			leases[d.ID] = l.newLease(d, sent, recv)
		case !l.takeableDoc(d, o, lo, hint[d.ID]):
			// What the write's filter refused, or what another keeper
			// took since. The next attempt may take it over once it
			// lapses, however long its lease.
			l.hints.learn(d.ID, d.TTL, l.ttlMS(), recv)
			refused[d.ID] = true
			if o.shares(d) {
				shared[d.ID] = true
			}
		default:
			// Not written (FerretDB stops at the first failed write), or
			// changed since: sent again.
			continue
		}
		added++
	}
	if added == 0 && mongoutil.IsDeadlock(werr) {
		return 0, werr
	}
	return added, nil
}

// Renew extends the leases keeperID holds on lockIDs, in one round trip when
// all are still held (two when some are not, to tell which, and always two
// through mongos; plus a clock reading, as for AcquireLocks, when the
// estimate is old). It never re-creates
// a lease that was released or taken over, and refuses one that may have
// expired when it was sent; a lease that expires while the request is in
// flight may still be extended, which is safe because no other keeper can
// have taken it. Taking a lapsed lease again needs AcquireLocks, which
// issues a new fencing token. Renew keeps fencing tokens unchanged. Concurrent
// Renew calls by one keeper for the same locks may report each other's
// renewals as lost, and so may a Renew running alongside that keeper's
// AcquireLocks of the same locks.
func (l *Locker) Renew(ctx context.Context, keeperID string, lockIDs ...string) (Renewal, error) {
	if err := checkContext(ctx, "renew", ""); err != nil {
		return Renewal{}, err
	}
	return l.renewAs(ctx, owner{kid: keeperID}, lockIDs)
}

// renewAs is Renew for o (tokenStore).
func (l *Locker) renewAs(ctx context.Context, o owner, lockIDs []string) (Renewal, error) {
	keeperID := o.kid
	if err := validateMany(keeperID, lockIDs); err != nil {
		return Renewal{}, err
	}
	ids := dedup(lockIDs)
	if len(ids) == 0 {
		return Renewal{}, nil
	}
	if err := l.refreshClockOn(ctx, l.renew, false); err != nil {
		return Renewal{}, fmt.Errorf("renew: %w", err)
	}
	nonce := newNonce()
	sent := l.cfg.clock.Now()
	_, hi, _ := l.clock.bounds(sent)
	filter := append(bson.D{
		{Key: fieldID, Value: bson.D{{Key: "$in", Value: ids}}}},
		append(o.mine(),
			// hi is an upper bound of the server's time: refuse any lease that
			// might have expired already, even if nobody took it.
			bson.E{Key: fieldRenewed, Value: bson.D{{Key: "$gte", Value: hi.Add(-l.cfg.ttl)}}})...)
	update := bson.D{
		{Key: "$set", Value: bson.D{{Key: fieldNonce, Value: nonce}, {Key: fieldTTL, Value: l.ttlMS()}}},
		{Key: "$currentDate", Value: bson.D{{Key: fieldRenewed, Value: true}}},
	}
	res, err := l.renew.UpdateMany(ctx, filter, update)
	if err != nil {
		l.failed(ctx)
		return Renewal{}, mongoutil.WrapErr(ctx, "renew "+idsDesc(keeperID, ids), err)
	}
	r := Renewal{Deadline: sent.Add(l.cfg.ttl - l.safety())}
	// Behind mongos an update of several documents can count orphaned
	// copies a chunk migration left (SERVER-20361), so there the count
	// proves nothing and the read below decides.
	if int(res.MatchedCount) == len(ids) && !l.deploy.sharded() {
		r.Held = ids
		return r, nil
	}
	// Some were not renewed: find out which by the nonce this call wrote.
	cur, err := l.renew.Find(ctx, append(bson.D{
		{Key: fieldID, Value: bson.D{{Key: "$in", Value: ids}}},
		{Key: fieldNonce, Value: nonce},
	}, o.mine()...), mongoutil.OneBatch(len(ids)).SetProjection(bson.D{{Key: fieldID, Value: 1}}))
	if err != nil {
		return Renewal{}, mongoutil.WrapErr(ctx, "renew "+idsDesc(keeperID, ids), err)
	}
	var held []struct {
		ID string `bson:"_id"`
	}
	if err := cur.All(ctx, &held); err != nil {
		return Renewal{}, mongoutil.WrapErr(ctx, "renew "+idsDesc(keeperID, ids), err)
	}
	ok := make(map[string]bool, len(held))
	for _, h := range held {
		ok[h.ID] = true
	}
	for _, id := range ids {
		if ok[id] {
			r.Held = append(r.Held, id)
		} else {
			r.Lost = append(r.Lost, id)
		}
	}
	return r, nil
}

// ReleaseLocks releases those of lockIDs that keeperID holds, whatever
// their terms, in one round trip, and returns how many it released. It
// never releases another keeper's lock. With no lockIDs it does nothing.
// A released lock keeps its document, without kid (ReleaseTerms).
func (l *Locker) ReleaseLocks(ctx context.Context, keeperID string, lockIDs ...string) (int, error) {
	if err := checkContext(ctx, "release locks", ""); err != nil {
		return 0, err
	}
	terms := make([]Term, len(lockIDs))
	for i, id := range lockIDs {
		terms[i] = Term{LockID: id}
	}
	return l.ReleaseTerms(ctx, keeperID, terms...)
}

// Term names one term of a lock: the lock id and the term's fencing token.
// A zero Fence stands for whichever term the keeper holds.
type Term struct {
	LockID string
	Fence  uint64
}

// ReleaseTerms releases those of terms that keeperID holds, in one round
// trip (one statement per hundred terms, so that its cost is linear in
// their number), and returns how many it released. A term with a fencing token is
// released only while that term lasts, so a release that reaches the
// server late never ends a later term of the same keeper. It never
// releases another keeper's lock. With no terms it does nothing. A
// released lock's document stays, without a keeper, so that the next
// term's fencing token is larger; the TTL index removes it Retention after
// its last renewal.
func (l *Locker) ReleaseTerms(ctx context.Context, keeperID string, terms ...Term) (int, error) {
	if err := checkContext(ctx, "release terms", ""); err != nil {
		return 0, err
	}
	return l.releaseAs(ctx, owner{kid: keeperID}, terms)
}

// releaseAs is ReleaseTerms for o (tokenStore).
func (l *Locker) releaseAs(ctx context.Context, o owner, terms []Term) (int, error) {
	keeperID := o.kid
	ids := make([]string, len(terms))
	for i, t := range terms {
		ids[i] = t.LockID
	}
	if err := validateMany(keeperID, ids); err != nil {
		return 0, err
	}
	if len(terms) == 0 {
		return 0, nil
	}
	// One order of the filter, whatever the caller's (a map's).
	terms = slices.SortedFunc(slices.Values(terms), func(a, b Term) int {
		return cmp.Or(strings.Compare(a.LockID, b.LockID), cmp.Compare(a.Fence, b.Fence))
	})
	// Statements of releaseChunk terms each, in one command: one filter
	// of every term (an $or of {_id, fence} clauses) costs FerretDB 2.x
	// time quadratic in their number (10 000 terms: 6 s, past the release
	// timeout); chunks make it linear.
	var models []mongo.WriteModel
	var any []string
	var or bson.A
	flush := func() {
		if len(or) > 0 {
			f := append(o.mine(), bson.E{Key: "$or", Value: or})
			models = append(models, mongo.NewUpdateManyModel().SetFilter(f).SetUpdate(vacate))
			or = nil
		}
		if len(any) > 0 {
			f := bson.D{{Key: fieldID, Value: bson.D{{Key: "$in", Value: any}}}}
			if !planted.On(planted.ReleaseOther) { // planted: whoever holds it
				f = append(f, o.mine()...)
			}
			models = append(models, mongo.NewUpdateManyModel().SetFilter(f).SetUpdate(vacate))
			any = nil
		}
	}
	for _, t := range terms {
		if t.Fence == 0 || planted.On(planted.ReleaseOther) { // planted: whatever its term
			any = append(any, t.LockID)
		} else {
			or = append(or, append(bson.D{{Key: fieldID, Value: t.LockID}}, fenceFilter(t.Fence)...))
		}
		if len(any)+len(or) == releaseChunk {
			flush()
		}
	}
	flush()
	res, err := l.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	if err != nil {
		l.failed(ctx)
		return 0, mongoutil.WrapErr(ctx, "release "+idsDesc(keeperID, ids), err)
	}
	return int(res.MatchedCount), nil
}

// releaseChunk is how many terms a statement of ReleaseTerms names.
const releaseChunk = 100

// vacate releases a lock and keeps its document and fence; ts becomes the
// time of the release, the last instant the lock was held.
var vacate = bson.D{
	{Key: "$unset", Value: bson.D{{Key: fieldKeeper, Value: ""}, {Key: fieldToken, Value: ""}, {Key: fieldNonce, Value: ""}, {Key: fieldValue, Value: ""}}},
	{Key: "$currentDate", Value: bson.D{{Key: fieldRenewed, Value: true}}},
}

// ForceRelease releases lockID whoever holds it. It is for operators
// clearing a stuck lock; fencing tokens keep increasing afterwards. It
// returns ErrNotHeld if the lock was not held.
func (l *Locker) ForceRelease(ctx context.Context, lockID string) error {
	if err := checkContext(ctx, "force release", lockID); err != nil {
		return err
	}
	if err := ValidateID("lockID", lockID); err != nil {
		return err
	}
	res, err := l.coll.UpdateOne(ctx, bson.D{{Key: fieldID, Value: lockID}, {Key: fieldKeeper, Value: bson.D{{Key: "$exists", Value: true}}}}, vacate)
	if err != nil {
		return wrapErr(ctx, "force release", lockID, err)
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("force release %q: %w", lockID, ErrNotHeld)
	}
	l.cfg.log.Warn().Str("lock", lockID).Msg("force released")
	return nil
}

// Purge deletes the lock documents the TTL index would: those not renewed
// for Retention by the server's clock, released or lapsed. It is for
// servers without TTL indexes (FerretDB 1.x), and returns how many it
// deleted. On FerretDB 1.x, whose deletes are not atomic, a lock taken over
// while Purge runs can be deleted with the old one: run Purge there only
// where commands are serialized.
func (l *Locker) Purge(ctx context.Context) (int, error) {
	if err := checkContext(ctx, "purge", ""); err != nil {
		return 0, err
	}
	if err := l.refreshClock(ctx); err != nil {
		return 0, fmt.Errorf("purge: %w", err)
	}
	lo, _, _ := l.clock.bounds(l.cfg.clock.Now())
	res, err := l.coll.DeleteMany(ctx, bson.D{{Key: fieldRenewed, Value: bson.D{{Key: "$lt", Value: lo.Add(-Retention)}}}})
	if err != nil {
		return 0, mongoutil.WrapErr(ctx, "purge "+lockColl(l.coll), err)
	}
	return int(res.DeletedCount), nil
}

// refreshClock reads the server's clock (mongoutil.ReadClock: from the node
// that stamps lock documents) if the estimate is missing, old, or was
// called into doubt: by a failed command, which is how a primary change
// often shows, or by the topology watch (WithTopologyWatch). The first call also learns what the deployment is.
func (l *Locker) refreshClock(ctx context.Context) error { return l.refreshClockOn(ctx, l.coll, false) }

// refreshClockFor is refreshClock; for an acquisition, which may take
// over a lapsed lease by the estimate, the estimate may be at most a TTL
// old: a contender refused again and again gets no reading of the server's
// clock from its refusals, and a server clock stepped since its last one
// would be misjudged for no longer than that.
func (l *Locker) refreshClockFor(ctx context.Context, acquisition bool) error {
	return l.refreshClockOn(ctx, l.coll, acquisition)
}

// refreshClockOn is refreshClockFor through coll: the Locker's collection,
// or for Renew its twin on the keep-alive's client.
func (l *Locker) refreshClockOn(ctx context.Context, coll *mongo.Collection, acquisition bool) error {
	if err := l.deploy.probe(ctx, coll, l.cfg.log); err != nil {
		return err
	}
	maxAge := l.cfg.clockRefresh
	if acquisition {
		maxAge = min(maxAge, l.cfg.ttl)
	}
	changes := l.cfg.watch.changed()
	if age, ok := l.clock.age(l.cfg.clock.Now()); ok && age < maxAge && changes == l.seen.Load() {
		return nil
	}
	sent := l.cfg.clock.Now()
	server, err := mongoutil.ReadClock(ctx, coll)
	recv := l.cfg.clock.Now()
	if err != nil {
		return mongoutil.WrapErr(ctx, "read the server's clock ("+lockColl(coll)+")", err)
	}
	l.clock.observe(server, sent, recv)
	l.seen.Store(changes)
	return nil
}

// readClock is refreshClock for calls that only read (Holder, Locks): a
// user who may read the lock collection but not write it (a monitoring
// role), or a connection that reaches no primary, cannot write the clock
// document; a separate estimate then comes from hello, which behind mongos
// is mongos's clock. It only decides what Holder reports as expired, when
// the Locker has no estimate of its own.
func (l *Locker) readClock(ctx context.Context) error {
	now := l.cfg.clock.Now()
	if _, ok := l.clock.age(now); !ok {
		if age, ok := l.readOnly.age(now); ok && age < l.cfg.clockRefresh {
			// The clock document was refused recently: no write, no hello.
			return nil
		}
	}
	err := l.refreshClock(ctx)
	var se mongo.ServerError
	if err == nil || ctx.Err() != nil || !errors.As(err, &se) {
		return err
	}
	sent := l.cfg.clock.Now()
	server, herr := mongoutil.ServerTime(ctx, l.coll.Database())
	recv := l.cfg.clock.Now()
	if herr != nil {
		return err
	}
	// Its own estimate: behind mongos hello answers with mongos's clock,
	// which must never decide a takeover.
	l.readOnly.observe(server, sent, recv)
	return nil
}

// failed marks the clock estimate for refreshing after a command failed
// for another reason than ctx ending: the primary may have changed, and
// with it the clock lock documents are stamped with.
func (l *Locker) failed(ctx context.Context) {
	if ctx.Err() == nil {
		l.clock.doubt()
	}
}

// wrapErr adds what was done to which id (mongoutil.WrapErr).
func wrapErr(ctx context.Context, op, id string, err error) error {
	return mongoutil.WrapErr(ctx, fmt.Sprintf("%s %q", op, id), err)
}

// idsDesc names the locks of a call in errors without listing thousands
// of ids: the id, quoted, when there is one.
func idsDesc(keeperID string, ids []string) string {
	if len(ids) == 1 {
		return fmt.Sprintf("%q", ids[0])
	}
	return fmt.Sprintf("%d locks of %s", len(ids), keeperID)
}

func dedup(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

func newNonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
