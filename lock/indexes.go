package lock

import (
	"context"
	"fmt"
	"math"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongoutil"
)

// Index names EnsureIndexes creates.
const (
	TTLIndexName    = "ts_ttl"
	KeeperIndexName = "kid"
)

// TTLSeconds is the expireAfterSeconds for a lease TTL: rounded up, so the
// TTL monitor never deletes a lease before it expired.
func TTLSeconds(ttl time.Duration) int32 {
	return int32(min(math.Ceil(ttl.Seconds()), math.MaxInt32))
}

// EnsureIndexes creates the TTL index on the renewal time and the index on
// the keeper id. It is idempotent. If the TTL index exists with another
// expireAfterSeconds it is changed in place with collMod; lowering it is
// refused while locks taken with a longer TTL exist. If the server does
// not implement TTL indexes (FerretDB) it logs a warning and creates a plain
// index: expiry never depends on the TTL monitor, use Purge to tidy up.
func (l *Locker) EnsureIndexes(ctx context.Context) error {
	return EnsureIndexes(ctx, l.coll, l.cfg.ttl, func(msg string) {
		l.cfg.log.Warn().Str("collection", l.coll.Name()).Msg(msg)
	})
}

// EnsureIndexes is Locker.EnsureIndexes for any collection, for migrations.
// warn receives what could not be done but does not stop it.
func EnsureIndexes(ctx context.Context, coll *mongo.Collection, ttl time.Duration, warn func(string)) error {
	want := int64(TTLSeconds(ttl))
	// A shorter TTL index would let the TTL monitor delete leases taken
	// with a longer TTL while they are live.
	refuseShorter := func(current int64) error {
		if current < want {
			return nil
		}
		n, err := coll.CountDocuments(ctx, bson.D{{Key: fieldTTL, Value: bson.D{{Key: "$gt", Value: int64((ttl + time.Millisecond - 1) / time.Millisecond)}}}})
		if err != nil {
			return wrapErr(ctx, "count longer leases before lowering the TTL of index", TTLIndexName, err)
		}
		if n > 0 {
			return fmt.Errorf("%w: lowering expireAfterSeconds of index %s from %d to %d while %d locks hold leases longer than %v; release them first",
				ErrInvalidOption, TTLIndexName, current, want, n, ttl)
		}
		return nil
	}
	err := mongoutil.EnsureTTLIndex(ctx, coll, TTLIndexName, bson.D{{Key: fieldRenewed, Value: 1}}, want, refuseShorter,
		func(msg string) { warn(msg + "; expired locks stay until taken over or purged") })
	if err != nil {
		return wrapErr(ctx, "ensure index", TTLIndexName, err)
	}
	if err := mongoutil.EnsureIndex(ctx, coll, KeeperIndexName, bson.D{{Key: fieldKeeper, Value: 1}}); err != nil {
		return wrapErr(ctx, "ensure index", KeeperIndexName, err)
	}
	return nil
}
