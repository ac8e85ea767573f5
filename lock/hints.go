package lock

import (
	"context"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// maxHints bounds how many locks a Locker remembers lease lengths of.
const maxHints = 10000

// ttlHints remembers, for locks other keepers hold, how long their leases
// are (ms): a lease longer than this Locker's TTL is taken over only by a
// filter naming its length (takeable). A hint is read again once it is as
// old as the longer of the two leases, by which time the holder may have
// changed.
type ttlHints struct {
	mu sync.Mutex
	m  map[string]ttlHint
}

type ttlHint struct {
	ttl, mine int64
	at        time.Time // local instant it was read
}

func (h *ttlHints) get(id string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[id].ttl
}

func (h *ttlHints) forget(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, id)
}

// learn records that id's lease is ttl long, read at local instant at by a
// Locker whose TTL is mine.
func (h *ttlHints) learn(id string, ttl, mine int64, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m) >= maxHints {
		h.m = make(map[string]ttlHint)
	}
	h.m[id] = ttlHint{ttl: ttl, mine: mine, at: at}
}

// fresh reports whether id's hint was read less than a lease ago.
func (h *ttlHints) fresh(id string, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.m[id]
	return ok && now.Sub(e.at) < time.Duration(max(e.ttl, e.mine))*time.Millisecond
}

// refusedOne follows a refused acquisition of lockID by o (acquireOne):
// unless it knows how long the lease is, it reads the document, to learn
// that, whether its holder has o's keeper id (shared), and whether it is
// a bad document (BadDocument) that o may take over all the same
// (badTakeable), which it then does. A failed read leaves things as they
// were: the next refusal reads again.
func (l *Locker) refusedOne(ctx context.Context, o owner, lockID string, lo, now time.Time) (g Grant, ok, shared bool, err error) {
	if l.hints.fresh(lockID, now) {
		return Grant{}, false, false, nil
	}
	var raw bson.Raw
	if err := l.coll.FindOne(ctx, bson.D{{Key: fieldID, Value: lockID}}).Decode(&raw); err != nil {
		return Grant{}, false, false, nil
	}
	var doc lockDoc
	bad := parseLockDoc(raw, &doc)
	l.hints.learn(lockID, doc.TTL, l.ttlMS(), now)
	if bad == nil {
		return Grant{}, false, o.shares(doc), nil
	}
	l.reportBad(bad, doc)
	if !l.badTakeable(doc, o, lo) {
		return Grant{}, false, !doc.badKeeper && o.shares(doc), nil
	}
	g, ok, err = l.takeOverBadGrant(ctx, o, raw, doc, lo)
	return g, ok, false, err
}

// takeOverBadGrant is takeOverBad, as a Grant.
func (l *Locker) takeOverBadGrant(ctx context.Context, o owner, raw bson.Raw, d lockDoc, lo time.Time) (Grant, bool, error) {
	nd, sent, ok, err := l.takeOverBad(ctx, o, raw, d, lo)
	if err != nil {
		return Grant{}, false, wrapErr(ctx, "acquire", d.ID, err)
	}
	if !ok {
		return Grant{}, false, nil // changed since it was read: refused, for now
	}
	l.hints.forget(nd.ID)
	return l.newLease(nd, sent, l.cfg.clock.Now()), true, nil
}
