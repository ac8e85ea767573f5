package lock_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/jonboulle/clockwork"
	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
)

// Run work under a lock: Do waits for the lock, keeps it alive while the
// work runs, cancels the work's context if the lease is lost, and releases
// the lock when the work returns.
func Example() {
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI(mongotest.URI())) // your MongoDB URI
	if err != nil {
		log.Fatal(err)
	}
	defer client.Disconnect(ctx)
	db := client.Database("example_lock")
	defer db.Drop(ctx)

	locker, err := lock.New(db, lock.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	if err := locker.EnsureIndexes(ctx); err != nil {
		log.Fatal(err)
	}
	// One Session per process: it owns the keeper id and the keep-alive.
	session, err := lock.NewSession(locker)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close() // releases whatever it still holds

	err = session.Do(ctx, "nightly-report", func(ctx context.Context) error {
		fence, _ := lock.FenceFrom(ctx)
		fmt.Println("running, fence > 0:", fence > 0)
		// ... work, passing the fence to the resource so it can reject a
		// deposed holder, and stopping when ctx is cancelled ...
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// running, fence > 0: true
}

// One attempt with AcquireLock, and what the caller must check.
func ExampleMutex_AcquireLock() {
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI(mongotest.URI()))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Disconnect(ctx)
	db := client.Database("example_lock_mutex")
	defer db.Drop(ctx)
	locker, err := lock.New(db)
	if err != nil {
		log.Fatal(err)
	}
	session, err := lock.NewSession(locker)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close()
	other, err := lock.NewSession(locker) // another instance, say
	if err != nil {
		log.Fatal(err)
	}
	defer other.Close()

	m, err := session.Mutex("nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	lease, ok, err := m.AcquireLock(ctx)
	if err != nil {
		log.Fatal(err) // the outcome is unknown: treat as not acquired
	}
	if !ok {
		fmt.Println("someone else is running the report")
		return
	}
	fmt.Println("acquired, fence > 0:", lease.Fence() > 0)

	// Another instance is turned away while the lease lives.
	m2, _ := other.Mutex("nightly-report")
	_, ok, _ = m2.AcquireLock(ctx)
	fmt.Println("second instance acquired:", ok)

	// ... work, stopping when lease.Done() is closed ...

	if err := m.ReleaseLock(ctx); err != nil {
		log.Fatal(err) // e.g. the lease was lost while working
	}
	fmt.Println("released")
	// Output:
	// acquired, fence > 0: true
	// second instance acquired: false
	// released
}

// A Session's events, logged with log/slog: at Debug, every acquisition
// and release; at Info and Warn, what deserves attention.
func ExampleWithSessionSlog() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // for an output that does not change
			}
			return a
		},
	}))
	store := locktest.New(locktest.WithClock(clockwork.NewFakeClock())) // your lock.New(db)
	session, err := lock.NewSession(store, lock.WithKeeperID("web-1"), lock.WithSessionSlog(logger))
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close()
	err = session.Do(context.Background(), "nightly-report", func(ctx context.Context) error { return nil })
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// level=DEBUG msg=acquired lock=nightly-report keeper=web-1 fence=1 trusted_for=20s
	// level=DEBUG msg=released lock=nightly-report keeper=web-1 fence=1
}

// At most n at once: DoSemaphore runs the function holding one of n slots,
// each slot a lock of its own ("<name>#<k>") with its own fence.
func ExampleSession_DoSemaphore() {
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI(mongotest.URI()))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Disconnect(ctx)
	db := client.Database("example_lock_semaphore")
	defer db.Drop(ctx)
	locker, err := lock.New(db)
	if err != nil {
		log.Fatal(err)
	}
	session, err := lock.NewSession(locker)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close()

	// At most three exports at once, across every process.
	err = session.DoSemaphore(ctx, "exports", 3, func(ctx context.Context) error {
		lease, _ := lock.LeaseFrom(ctx)
		name, slot, _ := lock.ParseSlotID(lease.LockID())
		fmt.Println("holding a slot of", name, "below 3:", slot < 3)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// holding a slot of exports below 3: true
}
