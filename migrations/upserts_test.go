package migrations_test

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/migrations"
)

// TestUpsertsNotIDOnly: the records a Migrator writes (its claim of each
// migration, up and down) are upserts with a condition besides the _id,
// the fence, so that FerretDB 2.x, which runs an _id-only upsert as an
// insert replacing a racer's document, answers a racing migrator with a
// duplicate key (docs/deployments.md). Its lock's upserts are the lock
// package's, keyed on the holder.
func TestUpsertsNotIDOnly(t *testing.T) {
	t.Parallel()
	ups := mongotest.NewUpserts()
	client := mongotest.NewClient(t, options.Client().SetMonitor(ups.Monitor()))
	db := mongotest.Database(t, client, mongotest.NewDatabase(t).Name())
	m, err := migrations.New(db)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if ups.Count(migrations.DefaultCollection) == 0 {
		t.Errorf("no upsert into %q seen: the exercise no longer covers the records", migrations.DefaultCollection)
	}
	for _, u := range ups.IDOnly() {
		t.Errorf("%s: its filter is the _id alone", u)
	}
}
