package lock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/hideuri"
)

// BadDocument describes a stored document that is not what this module
// writes: a hand edit, another tool's document, an older version's, a
// damaged one. It is the module's one description of such a document, for
// every collection it reads (locks, jobs, runs, terms, migrations, the
// dashboard's actions). Readers skip it, report it (the Locker's
// WithBadDocuments, by default a warning in its log; the scheduler's
// lock.DocumentUnreadable event) and go on with the others; writers never
// trust its fields, and the scheduler's claims repair its own documents.
//
// A BadDocument is an error wrapping ErrBadDocument; its message names the
// collection, the _id and the field, and says what was wrong.
type BadDocument struct {
	// Collection is the collection's name.
	Collection string
	// ID is the document's _id as stored (any BSON type), nil if it has
	// none.
	ID any
	// Field is the dotted path of the first field found wrong ("kid",
	// "regs.a1b2.spec"); empty if the document as a whole could not be
	// read. Problem says what is wrong with it ("not a string",
	// "missing").
	Field, Problem string
}

// String is the description: `<collection> document <_id>, field "<field>":
// <problem>`.
func (b BadDocument) String() string {
	id := "(no _id)"
	if b.ID != nil {
		id = fmt.Sprint(b.ID)
	}
	if b.Field == "" {
		return fmt.Sprintf("%s document %s: %s", b.Collection, id, b.Problem)
	}
	return fmt.Sprintf("%s document %s, field %q: %s", b.Collection, id, b.Field, b.Problem)
}

func (b BadDocument) Error() string { return ErrBadDocument.Error() + ": " + b.String() }
func (b BadDocument) Unwrap() error { return ErrBadDocument }

// NewBadDocument describes raw, a document of the collection coll, whose
// field is wrong as problem says: for the module's packages and tools that
// read their own collections.
func NewBadDocument(coll string, raw bson.Raw, field, problem string) BadDocument {
	b := BadDocument{Collection: coll, Field: field, Problem: problem}
	if v, err := raw.LookupErr(fieldID); err == nil {
		b.ID = rawValueID(v)
	}
	return b
}

// rawValueID is v, an _id, as a Go value; as text if it cannot be decoded.
func rawValueID(v bson.RawValue) any {
	var id any
	if err := v.Unmarshal(&id); err == nil {
		return id
	}
	return v.String()
}

// ErrBadDocument is wrapped by every BadDocument: Holder returns one for a
// lock whose document is bad, and the scheduler's events of bad documents
// carry one.
var ErrBadDocument = errors.New("lock: bad document")

// Ranges of the fields of a lock document that this version reads as
// written: beyond them a fence (epoch << 32 + seq) would not fit, or a
// lease would outlast any Locker's.
const (
	maxEpoch = 1<<32 - 1
	maxSeq   = 1 << 33 // fenceFilter is exact for the first 2^33 terms
)

// parseLockDoc reads raw as a lock document. A field that is not what
// this version writes makes it bad: the returned BadDocument (without
// Collection) names the first such field; the lockDoc then holds what
// could be read, its fields that are wrong left zero, for writers to judge
// (badTakeable) without trusting them.
func parseLockDoc(raw bson.Raw, d *lockDoc) (bad *BadDocument) {
	*d = lockDoc{}
	fail := func(field, problem string) {
		if bad == nil {
			bad = &BadDocument{Field: field, Problem: problem}
		}
	}
	elems, err := raw.Elements()
	if err != nil {
		return &BadDocument{Field: "", Problem: "not a BSON document: " + err.Error()}
	}
	var hasID, hasTS, hasLegacy bool
	for _, e := range elems {
		v := e.Value()
		switch e.Key() {
		case fieldID:
			d.rawID = v
			s, ok := v.StringValueOK()
			hasID = true
			if !ok {
				fail(fieldID, "not a string")
			}
			d.ID = s
		case fieldKeeper:
			if s, ok := v.StringValueOK(); ok && s != "" {
				d.Keeper = s
			} else {
				d.badKeeper = true
				fail(fieldKeeper, "not a nonempty string")
			}
		case fieldToken:
			if s, ok := v.StringValueOK(); ok {
				d.Token = s
			} else {
				d.badKeeper = true
				fail(fieldToken, "not a string")
			}
		case fieldRenewed:
			if ms, ok := v.DateTimeOK(); ok {
				d.Renewed, hasTS = bson.DateTime(ms).Time(), true
			} else {
				fail(fieldRenewed, "not a date")
			}
		case fieldAcquired:
			if ms, ok := v.DateTimeOK(); ok {
				d.Acquired = bson.DateTime(ms).Time()
			} else {
				fail(fieldAcquired, "not a date")
			}
		case fieldEpoch:
			if n, ok := wholeNumber(v, 0, maxEpoch); ok {
				d.Epoch = n
			} else {
				d.badFence = true
				fail(fieldEpoch, fmt.Sprintf("not a whole number from 0 to %d", int64(maxEpoch)))
			}
		case fieldSeq:
			if n, ok := wholeNumber(v, 0, maxSeq); ok {
				d.Seq = &n
			} else {
				d.badFence = true
				zero := int64(0)
				d.Seq = &zero // not legacy: a bad fence, judged as such
				fail(fieldSeq, fmt.Sprintf("not a whole number from 0 to %d", int64(maxSeq)))
			}
		case "fence":
			if t, i, ok := v.TimestampOK(); ok {
				d.Legacy, hasLegacy = bson.Timestamp{T: t, I: i}, true
			} else {
				d.badFence = true
				fail("fence", "not a timestamp")
			}
		case fieldTTL:
			if n, ok := wholeNumber(v, 1, ttlMillis(MaxTTL)); ok {
				d.TTL = n
			} else {
				fail(fieldTTL, fmt.Sprintf("not a whole number of milliseconds from 1 to %d", ttlMillis(MaxTTL)))
			}
		case fieldNonce:
			if s, ok := v.StringValueOK(); ok {
				d.Nonce = s
			} else {
				fail(fieldNonce, "not a string")
			}
		case fieldValue:
			// The holder's payload, not part of the lease: a value this
			// module did not write (not binary data) is not read, and
			// never makes the lease a bad document.
			if _, b, ok := v.BinaryOK(); ok {
				d.Value = slices.Clone(b) // raw may be a cursor's buffer
			}
		}
	}
	switch {
	case !hasID:
		fail(fieldID, "missing")
	case !hasTS:
		fail(fieldRenewed, "missing")
	case d.Seq == nil && !hasLegacy:
		d.badFence = true
		zero := int64(0)
		d.Seq = &zero
		fail(fieldSeq, "missing")
	}
	return bad
}

// wholeNumber reads v as an integer from lo to hi: an int32, an int64, or
// a double without a fraction.
func wholeNumber(v bson.RawValue, lo, hi int64) (int64, bool) {
	var n int64
	switch v.Type {
	case bson.TypeInt32:
		n = int64(v.Int32())
	case bson.TypeInt64:
		n = v.Int64()
	case bson.TypeDouble:
		f := v.Double()
		if f != math.Trunc(f) || f < float64(lo) || f > float64(hi) {
			return 0, false
		}
		n = int64(f)
	default:
		return 0, false
	}
	return n, n >= lo && n <= hi
}

// reportBad passes b, about a document of the Locker's collection, to the
// Locker's handler (WithBadDocuments).
func (l *Locker) reportBad(b *BadDocument, d lockDoc) BadDocument {
	r := *b
	r.Collection = l.coll.Name()
	if d.rawID.Type != 0 {
		r.ID = rawValueID(d.rawID)
	}
	if l.cfg.badDocs != nil {
		l.cfg.badDocs(r)
	} else {
		l.logBad.log(l, r)
	}
	return r
}

// badLog logs each bad document (and field) once per Locker: readers meet
// it on every read.
type badLog struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (b *badLog) log(l *Locker, r BadDocument) {
	key := fmt.Sprint(r.ID) + "\x00" + r.Field
	b.mu.Lock()
	if b.seen == nil || len(b.seen) >= maxHints {
		b.seen = make(map[string]bool)
	}
	seen := b.seen[key]
	b.seen[key] = true
	b.mu.Unlock()
	if !seen {
		// The _id and the problem (which may quote a value) are the
		// database's text, not the program's: no credentials of a URI in
		// them are logged.
		l.cfg.log.Warn().Str("collection", r.Collection).Str("id", hideuri.URIs(fmt.Sprint(r.ID))).Str("field", r.Field).
			Str("problem", hideuri.URIs(r.Problem)).Msg("skipped a bad document")
	}
}

// badTakeable reports whether o may take over the lock of a bad document
// d (parseLockDoc) at lo, the lower bound of the server's time: a lease
// whose time is not a date is no lease; any other lapses its TTL (this
// Locker's when its own is bad) after its last renewal, unless o holds it
// or nobody does. A legacy document with a bad field is not taken over:
// UpgradeDocuments is for those.
func (l *Locker) badTakeable(d lockDoc, o owner, lo time.Time) bool {
	switch {
	case d.Renewed.IsZero():
		return true
	case d.badKeeper:
	case d.Keeper == "" || o.owns(d):
		return true
	}
	ttl := d.TTL
	if ttl == 0 {
		ttl = l.ttlMS()
	}
	return bson.NewDateTimeFromTime(d.Renewed) < lapsedBefore(lo, ttl)
}

// takeOverBad begins a term of o on the bad document raw (d as parsed),
// if it is still as read: every field this version writes is written
// again, and the fence restarts above anything the document held that
// can be read as one (its epoch, its legacy timestamp), and above the
// server's time in seconds. It returns ok=false if the document changed
// meanwhile. One findAndModify.
func (l *Locker) takeOverBad(ctx context.Context, o owner, raw bson.Raw, d lockDoc, lo time.Time) (lockDoc, time.Time, bool, error) {
	elems, err := raw.Elements()
	if err != nil {
		return lockDoc{}, time.Time{}, false, err
	}
	filter := bson.D{}
	present := map[string]bool{}
	for _, e := range elems {
		present[e.Key()] = true
		filter = append(filter, bson.E{Key: e.Key(), Value: bson.D{{Key: "$eq", Value: e.Value()}}})
	}
	for _, f := range []string{fieldKeeper, fieldToken, fieldRenewed, fieldEpoch, fieldSeq, "fence", fieldTTL} {
		if !present[f] {
			filter = append(filter, bson.E{Key: f, Value: bson.D{{Key: "$exists", Value: false}}})
		}
	}
	epoch := max(lo.Unix(), int64(d.Legacy.T)+1, 1)
	if !d.badFence {
		epoch = max(epoch, int64(d.fence()>>32)+1)
	} else if present[fieldEpoch] && d.Epoch > 0 {
		epoch = max(epoch, d.Epoch+1)
	}
	set := bson.D{{Key: fieldKeeper, Value: o.kid}, {Key: fieldTTL, Value: l.ttlMS()},
		{Key: fieldEpoch, Value: epoch}, {Key: fieldSeq, Value: int64(0)}}
	unset := bson.D{{Key: "fence", Value: ""}, {Key: fieldNonce, Value: ""}, {Key: fieldValue, Value: ""}}
	if o.tok != "" {
		set = append(set, bson.E{Key: fieldToken, Value: o.tok})
	} else {
		unset = append(unset, bson.E{Key: fieldToken, Value: ""})
	}
	update := bson.D{
		{Key: "$set", Value: set},
		{Key: "$unset", Value: unset},
		{Key: "$currentDate", Value: bson.D{{Key: fieldRenewed, Value: true}, {Key: fieldAcquired, Value: true}}},
	}
	sent := l.cfg.clock.Now()
	var after bson.Raw
	err = l.coll.FindOneAndUpdate(ctx, filter, update, options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&after)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return lockDoc{}, sent, false, nil
	}
	if err != nil {
		l.failed(ctx)
		return lockDoc{}, sent, false, err
	}
	var nd lockDoc
	if bad := parseLockDoc(after, &nd); bad != nil || !o.owns(nd) {
		return lockDoc{}, sent, false, fmt.Errorf("take over bad document %v: still bad after the takeover", d.rawID)
	}
	l.cfg.log.Warn().Str("lock", nd.ID).Str("keeper", o.kid).Uint64("fence", nd.fence()).Msg("took over a bad lock document")
	return nd, sent, true, nil
}
