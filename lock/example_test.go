package lock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
)

func Example() {
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI(mongotest.URI())) // your MongoDB URI
	if err != nil {
		log.Fatal(err)
	}
	defer client.Disconnect(ctx)

	locker, err := lock.New(client.Database("example_lock"), lock.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Database("example_lock").Drop(ctx)
	if err := locker.EnsureIndexes(ctx); err != nil {
		log.Fatal(err)
	}

	me := lock.NewKeeperID()
	lease, ok, err := locker.AcquireLock(ctx, "nightly-report", me)
	if err != nil {
		log.Fatal(err) // the outcome is unknown: treat as not acquired
	}
	if !ok {
		fmt.Println("someone else is running the report")
		return
	}
	fmt.Println("acquired, fence > 0:", lease.Fence > 0)

	// Another instance is turned away while the lease lives.
	_, ok, _ = locker.AcquireLock(ctx, "nightly-report", lock.NewKeeperID())
	fmt.Println("second instance acquired:", ok)

	// ... work, checking time.Now().Before(lease.Deadline), passing
	// lease.Fence to the resource so it can reject a deposed holder ...

	if err := locker.ReleaseLock(ctx, "nightly-report", me); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released")
	// Output:
	// acquired, fence > 0: true
	// second instance acquired: false
	// released
}
