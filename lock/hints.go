package lock

import (
	"context"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
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

// learnTTL reads how long the lease on lockID is after an acquisition by
// o was refused, unless it knows already, and reports whether its holder
// has o's keeper id (owner.shares). A failed read leaves things as they
// were: the next refusal reads again.
func (l *Locker) learnTTL(ctx context.Context, o owner, lockID string, now time.Time) bool {
	if l.hints.fresh(lockID, now) {
		return false
	}
	var doc lockDoc
	err := l.coll.FindOne(ctx, bson.D{{Key: fieldID, Value: lockID}},
		options.FindOne().SetProjection(bson.D{{Key: fieldTTL, Value: 1}, {Key: fieldKeeper, Value: 1}, {Key: fieldToken, Value: 1}})).Decode(&doc)
	if err != nil {
		return false
	}
	l.hints.learn(lockID, doc.TTL, l.ttlMS(), now)
	return o.shares(doc)
}
