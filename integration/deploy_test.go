//go:build unix

package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/cluster"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/migrations"
)

// Scenario 6: ten instances deploy at once. Each runs the migrations at
// start; the application's migration takes a whole TTL (so the migrator must
// renew its lease through it) and counts its runs in the database. It must
// have run exactly once, every instance must have started, and one must
// lead at a time.
//
// On a loaded machine the starting instances and the server can be starved
// of CPU for longer than a renew deadline. A migrator whose lease is lost
// that way stops mid-migration and says so, and the instances that waited
// for it fail with its error: the deploy failed, as it would in
// production, and the test deploys those instances again, as an operator
// would. Then the migration ran once more only if the lost run's side
// effect was already done (the lost run reported it), and a leader whose
// lease was lost (it says so) is followed by another.
func TestTenInstancesDeploy(t *testing.T) {
	const n = 10
	c := newCluster(t, testTTL, "tick-a")
	start := wallNow()
	mod := func(cfg *instanceConfig) { cfg.MigrationTime = testTTL }
	failed := c.deploy(n, mod)
	for round := 1; len(failed) > 0; round++ {
		for _, name := range failed {
			if e := c.failure(name); !strings.Contains(e.Msg, lock.ErrLeaseLost.Error()) {
				t.Fatalf("instance %s failed: %s\n%s", name, e.Msg, c.logsOf(name))
			}
			c.acceptFailure(name)
		}
		t.Logf("deploy %d: %d instance(s) failed on the migrator's lost lease: %s", round, len(failed), strings.Join(failed, ", "))
		if round == 5 {
			t.Fatalf("%d deploys failed on the migrator's lost lease", round)
		}
		failed = c.deploy(len(failed), mod)
	}
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
	var ran, applied, spent, lost int
	var maxWait time.Duration
	migrated := map[string]bool{}
	for _, e := range c.Events() {
		switch e.Kind {
		case cluster.EvMigration:
			ran++
			migrated[e.Instance] = true
		case cluster.EvMigrated:
			maxWait = max(maxWait, e.Waited)
			if len(e.Applied) > 0 {
				applied++
			}
		case cluster.EvError:
			if migrated[e.Instance] {
				spent++ // its run did the side effect, then lost its lease
			}
		case cluster.EvUnlead:
			if e.Lost {
				lost++
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

	t.Logf("%d instances deployed at once: all up in %v; the migration (%v long) ran %d time(s) by the database, %d by the reports (%d of them in runs that lost their lease); %d instance(s) applied migrations, the others waited up to %v; %s leads",
		n, allUp.Sub(start).Round(time.Millisecond), testTTL, deploys.N, ran, spent, applied, maxWait.Round(time.Millisecond), leader.Instance)
	if deploys.N != ran || ran != 1+spent {
		t.Errorf("the migration ran %d times (reported %d, %d of them in runs that lost their lease), want exactly once besides those", deploys.N, ran, spent)
	}
	if starts := cluster.Filter(c.Events(), cluster.IsKind(cluster.EvLead)); len(starts) != 1+lost {
		t.Errorf("%d terms started among %d instances, %d of them lost, want 1 and one after each loss:\n%s", len(starts), n, lost, format(starts))
	}
	c.checkExclusion()
}

// deploy starts n instances at once and waits until each is up or has
// failed; it returns the names of those that failed.
func (c *testCluster) deploy(n int, mods ...func(*instanceConfig)) (failed []string) {
	c.tb.Helper()
	from, ps := c.spawnAll(n, mods...)
	for _, p := range ps {
		e := c.awaitOne(from, hang, p.Name()+" up or failed", func(e cluster.Event) bool {
			return e.Instance == p.Name() && (e.Kind == cluster.EvReady || e.Kind == cluster.EvError || e.Kind == cluster.EvExited)
		})
		if e.Kind != cluster.EvReady {
			failed = append(failed, p.Name())
		}
	}
	return failed
}

// failure returns the event that says why the instance failed.
func (c *testCluster) failure(name string) cluster.Event {
	var last cluster.Event
	for _, e := range c.Events() {
		if e.Instance == name && (e.Kind == cluster.EvError || e.Kind == cluster.EvExited && last.Kind != cluster.EvError) {
			last = e
		}
	}
	return last
}
