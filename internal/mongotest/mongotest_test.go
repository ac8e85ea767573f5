package mongotest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
)

// eventually polls f until it succeeds or the deadline passes.
func eventually(t *testing.T, within time.Duration, f func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := f(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after %v: %v", within, err)
		}
		time.Sleep(50 * time.Millisecond) // poll interval, not synchronisation
	}
}

func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

func TestNewDatabaseInsertFind(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	coll := db.Collection("docs")
	if _, err := coll.InsertOne(ctx(t, 5*time.Second), bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: 1}}); err != nil {
		t.Fatal(err)
	}

	// A second client sees the same database.
	other := mongotest.Database(t, mongotest.NewClient(t), db.Name()).Collection("docs")
	var got struct{ N int }
	if err := other.FindOne(ctx(t, 5*time.Second), bson.D{{Key: "_id", Value: "a"}}).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.N != 1 {
		t.Fatalf("n = %d, want 1", got.N)
	}
	t.Logf("backend=%s database=%s", mongotest.Backend(), db.Name())
}

func TestCounterCountsOneInsert(t *testing.T) {
	t.Parallel()
	client, counter := mongotest.CountingClient(t)
	coll := mongotest.Database(t, client, mongotest.NewDatabase(t).Name()).Collection("docs")
	if err := client.Ping(ctx(t, 5*time.Second), nil); err != nil {
		t.Fatal(err)
	}
	counter.Reset()
	if _, err := coll.InsertOne(ctx(t, 5*time.Second), bson.D{{Key: "x", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	if n := counter.Count("insert"); n != 1 {
		t.Errorf("Count(insert) = %d, want 1", n)
	}
	if n := counter.Total(); n != 1 {
		t.Errorf("Total() = %d, want 1", n)
	}
}

func TestIsReplicaSet(t *testing.T) {
	t.Parallel()
	got := mongotest.IsReplicaSet(t, mongotest.NewClient(t))
	if mongotest.Backend() == mongotest.BackendFerretDB && got {
		t.Error("FerretDB reported a replica set")
	}
}

// pair returns a collection seen by a proxied client and by a normal one.
func pair(t *testing.T, opts ...*options.ClientOptions) (proxied, normal *mongo.Collection, f *mongotest.Fault) {
	t.Helper()
	db := mongotest.NewDatabase(t)
	client, f := mongotest.NewProxiedClient(t, opts...)
	proxied = mongotest.Database(t, client, db.Name()).Collection("docs")
	normal = db.Collection("docs")
	if _, err := proxied.InsertOne(ctx(t, 5*time.Second), bson.D{{Key: "_id", Value: "warm"}}); err != nil {
		t.Fatal(err)
	}
	return proxied, normal, f
}

func find(c *mongo.Collection) func(context.Context) error {
	return func(ctx context.Context) error {
		return c.FindOne(ctx, bson.D{{Key: "_id", Value: "warm"}}).Err()
	}
}

func TestFaultCut(t *testing.T) {
	t.Parallel()
	// Without retries the driver reports the broken connection at once
	// instead of waiting in server selection to retry.
	proxied, normal, f := pair(t, options.Client().SetRetryReads(false))

	f.Cut()
	start := time.Now()
	err := find(proxied)(ctx(t, 10*time.Second))
	if !mongo.IsNetworkError(err) {
		t.Fatalf("find through a cut connection: %v, want a network error", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("find took %v to fail, want fast", took)
	}
	if err := find(proxied)(ctx(t, 500*time.Millisecond)); err == nil {
		t.Fatal("second find through a cut connection succeeded")
	}
	if err := find(normal)(ctx(t, 5*time.Second)); err != nil {
		t.Fatalf("normal client during cut: %v", err)
	}

	f.Restore()
	eventually(t, 10*time.Second, find(proxied))
}

func TestFaultSilence(t *testing.T) {
	t.Parallel()
	proxied, normal, f := pair(t)

	f.Silence()
	start := time.Now()
	err := find(proxied)(ctx(t, 500*time.Millisecond))
	if !mongo.IsTimeout(err) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("find through a silenced connection: %v, want a timeout", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("find took %v to time out, want about 500ms", took)
	}
	if err := find(normal)(ctx(t, 5*time.Second)); err != nil {
		t.Fatalf("normal client during silence: %v", err)
	}

	f.Restore()
	eventually(t, 10*time.Second, find(proxied))
}

// TestStopRestart must not run in parallel: it stops the shared server.
func TestStopRestart(t *testing.T) {
	mongotest.Exclusive(t)
	uri := mongotest.URI()
	coll := mongotest.NewDatabase(t).Collection("docs")
	if _, err := coll.InsertOne(ctx(t, 5*time.Second), bson.D{{Key: "_id", Value: "warm"}}); err != nil {
		t.Fatal(err)
	}

	mongotest.StopServer(t)
	if err := find(coll)(ctx(t, time.Second)); err == nil {
		t.Fatal("find while the server is stopped succeeded")
	}

	mongotest.RestartServer(t)
	if got := mongotest.URI(); got != uri {
		t.Fatalf("URI changed across restart: %s -> %s", uri, got)
	}
	eventually(t, 10*time.Second, find(coll)) // same client, same data
}

// TestSerializerConcurrentClients runs 20 clients at once through the
// serializer; every increment of one shared document must survive.
func TestSerializerConcurrentClients(t *testing.T) {
	t.Parallel()
	const clients, ops = 20, 10
	db := mongotest.NewDatabase(t)
	if _, err := db.Collection("c").InsertOne(ctx(t, 5*time.Second), bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: 0}}); err != nil {
		t.Fatal(err)
	}
	colls := make([]*mongo.Collection, clients)
	for i := range colls {
		colls[i] = mongotest.Database(t, mongotest.NewClient(t), db.Name()).Collection("c")
	}

	var wg sync.WaitGroup
	errs := make(chan error, clients*ops)
	for i, c := range colls {
		wg.Go(func() {
			for j := range ops {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if _, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: fmt.Sprintf("%d-%d", i, j)}}); err != nil {
					errs <- err
				}
				err := c.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}).Err()
				if err != nil {
					errs <- err
				}
				cancel()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	var got struct{ N int }
	if err := db.Collection("c").FindOne(ctx(t, 5*time.Second), bson.D{{Key: "_id", Value: 1}}).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.N != clients*ops {
		t.Errorf("n = %d, want %d", got.N, clients*ops)
	}
	n, err := db.Collection("c").CountDocuments(ctx(t, 5*time.Second), bson.D{}, options.Count())
	if err != nil {
		t.Fatal(err)
	}
	if n != clients*ops+1 {
		t.Errorf("%d documents, want %d", n, clients*ops+1)
	}
}
