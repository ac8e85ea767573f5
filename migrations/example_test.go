package migrations_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/migrations"
)

func exampleDB(ctx context.Context) (*mongo.Database, func()) {
	client, err := mongo.Connect(options.Client().ApplyURI(mongotest.URI()))
	if err != nil {
		panic(err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	db := client.Database("example_" + hex.EncodeToString(b[:]))
	return db, func() {
		_ = db.Drop(ctx)
		_ = client.Disconnect(ctx)
	}
}

// A deploy step: every instance runs it; one applies, the others wait.
func ExampleMigrator_Up() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, cleanup := exampleDB(ctx)
	defer cleanup()

	m, err := migrations.New(db,
		migrations.WithLockTTL(30*time.Second), // how long a dead migrator holds up the others
		migrations.WithMigrations(
			migrations.EnsureIndex(1, migrations.Index{
				Collection: "users",
				Keys:       bson.D{{Key: "email", Value: 1}},
				Unique:     true,
			}),
			migrations.Migration{
				Version:     2,
				Description: "default plan",
				Definition:  `users.updateMany({plan: {$exists: false}}, {$set: {plan: "free"}})`,
				Up: func(ctx context.Context, db *mongo.Database) error {
					_, err := db.Collection("users").UpdateMany(ctx,
						bson.D{{Key: "plan", Value: bson.D{{Key: "$exists", Value: false}}}},
						bson.D{{Key: "$set", Value: bson.D{{Key: "plan", Value: "free"}}}})
					return err
				},
			},
		))
	if err != nil {
		panic(err)
	}
	res, err := m.Up(ctx)
	if err != nil {
		panic(err)
	}
	for _, a := range res.Applied {
		fmt.Println("applied", a.Version, a.Description)
	}
	res, _ = m.Up(ctx)
	fmt.Println("again:", len(res.Applied))
	// Output:
	// applied -1000 indexes of lock collection "locks"
	// applied -990 indexes of scheduler history "mongolock_runs"
	// applied -980 indexes of term log "mongolock_terms"
	// applied 1 ensure index "email_1" on "users"
	// applied 2 default plan
	// again: 0
}

// In a process that holds other locks too, the migrator takes its lock
// through the process's Session: one keeper id and one keep-alive for all.
func ExampleWithSession() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, cleanup := exampleDB(ctx)
	defer cleanup()

	locker, err := lock.New(db, lock.WithTTL(30*time.Second))
	if err != nil {
		panic(err)
	}
	session, err := lock.NewSession(locker, lock.WithObserver(lock.ObserverFunc(func(e lock.Event) {
		if e.Kind == lock.MigrationApplied {
			fmt.Println("event:", e.Kind, e.Migration)
		}
	})))
	if err != nil {
		panic(err)
	}
	defer session.Close()

	m, err := migrations.New(db, migrations.WithSession(session), migrations.WithMigrations(
		migrations.EnsureIndex(1, migrations.Index{Collection: "users", Keys: bson.D{{Key: "email", Value: 1}}, Unique: true}),
	))
	if err != nil {
		panic(err)
	}
	if _, err := m.Up(ctx); err != nil {
		panic(err)
	}
	// Output:
	// event: migration applied -1000 indexes of lock collection "locks"
	// event: migration applied -990 indexes of scheduler history "mongolock_runs"
	// event: migration applied -980 indexes of term log "mongolock_terms"
	// event: migration applied 1 ensure index "email_1" on "users"
}

// The checksum of an index migration derives from its definition.
func ExampleEnsureIndex() {
	m := migrations.EnsureIndex(3, migrations.Index{
		Collection:         "sessions",
		Keys:               bson.D{{Key: "seen", Value: 1}},
		ExpireAfterSeconds: migrations.TTL(24 * time.Hour),
	})
	fmt.Println(m.Description)
	fmt.Println(m.Definition)
	// Output:
	// ensure index "seen_1" on "sessions"
	// {"op":"ensureIndex","collection":"sessions","name":"seen_1","keys":{"seen":1},"expireAfterSeconds":86400}
}
