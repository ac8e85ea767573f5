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
// the keeper id, and converts lock documents written by earlier versions
// (UpgradeDocuments). It is idempotent, and the same whatever TTL the
// Locker uses: the TTL index removes documents Retention after their last
// renewal.
// An existing TTL index with another expireAfterSeconds (made by an earlier
// version, which followed the lease TTL) is changed in place with collMod.
// If the server does not implement TTL indexes (FerretDB 1.x) it logs a
// warning and creates a plain index: expiry never depends on the TTL
// monitor; use Purge to tidy up.
func (l *Locker) EnsureIndexes(ctx context.Context) error {
	if err := checkContext(ctx, "ensure indexes", ""); err != nil {
		return err
	}
	return EnsureIndexes(ctx, l.coll, func(msg string) {
		l.cfg.log.Warn().Str("collection", l.coll.Name()).Msg(msg)
	})
}

// EnsureIndexes is Locker.EnsureIndexes for any collection, for migrations.
// warn receives what could not be done but does not stop it.
// Its errors name what was asked, "ensure indexes of lock collection
// ...", before the step that failed.
func EnsureIndexes(ctx context.Context, coll *mongo.Collection, warn func(string)) error {
	_, err := upgradeDocuments(ctx, coll)
	if err == nil {
		err = mongoutil.EnsureIndexes(ctx, coll,
			func(msg string) { warn(msg + "; old lock documents stay until purged") },
			mongoutil.Index{Name: TTLIndexName, Keys: bson.D{{Key: fieldRenewed, Value: 1}}, TTL: true, TTLSeconds: int64(TTLSeconds(Retention))},
			mongoutil.Index{Name: KeeperIndexName, Keys: bson.D{{Key: fieldKeeper, Value: 1}}})
	}
	if err != nil {
		return mongoutil.WrapErr(ctx, "ensure indexes of "+lockColl(coll), err)
	}
	return nil
}

// UpgradeDocuments converts the lock documents of coll written by earlier
// versions, whose fence is a server timestamp (field "fence"), to this
// version's epoch and seq, with a fence above the old one: epoch one second
// past its timestamp. Until then this version leaves such a lock alone
// (never takes it over), so no fence goes below an old one. Run it with no
// instance of an earlier version running (mongolock migrate up does, through
// the built-in lock migration); it returns how many it converted.
func UpgradeDocuments(ctx context.Context, coll *mongo.Collection) (int, error) {
	n, err := upgradeDocuments(ctx, coll)
	if err != nil {
		return n, mongoutil.WrapErr(ctx, "upgrade the documents of "+lockColl(coll), err)
	}
	return n, nil
}

// upgradeDocuments is UpgradeDocuments; its errors name the step, not the
// collection.
func upgradeDocuments(ctx context.Context, coll *mongo.Collection) (int, error) {
	coll = mongoutil.Primary(coll)
	cur, err := coll.Find(ctx, bson.D{
		{Key: fieldSeq, Value: bson.D{{Key: "$exists", Value: false}}},
		{Key: "fence", Value: bson.D{{Key: "$exists", Value: true}}},
	})
	if err != nil {
		return 0, fmt.Errorf("find old lock documents: %w", err)
	}
	var raws []bson.Raw
	if err := cur.All(ctx, &raws); err != nil {
		return 0, fmt.Errorf("find old lock documents: %w", err)
	}
	n := 0
	for _, raw := range raws {
		var d lockDoc
		if parseLockDoc(raw, &d) != nil || d.Seq != nil {
			continue // a bad one: acquisitions take it over (takeOverBad)
		}
		res, err := coll.UpdateOne(ctx,
			bson.D{{Key: fieldID, Value: d.ID}, {Key: "fence", Value: d.Legacy}, {Key: fieldSeq, Value: bson.D{{Key: "$exists", Value: false}}}},
			bson.D{
				{Key: "$set", Value: bson.D{{Key: fieldEpoch, Value: int64(d.Legacy.T) + 1}, {Key: fieldSeq, Value: int64(0)}}},
				{Key: "$unset", Value: bson.D{{Key: "fence", Value: ""}}},
			})
		if err != nil {
			return n, fmt.Errorf("convert old lock document %q: %w", d.ID, err)
		}
		n += int(res.ModifiedCount)
	}
	return n, nil
}
