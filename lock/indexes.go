package lock

import (
	"context"
	"errors"
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
// expireAfterSeconds it is changed in place with collMod. It refuses, changing
// nothing, while a lock taken with a longer lease exists (CheckLeasesFit). If the server does
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
	if err := CheckLeasesFit(ctx, coll, ttl); err != nil {
		return err
	}
	err := mongoutil.EnsureIndexes(ctx, coll,
		func(msg string) { warn(msg + "; expired locks stay until taken over or purged") },
		mongoutil.Index{Name: TTLIndexName, Keys: bson.D{{Key: fieldRenewed, Value: 1}}, TTL: true, TTLSeconds: int64(TTLSeconds(ttl))},
		mongoutil.Index{Name: KeeperIndexName, Keys: bson.D{{Key: fieldKeeper, Value: 1}}})
	if err != nil {
		return mongoutil.WrapErr(ctx, fmt.Sprintf("ensure indexes of %q", coll.Name()), err)
	}
	return nil
}

// CheckLeasesFit returns an error wrapping ErrLeaseTooLong (and
// ErrInvalidOption) if a lock in coll was taken with a lease longer than a
// TTL index for ttl keeps documents: the TTL monitor would delete that lock
// while it is held and let a second keeper take it. It happens when indexes
// are made with another TTL than the lockers use.
func CheckLeasesFit(ctx context.Context, coll *mongo.Collection, ttl time.Duration) error {
	limit := int64(TTLSeconds(ttl)) * 1000
	var doc lockDoc
	err := coll.FindOne(ctx, bson.D{{Key: fieldTTL, Value: bson.D{{Key: "$gt", Value: limit}}}}).Decode(&doc)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return nil
	case err != nil:
		return wrapErr(ctx, "look for leases longer than the TTL index in", coll.Name(), err)
	}
	return fmt.Errorf("%w: %w: lock %q in %q was taken by %q with a %v lease, longer than the %ds the TTL index would keep it: "+
		"configure the TTL your lockers use, or release that lock",
		ErrInvalidOption, ErrLeaseTooLong, doc.ID, coll.Name(), doc.Keeper, time.Duration(doc.TTL)*time.Millisecond, limit/1000)
}
