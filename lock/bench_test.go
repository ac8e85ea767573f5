package lock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
)

// BenchmarkAcquireRelease interleaves, in one loop, an uncontended
// acquire+release pair of one lock through the store (AcquireLocks and
// ReleaseLocks) and the baseline a user would write by hand: a raw driver
// upsert+delete pair with the same write concern. It reports the cost of
// each and their ratio (goal: ratio <= 1.10).
func BenchmarkAcquireRelease(b *testing.B) {
	benchAgainstRaw(b, func(db *mongo.Database) func(id string) {
		l, err := lock.New(db)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		pair := func(id string) {
			mustAcquire(b, ctx, l, id, "k")
			if err := releaseOne(ctx, l, id, "k"); err != nil {
				b.Fatal(err)
			}
		}
		pair("warm") // the clock estimate
		return pair
	})
}

// benchAgainstRaw times, in one loop, lockPair (which takes and releases
// the lock it is given, uncontended) against two raw driver pairs with the
// same write concern on the same database, and reports the cost of each
// and the ratios: an upsert+delete, the baseline a user would write by
// hand; and an upsert+unset, which keeps the document as a released lock
// does (for its fence). FerretDB 1.x reads every document of a collection
// for such filters, so the second tells the code's overhead from the cost
// of documents kept there. setup returns lockPair after warming it up; it
// must leave no lock held.
func benchAgainstRaw(b *testing.B, setup func(db *mongo.Database) (lockPair func(id string))) {
	db := mongotest.NewDatabase(b)
	lockPair := setup(db)
	ctx := context.Background()
	rawPair := func(coll string, keep bool) func(id string) {
		c := db.Collection(coll, options.Collection().SetWriteConcern(lock.DefaultWriteConcern()))
		return func(id string) {
			if _, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "kid", Value: bson.D{{Key: "$in", Value: bson.A{"k", nil}}}}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "kid", Value: "k"}}}, {Key: "$currentDate", Value: bson.D{{Key: "ts", Value: true}}}},
				options.UpdateOne().SetUpsert(true)); err != nil {
				b.Fatal(err)
			}
			var err error
			if keep {
				_, err = c.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "kid", Value: "k"}}, bson.D{{Key: "$unset", Value: bson.D{{Key: "kid", Value: ""}}}})
			} else {
				_, err = c.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "kid", Value: "k"}})
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	pairs := []func(string){lockPair, rawPair("raw", false), rawPair("rawkeep", true)}
	var took [3]time.Duration
	for i := 0; b.Loop(); i++ {
		id := benchIDs[i%len(benchIDs)]
		// Rotate which goes first so none gains from another's warm
		// caches.
		for j := range pairs {
			k := (i + j) % len(pairs)
			start := time.Now()
			pairs[k](id)
			took[k] += time.Since(start)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(took[0].Microseconds())/n, "lock-µs/pair")
	b.ReportMetric(float64(took[1].Microseconds())/n, "raw-µs/pair")
	b.ReportMetric(float64(took[0])/float64(took[1]), "lock/raw")
	b.ReportMetric(float64(took[0])/float64(took[2]), "lock/raw-keep")
}

// benchIDs are the lock ids the pair benchmarks cycle through.
var benchIDs = func() []string {
	ids := make([]string, 64)
	for i := range ids {
		ids[i] = fmt.Sprintf("id%d", i)
	}
	return ids
}()

// BenchmarkRenew renews n held locks with one batched Renew, against the
// baseline of one Renew call per lock, interleaved in the same loop.
func BenchmarkRenew(b *testing.B) {
	for _, n := range []int{1, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("locks=%d", n), func(b *testing.B) {
			// FerretDB scans the collection and evaluates $in for every
			// document: one call takes minutes at 10 000.
			l, ids := manyLocks(b, n, 1000, "FerretDB evaluates $in without an index")
			ctx := context.Background()
			docs := make([]any, n)
			// Acquire the first properly, insert the rest in bulk to save time.
			mustAcquire(b, ctx, l, ids[0], "k")
			var first bson.M
			if err := l.Collection().FindOne(ctx, bson.D{{Key: "_id", Value: ids[0]}}).Decode(&first); err != nil {
				b.Fatal(err)
			}
			for i := range docs[1:] {
				d := bson.M{}
				for k, v := range first {
					d[k] = v
				}
				d["_id"] = ids[i+1]
				docs[i+1] = d
			}
			if n > 1 {
				if _, err := l.Collection().InsertMany(ctx, docs[1:]); err != nil {
					b.Fatal(err)
				}
			}
			var batched, single time.Duration
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				r, err := l.Renew(ctx, "k", ids...)
				if err != nil || len(r.Held) != n {
					b.Fatalf("batched renew: %d held, %v", len(r.Held), err)
				}
				mid := time.Now()
				for _, id := range ids {
					if r, err := l.Renew(ctx, "k", id); err != nil || len(r.Held) != 1 {
						b.Fatalf("single renew: %v %v", r, err)
					}
				}
				single += time.Since(mid)
				batched += mid.Sub(start)
			}
			reportBatched(b, n, batched, single)
		})
	}
}

// BenchmarkAcquireMany takes n free locks with one AcquireLocks call,
// against the baseline of one AcquireLocks call per lock, interleaved in the
// same loop; each round releases them all with one ReleaseLocks, not timed.
func BenchmarkAcquireMany(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("locks=%d", n), func(b *testing.B) {
			// Each conditional upsert reads the whole collection: a
			// round of a thousand takes about a minute.
			l, ids := manyLocks(b, n, 100, "FerretDB scans the collection for every upsert")
			ctx := context.Background()
			release := func() {
				if got, err := l.ReleaseLocks(ctx, "k", ids...); err != nil || got != n {
					b.Fatalf("released %d of %d: %v", got, n, err)
				}
			}
			var batched, single time.Duration
			for b.Loop() {
				start := time.Now()
				a, err := l.AcquireLocks(ctx, "k", ids...)
				if err != nil || len(a.Granted) != n {
					b.Fatalf("batched acquire: %d acquired, %v", len(a.Granted), err)
				}
				batched += time.Since(start)
				release()
				start = time.Now()
				for _, id := range ids {
					mustAcquire(b, ctx, l, id, "k")
				}
				single += time.Since(start)
				release()
			}
			reportBatched(b, n, batched, single)
		})
	}
}

// manyLocks returns a Locker with a long TTL (and opts) on a fresh
// database and n lock ids, or skips the benchmark on FerretDB above
// ferretMax locks, saying why.
func manyLocks(b *testing.B, n, ferretMax int, why string, opts ...lock.Option) (*lock.Locker, []string) {
	b.Helper()
	if n > ferretMax && mongotest.Backend() == mongotest.BackendFerretDB {
		b.Skipf("over %d locks only on MongoDB (set MONGODB_URI): %s", ferretMax, why)
	}
	l, err := lock.New(mongotest.NewDatabase(b), append([]lock.Option{lock.WithTTL(10 * time.Minute)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	return l, lockIDs(n)
}

// reportBatched reports the time per lock of the batched call and of the
// baseline of one call per lock, and their ratio.
func reportBatched(b *testing.B, n int, batched, single time.Duration) {
	per := float64(b.N) * float64(n)
	b.ReportMetric(float64(batched.Nanoseconds())/per/1e3, "batched-µs/lock")
	b.ReportMetric(float64(single.Nanoseconds())/per/1e3, "single-µs/lock")
	b.ReportMetric(float64(single)/float64(batched), "single/batched")
}
