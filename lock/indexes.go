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

// TTLSeconds is the expireAfterSeconds for a duration: rounded up, so a TTL
// index never deletes a document before it is due.
func TTLSeconds(d time.Duration) int32 {
	return int32(min(math.Ceil(d.Seconds()), math.MaxInt32))
}

// EnsureIndexes creates the TTL index on the renewal time and the index on
// the keeper id. It is idempotent, and the same whatever TTL the Locker
// uses: the TTL index removes documents Retention after their last renewal.
// An existing TTL index with another expireAfterSeconds (made by an earlier
// version, which followed the lease TTL) is changed in place with collMod.
// If the server does not implement TTL indexes (FerretDB 1.x) it logs a
// warning and creates a plain index: expiry never depends on the TTL
// monitor; use Purge to tidy up.
func (l *Locker) EnsureIndexes(ctx context.Context) error {
	return EnsureIndexes(ctx, l.coll, func(msg string) {
		l.cfg.log.Warn().Str("collection", l.coll.Name()).Msg(msg)
	})
}

// EnsureIndexes is Locker.EnsureIndexes for any collection, for migrations.
// warn receives what could not be done but does not stop it.
func EnsureIndexes(ctx context.Context, coll *mongo.Collection, warn func(string)) error {
	err := mongoutil.EnsureIndexes(ctx, coll,
		func(msg string) { warn(msg + "; old lock documents stay until purged") },
		mongoutil.Index{Name: TTLIndexName, Keys: bson.D{{Key: fieldRenewed, Value: 1}}, TTL: true, TTLSeconds: int64(TTLSeconds(Retention))},
		mongoutil.Index{Name: KeeperIndexName, Keys: bson.D{{Key: fieldKeeper, Value: 1}}})
	if err != nil {
		return mongoutil.WrapErr(ctx, fmt.Sprintf("ensure indexes of %q", coll.Name()), err)
	}
	return nil
}
