// Command myapp is a user's program with the mongolock command built in,
// for cli's tests: two migrations of its own and a job, and no embedded
// server.
package main

import (
	"context"
	"os"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/cli"
	"github.com/mongolock/mongolock/migrations"
)

// AppliedCollection records every run of migration 1's Up.
const AppliedCollection = "myapp_applied"

func main() {
	os.Exit(cli.Main(os.Args[1:], cli.WithName("myapp"),
		cli.WithDatabase("myapp"), // the default of --db
		cli.WithMigrations(
			migrations.Migration{
				Version:     1,
				Description: "record that it ran",
				Definition:  "insert one document into " + AppliedCollection,
				Up:          recordRun,
			},
			migrations.EnsureIndex(2, migrations.Index{
				Collection: "users", Keys: bson.D{{Key: "email", Value: 1}}, Unique: true,
			}),
		),
		cli.WithJobs(cli.Job{Name: "nightly-report", Spec: "0 3 * * *"}),
	))
}

// recordRun inserts a document per run, slowly enough that concurrent
// migrators would overlap if they were not excluded.
func recordRun(ctx context.Context, db *mongo.Database) error {
	select {
	case <-time.After(time.Second):
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	_, err := db.Collection(AppliedCollection).InsertOne(ctx, bson.D{{Key: "pid", Value: os.Getpid()}})
	return err
}
