// Package mongoutil holds the few MongoDB chores lock, scheduler,
// migrations and the command line share: reading the server's clock,
// keeping indexes (including TTL indexes on servers that lack them, such as
// FerretDB), checking collection names and wrapping errors.
package mongoutil

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Server error codes.
const (
	CodeNamespaceNotFound = 26
	CodeCommandNotFound   = 59
	CodeNotImplemented    = 238
)

// ServerTime reads the server's clock (hello's localTime; isMaster on
// MongoDB before 4.4.2, which lacks hello).
func ServerTime(ctx context.Context, db *mongo.Database) (time.Time, error) {
	var res struct {
		LocalTime time.Time `bson:"localTime"`
	}
	err := db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&res)
	var ce mongo.CommandError
	if errors.As(err, &ce) && ce.Code == CodeCommandNotFound {
		err = db.RunCommand(ctx, bson.D{{Key: "isMaster", Value: 1}}).Decode(&res)
	}
	if err != nil {
		return time.Time{}, err
	}
	if res.LocalTime.IsZero() {
		return time.Time{}, errors.New("hello reply has no localTime")
	}
	return res.LocalTime, nil
}

// IndexSpec is what EnsureIndex and EnsureTTLIndex look at in an index.
type IndexSpec struct {
	Name               string `bson:"name"`
	ExpireAfterSeconds *int64 `bson:"expireAfterSeconds"`
}

// Indexes lists coll's indexes by name; a missing collection has none.
func Indexes(ctx context.Context, coll *mongo.Collection) (map[string]IndexSpec, error) {
	cur, err := coll.Indexes().List(ctx)
	var se mongo.ServerError
	if errors.As(err, &se) && se.HasErrorCode(CodeNamespaceNotFound) {
		return map[string]IndexSpec{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list indexes of %q: %w", coll.Name(), err)
	}
	var specs []IndexSpec
	if err := cur.All(ctx, &specs); err != nil {
		return nil, fmt.Errorf("list indexes of %q: %w", coll.Name(), err)
	}
	out := make(map[string]IndexSpec, len(specs))
	for _, s := range specs {
		out[s.Name] = s
	}
	return out, nil
}

// EnsureIndex creates a plain index named name on keys unless one by that
// name exists.
func EnsureIndex(ctx context.Context, coll *mongo.Collection, name string, keys bson.D) error {
	existing, err := Indexes(ctx, coll)
	if err != nil {
		return err
	}
	if _, ok := existing[name]; ok {
		return nil
	}
	if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: keys, Options: options.Index().SetName(name)}); err != nil {
		return fmt.Errorf("create index %q: %w", name, err)
	}
	return nil
}

// EnsureTTLIndex makes the index named name on keys expire documents after
// seconds (capped at what the server accepts). An existing TTL index with another value is changed in place
// with collMod; it is never dropped. A server without TTL indexes gets
// a plain index and a call to warn. A plain index already there is left as
// it is.
func EnsureTTLIndex(ctx context.Context, coll *mongo.Collection, name string, keys bson.D, seconds int64, warn func(string)) error {
	seconds = int64(clamp32(seconds))
	existing, err := Indexes(ctx, coll)
	if err != nil {
		return err
	}
	if ix, ok := existing[name]; ok {
		if ix.ExpireAfterSeconds == nil || *ix.ExpireAfterSeconds == seconds {
			return nil
		}
		err := coll.Database().RunCommand(ctx, bson.D{
			{Key: "collMod", Value: coll.Name()},
			{Key: "index", Value: bson.D{{Key: "name", Value: name}, {Key: "expireAfterSeconds", Value: seconds}}},
		}).Err()
		if err != nil {
			return fmt.Errorf("change expireAfterSeconds of index %q: %w", name, err)
		}
		return nil
	}
	m := mongo.IndexModel{Keys: keys, Options: options.Index().SetName(name).SetExpireAfterSeconds(int32(seconds))}
	_, err = coll.Indexes().CreateOne(ctx, m)
	var se mongo.ServerError
	if errors.As(err, &se) && se.HasErrorCode(CodeNotImplemented) {
		warn(fmt.Sprintf("server does not implement TTL indexes; index %s is a plain index: %v", name, err))
		m.Options = options.Index().SetName(name)
		_, err = coll.Indexes().CreateOne(ctx, m)
	}
	if err != nil {
		return fmt.Errorf("create index %q: %w", name, err)
	}
	return nil
}

func clamp32(n int64) int32 {
	const maxInt32 = 1<<31 - 1
	return int32(min(max(n, 0), maxInt32))
}

// ValidCollectionName reports whether name can be a collection of ours:
// not empty, no '$' or NUL, not a system collection.
func ValidCollectionName(name string) bool {
	return name != "" && !strings.ContainsAny(name, "$\x00") && !strings.HasPrefix(name, "system.")
}

// WrapErr prefixes err with what was being done and, when ctx has ended,
// surfaces ctx's own error as well: the driver's errors stop wrapping
// context.DeadlineExceeded once the context is done, and callers test for
// it with errors.Is.
func WrapErr(ctx context.Context, what string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%s: %w (%w)", what, ctxErr, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
