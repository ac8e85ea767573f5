package lock

import (
	"context"
	"fmt"
	"math"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Index names EnsureIndexes creates.
const (
	TTLIndexName    = "ts_ttl"
	KeeperIndexName = "kid"
)

const (
	codeNamespaceNotFound = 26
	codeNotImplemented    = 238
)

// TTLSeconds is the expireAfterSeconds for a lease TTL: rounded up, so the
// TTL monitor never deletes a lease before it expired.
func TTLSeconds(ttl time.Duration) int32 {
	return int32(math.Ceil(ttl.Seconds()))
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
	want := TTLSeconds(ttl)
	existing, err := listIndexes(ctx, coll)
	if err != nil {
		return err
	}
	if ix, ok := existing[TTLIndexName]; ok {
		switch {
		case ix.ExpireAfterSeconds == nil:
			// A plain index made where TTL indexes were unsupported: leave it.
		case *ix.ExpireAfterSeconds != int64(want):
			if *ix.ExpireAfterSeconds > int64(want) {
				// A shorter TTL index would let the TTL monitor delete
				// leases taken with a longer TTL while they are live.
				n, err := coll.CountDocuments(ctx, bson.D{{Key: fieldTTL, Value: bson.D{{Key: "$gt", Value: ttl.Milliseconds()}}}})
				if err != nil {
					return wrapErr(ctx, "count longer leases before lowering the TTL of index", TTLIndexName, err)
				}
				if n > 0 {
					return fmt.Errorf("%w: lowering expireAfterSeconds of index %s from %d to %d while %d locks hold leases longer than %v; release them first",
						ErrInvalidOption, TTLIndexName, *ix.ExpireAfterSeconds, want, n, ttl)
				}
			}
			err := coll.Database().RunCommand(ctx, bson.D{
				{Key: "collMod", Value: coll.Name()},
				{Key: "index", Value: bson.D{{Key: "name", Value: TTLIndexName}, {Key: "expireAfterSeconds", Value: want}}},
			}).Err()
			if err != nil {
				return wrapErr(ctx, "change expireAfterSeconds of index", TTLIndexName, err)
			}
		}
	} else {
		m := mongo.IndexModel{
			Keys:    bson.D{{Key: fieldRenewed, Value: 1}},
			Options: options.Index().SetName(TTLIndexName).SetExpireAfterSeconds(want),
		}
		_, err := coll.Indexes().CreateOne(ctx, m)
		if se, ok := err.(mongo.ServerError); ok && se.HasErrorCode(codeNotImplemented) {
			warn(fmt.Sprintf("server does not implement TTL indexes; expired locks stay until taken over or purged: %v", err))
			m.Options = options.Index().SetName(TTLIndexName)
			_, err = coll.Indexes().CreateOne(ctx, m)
		}
		if err != nil {
			return wrapErr(ctx, "create index", TTLIndexName, err)
		}
	}
	if _, ok := existing[KeeperIndexName]; !ok {
		_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{
			Keys:    bson.D{{Key: fieldKeeper, Value: 1}},
			Options: options.Index().SetName(KeeperIndexName),
		})
		if err != nil {
			return wrapErr(ctx, "create index", KeeperIndexName, err)
		}
	}
	return nil
}

type indexSpec struct {
	Name               string `bson:"name"`
	ExpireAfterSeconds *int64 `bson:"expireAfterSeconds"`
}

func listIndexes(ctx context.Context, coll *mongo.Collection) (map[string]indexSpec, error) {
	cur, err := coll.Indexes().List(ctx)
	if se, ok := err.(mongo.ServerError); ok && se.HasErrorCode(codeNamespaceNotFound) {
		return map[string]indexSpec{}, nil
	}
	if err != nil {
		return nil, wrapErr(ctx, "list indexes of", coll.Name(), err)
	}
	var specs []indexSpec
	if err := cur.All(ctx, &specs); err != nil {
		return nil, wrapErr(ctx, "list indexes of", coll.Name(), err)
	}
	out := make(map[string]indexSpec, len(specs))
	for _, s := range specs {
		out[s.Name] = s
	}
	return out, nil
}
