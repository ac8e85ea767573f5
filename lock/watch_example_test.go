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

// A holder publishes how to reach it with its lease (SetValue); any other
// instance, or a tool, follows the holder as it changes (Watch).
func ExampleLocker_Watch() {
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI(mongotest.URI())) // your MongoDB URI
	if err != nil {
		log.Fatal(err)
	}
	defer client.Disconnect(ctx)
	db := client.Database("example_watch")
	defer db.Drop(ctx)
	locker, err := lock.New(db, lock.WithWatchPeriod(50*time.Millisecond)) // default 1s
	if err != nil {
		log.Fatal(err)
	}
	session, err := lock.NewSession(locker, lock.WithKeeperID("web-1"))
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close()
	m, err := session.Mutex("leader")
	if err != nil {
		log.Fatal(err)
	}
	lease, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if err := lease.SetValue(ctx, []byte("10.0.0.1:8080")); err != nil {
		log.Fatal(err)
	}

	changes, err := locker.Watch(ctx, "leader") // ends with ctx, or a break
	if err != nil {
		log.Fatal(err)
	}
	for h := range changes {
		if h.Released {
			fmt.Println("released")
			break
		}
		fmt.Printf("%s leads; reach it at %s\n", h.KeeperID, h.Value)
		_ = m.ReleaseLock(ctx) // the next change
	}
	// Output:
	// web-1 leads; reach it at 10.0.0.1:8080
	// released
}
