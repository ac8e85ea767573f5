//go:build unix

package integration

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/cluster"
	"github.com/mongolock/mongolock/migrations"
)

// Scenario 6: ten instances deploy at once. Each runs the migrations at
// start; the application's migration takes a whole TTL (so the migrator must
// renew its lease through it) and counts its runs in the database. It must
// have run exactly once, every instance must have started, and exactly one
// must lead.
func TestTenInstancesDeploy(t *testing.T) {
	const n = 10
	c := newCluster(t, testTTL, "tick-a")
	start := wallNow()
	c.spawnN(n, func(cfg *instanceConfig) { cfg.MigrationTime = testTTL })
	allUp := wallNow()
	leader := c.awaitLeader(0, startTimeout)
	sleep(testTTL) // long enough for a second leader to show up, if one could

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var deploys struct {
		N int `bson:"n"`
	}
	if err := c.db.Collection(deploysColl).FindOne(ctx, bson.D{{Key: "_id", Value: "migration"}}).Decode(&deploys); err != nil {
		t.Fatalf("read the migration's side effect: %v", err)
	}
	var ran, applied int
	var maxWait time.Duration
	for _, e := range c.Events() {
		switch e.Kind {
		case cluster.EvMigration:
			ran++
		case cluster.EvMigrated:
			maxWait = max(maxWait, e.Waited)
			if len(e.Applied) > 0 {
				applied++
			}
		}
	}
	// A migrator that does not know the application's migration reports it
	// as unknown; its record is what matters.
	m, err := migrations.New(c.db, migrations.WithLockTTL(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	status, err := m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range status {
		if s.Record == nil || s.Record.State != migrations.StateApplied {
			t.Errorf("migration %d: record %+v, want applied", s.Version, s.Record)
		}
	}

	t.Logf("%d instances deployed at once: all up in %v; the migration (%v long) ran %d time(s) by the database, %d by the reports; %d instance(s) applied migrations, the others waited up to %v; %s leads",
		n, allUp.Sub(start).Round(time.Millisecond), testTTL, deploys.N, ran, applied, maxWait.Round(time.Millisecond), leader.Instance)
	if deploys.N != 1 || ran != 1 {
		t.Errorf("the migration ran %d times (reported %d), want exactly once", deploys.N, ran)
	}
	if starts := cluster.Filter(c.Events(), cluster.IsKind(cluster.EvLead)); len(starts) != 1 {
		t.Errorf("%d terms started among %d instances, want 1:\n%s", len(starts), n, format(starts))
	}
	c.checkExclusion()
}
