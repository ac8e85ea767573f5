package migrations

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/scheduler"
)

// Versions of the built-in migrations. mongolock's own migrations have
// negative versions, so they never collide with yours and run first.
const (
	// LockIndexesVersion is the version of LockIndexes.
	LockIndexesVersion int64 = -1000
	// SchedulerIndexesVersion is the version of SchedulerIndexes.
	SchedulerIndexesVersion int64 = -990
	// TermLogIndexesVersion is the version of TermLogIndexes.
	TermLogIndexesVersion int64 = -980
)

// Builtin returns mongolock's own migrations: the indexes of a lock
// collection (LockIndexes), those of the scheduler's run history
// (SchedulerIndexes), and those of the term log of elections
// (TermLogIndexes, on runner.DefaultTermsCollection with
// runner.DefaultTermRetention). New always registers them, with the
// collections and retentions of its options.
func Builtin(lockCollection, runsCollection string, retention time.Duration) []Migration {
	return builtin(lockCollection, runsCollection, retention, runner.DefaultTermsCollection, runner.DefaultTermRetention)
}

func builtin(lockCollection, runsCollection string, retention time.Duration, termsCollection string, termRetention time.Duration) []Migration {
	return []Migration{LockIndexes(lockCollection), SchedulerIndexes(runsCollection, retention),
		TermLogIndexes(termsCollection, termRetention)}
}

// TermLogIndexes returns the migration that creates the indexes of the
// term log of elections (runner.TermLog) with runner.EnsureTermIndexes:
// one to read a lock's terms, and a TTL index on their start that keeps
// them for retention. It is Repeatable: changing the retention applies it
// again. It has no Down.
func TermLogIndexes(collection string, retention time.Duration) Migration {
	m := Migration{
		Version:     TermLogIndexesVersion,
		Description: fmt.Sprintf("indexes of term log %q", collection),
		Definition: fmt.Sprintf("runner.EnsureTermIndexes terms=%q expireAfterSeconds=%d",
			collection, int64(lock.TTLSeconds(retention))),
		Repeatable: true,
	}
	if !mongoutil.ValidCollectionName(collection) {
		m.err = fmt.Errorf("invalid term log collection name %q", collection)
		return m
	}
	if retention < time.Second {
		m.err = fmt.Errorf("term log retention %v must be at least 1s", retention)
		return m
	}
	m.Up = func(ctx context.Context, db *mongo.Database) error {
		log := zerolog.Ctx(ctx)
		return runner.EnsureTermIndexes(ctx, db.Collection(collection), retention, func(msg string) {
			log.Warn().Str("collection", collection).Msg(msg + "; terms are kept until the collection is dropped")
		})
	}
	m.Explain = func(ctx context.Context, db *mongo.Database) ([]string, error) {
		existing, err := listIndexes(ctx, db.Collection(collection))
		if err != nil {
			return nil, err
		}
		var out []string
		if _, ok := existing[runner.TermsIndexName]; !ok {
			out = append(out, fmt.Sprintf("create index %q on %q {\"lock\":1,\"start\":-1}", runner.TermsIndexName, collection))
		} else {
			out = append(out, fmt.Sprintf("index %q on %q exists: nothing to do", runner.TermsIndexName, collection))
		}
		out = append(out, explainTTL(existing, collection, runner.TermsTTLIndexName, `{"start":1}`, int64(lock.TTLSeconds(retention))))
		return out, nil
	}
	return m
}

// LockIndexes returns the migration that creates the lock collection's
// indexes with lock.EnsureIndexes: the TTL index on the renewal time, which
// removes lock documents lock.Retention after their last renewal, and the
// index on the keeper id. They are the same whatever TTL the lockers use,
// so lockers with different TTLs can share the collection. It is
// Repeatable: an index made by an earlier release, whose expireAfterSeconds
// followed the lease TTL, is changed in place with collMod. On a server
// without TTL indexes it logs a warning and creates a plain index. It has
// no Down.
func LockIndexes(collection string) Migration {
	ttl := int64(lock.TTLSeconds(lock.Retention))
	m := Migration{
		Version:     LockIndexesVersion,
		Description: fmt.Sprintf("indexes of lock collection %q", collection),
		Definition:  fmt.Sprintf("lock.EnsureIndexes collection=%q expireAfterSeconds=%d", collection, ttl),
		Repeatable:  true,
	}
	if !mongoutil.ValidCollectionName(collection) {
		m.err = fmt.Errorf("invalid lock collection name %q", collection)
		return m
	}
	m.Up = func(ctx context.Context, db *mongo.Database) error {
		log := zerolog.Ctx(ctx)
		return lock.EnsureIndexes(ctx, db.Collection(collection), func(msg string) {
			log.Warn().Str("collection", collection).Msg(msg)
		})
	}
	m.Explain = func(ctx context.Context, db *mongo.Database) ([]string, error) {
		existing, err := listIndexes(ctx, db.Collection(collection))
		if err != nil {
			return nil, err
		}
		out := []string{explainTTL(existing, collection, lock.TTLIndexName, `{"ts":1}`, ttl)}
		if _, ok := existing[lock.KeeperIndexName]; !ok {
			out = append(out, fmt.Sprintf("create index %q on %q {\"kid\":1}", lock.KeeperIndexName, collection))
		} else {
			out = append(out, fmt.Sprintf("index %q on %q exists: nothing to do", lock.KeeperIndexName, collection))
		}
		return out, nil
	}
	return m
}

// SchedulerIndexes returns the migration that creates the indexes of the
// scheduler's run history with scheduler.EnsureIndexes: one to read a job's
// runs, and a TTL index on their end time that keeps them for retention
// (0: no history, no TTL index). It is Repeatable: changing the retention
// applies it again. It has no Down.
func SchedulerIndexes(runsCollection string, retention time.Duration) Migration {
	m := Migration{
		Version:     SchedulerIndexesVersion,
		Description: fmt.Sprintf("indexes of scheduler history %q", runsCollection),
		Definition: fmt.Sprintf("scheduler.EnsureIndexes runs=%q expireAfterSeconds=%d",
			runsCollection, int64(lock.TTLSeconds(retention))),
		Repeatable: true,
	}
	if !mongoutil.ValidCollectionName(runsCollection) {
		m.err = fmt.Errorf("invalid scheduler runs collection name %q", runsCollection)
		return m
	}
	if retention < 0 || (retention > 0 && retention < time.Second) {
		m.err = fmt.Errorf("scheduler history retention %v must be 0 or at least 1s", retention)
		return m
	}
	m.Up = func(ctx context.Context, db *mongo.Database) error {
		log := zerolog.Ctx(ctx)
		return scheduler.EnsureIndexes(ctx, db.Collection(runsCollection), retention, func(msg string) {
			log.Warn().Str("collection", runsCollection).Msg(msg)
		})
	}
	m.Explain = func(ctx context.Context, db *mongo.Database) ([]string, error) {
		existing, err := listIndexes(ctx, db.Collection(runsCollection))
		if err != nil {
			return nil, err
		}
		var out []string
		if _, ok := existing[scheduler.HistoryIndexName]; !ok {
			out = append(out, fmt.Sprintf("create index %q on %q {\"job\":1,\"scheduled\":-1}", scheduler.HistoryIndexName, runsCollection))
		} else {
			out = append(out, fmt.Sprintf("index %q on %q exists: nothing to do", scheduler.HistoryIndexName, runsCollection))
		}
		if retention <= 0 {
			return out, nil
		}
		want := int64(lock.TTLSeconds(retention))
		out = append(out, explainTTL(existing, runsCollection, scheduler.HistoryTTLIndexName, `{"end":1}`, want))
		return out, nil
	}
	return m
}

// explainTTL says what ensuring the TTL index name on keys with want
// seconds would do, given the existing indexes of coll.
func explainTTL(existing map[string]existingIndex, coll, name, keys string, want int64) string {
	ix, ok := existing[name]
	switch {
	case !ok:
		return fmt.Sprintf("create index %q on %q %s expireAfterSeconds %d (a plain index where TTL indexes are not implemented)", name, coll, keys, want)
	case ix.TTL == nil:
		return fmt.Sprintf("index %q on %q is a plain index (made where TTL indexes are not implemented): left as it is", name, coll)
	case *ix.TTL != want:
		return fmt.Sprintf("collMod %q: set expireAfterSeconds of index %q from %d to %d", coll, name, *ix.TTL, want)
	}
	return fmt.Sprintf("index %q on %q exists with expireAfterSeconds %d: nothing to do", name, coll, want)
}
