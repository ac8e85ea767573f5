//go:build unix

package integration

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"

	"github.com/mongolock/mongolock/internal/cluster"
	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
)

// Scenario 3: the database is down for longer than the renew deadline (and
// the TTL), then comes back. The leader must stop within the renew deadline,
// nobody may lead during the outage, and afterwards exactly one instance
// leads again, without any instance being restarted.
func TestDatabaseOutage(t *testing.T) {
	if be := useBackend(t); !be.Embedded {
		t.Skipf("needs a server the test can stop and restart (the embedded FerretDB); %s is not one", be.Kind)
	}
	mongotest.Exclusive(t) // before any other mongotest helper
	c := newCluster(t, testTTL, "tick-a")
	procs := c.spawnN(3)
	first := c.awaitLeader(0, startTimeout)
	c.await(0, 2, 10*time.Second, "writes by the first leader", acceptedBy(first.Instance))

	from := c.Mark()
	stoppedAt := wallNow()
	mongotest.StopServer(t)
	rd := lock.DefaultTimings(testTTL).RenewDeadline
	stop := c.awaitOne(from, hang, "the leader's stop", cluster.IsKindBy(cluster.EvUnlead, first.Instance))
	if outage := 2 * testTTL; time.Since(stoppedAt) < outage {
		sleep(outage - time.Since(stoppedAt))
	}
	during := c.Since(from)
	restarted := c.Mark()
	restartedAt := wallNow()
	mongotest.RestartServer(t)

	next := c.awaitLeader(restarted, hang)
	c.awaitOne(restarted, hang, "a write by the new leader", acceptedBy(next.Instance))
	c.awaitOne(restarted, hang, "a firing after the outage", func(e cluster.Event) bool {
		return e.Kind == cluster.EvRun && e.Firing.After(restartedAt)
	})
	sleep(testTTL) // watch the cluster settle: one leader, no second
	after := c.Since(restarted)

	t.Logf("outage of %v: the leader %s stopped %v after it began (renew deadline %v, cause %q); after the restart %s led %v later",
		restartedAt.Sub(stoppedAt).Round(time.Millisecond), first.Instance, stop.T.Sub(stoppedAt).Round(time.Millisecond), rd, stop.Msg,
		next.Instance, next.T.Sub(restartedAt).Round(time.Millisecond))
	if !stop.Lost {
		t.Errorf("leader's task ended with cause %q, want lock.ErrLeaseLost", stop.Msg)
	}
	for _, e := range during {
		switch {
		case e.Kind == cluster.EvLead:
			t.Errorf("a leader started during the outage: %v", e)
		case e.Kind == cluster.EvWork && e.Accepted && e.Checked.After(stoppedAt):
			t.Errorf("a write was accepted during the outage: %v", e)
		case e.Kind == cluster.EvRun && e.Firing.After(stoppedAt):
			t.Errorf("a job ran during the outage: %v", e)
		}
	}
	// An acquisition sent during the outage may complete right after it,
	// too late to be trusted (its deadline counts from the sending): that
	// term ends at once and the instance campaigns again. So count the
	// terms open at the end, not those started.
	open := c.openTerms()
	t.Logf("after the outage %d term(s) started:\n%s", len(cluster.Filter(after, cluster.IsKind(cluster.EvLead))), format(cluster.Filter(after, func(e cluster.Event) bool {
		return e.Kind == cluster.EvLead || e.Kind == cluster.EvUnlead
	})))
	if len(open) != 1 {
		t.Errorf("after the outage %d leaders, want 1: %v", len(open), open)
	}
	for _, p := range procs {
		if p.Exited() {
			_, err := p.Exit()
			t.Errorf("instance %s exited: %v", p.Name(), err)
		}
	}
	c.checkExclusion()
}

// Scenario 7: the primary steps down (replSetStepDown) while the leader
// renews, and again while the instances campaign after the leader left. No
// two terms may overlap; the leaderless gaps are reported.
func TestPrimaryStepDown(t *testing.T) {
	if be := useBackend(t); !be.ReplicaSet {
		t.Skipf("needs a replica set (replSetStepDown); %s is not one", be.Kind)
	}
	c := newCluster(t, testTTL, "tick-a")
	c.spawnN(3)
	first := c.awaitLeader(0, startTimeout)
	c.await(0, 2, 10*time.Second, "writes by the first leader", acceptedBy(first.Instance))

	rounds := 1
	if *longRun {
		rounds = 3
	}
	for round := range rounds {
		// While the leader renews.
		from := c.Mark()
		took := stepDown(t, c.db)
		next := c.awaitLeader(from, time.Minute)
		c.awaitOne(from, 10*time.Second, "a write by the leader", acceptedBy(next.Instance))
		t.Logf("round %d, step-down while renewing: no primary for %v; %s leads", round, took.Round(time.Millisecond), next.Instance)

		// While the others campaign: the leader leaves (releasing the
		// lock) and the primary steps down at once.
		from = c.Mark()
		leader := c.currentLeader()
		must(t, c.proc(leader).Stop())
		took = stepDown(t, c.db)
		next = c.awaitLeader(from, time.Minute)
		c.awaitOne(from, 10*time.Second, "a write by the leader", acceptedBy(next.Instance))
		t.Logf("round %d, step-down while campaigning (%s left): no primary for %v; %s leads", round, leader, took.Round(time.Millisecond), next.Instance)
		c.spawnN(1)
	}
	terms := cluster.LeaderTerms(c.Events(), wallNow())
	for i, g := range cluster.Gaps(terms) {
		t.Logf("leaderless gap %d: %v (%.2f× TTL)", i+1, g.Round(time.Millisecond), g.Seconds()/testTTL.Seconds())
	}
	c.checkExclusion()
}

// stepDown makes the primary step down and waits until there is a primary
// again, and returns how long there was none.
func stepDown(tb testing.TB, db *mongo.Database) time.Duration {
	tb.Helper()
	admin := db.Client().Database("admin")
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// force: a single-node set has no secondary to catch up. The member
	// stays ineligible for 5s, longer than the TTL.
	err := admin.RunCommand(ctx, bson.D{
		{Key: "replSetStepDown", Value: 5},
		{Key: "secondaryCatchUpPeriodSecs", Value: 1},
		{Key: "force", Value: true},
	}).Err()
	if err != nil && !mongo.IsNetworkError(err) { // it may close connections as it steps down
		tb.Fatalf("replSetStepDown: %v", err)
	}
	// Wait to see no primary, then a primary. A failover faster than the
	// polling may go unseen: then the first primary seen after a while is
	// the new one.
	sawNone := false
	for {
		var hello struct {
			Writable bool   `bson:"isWritablePrimary"`
			Primary  string `bson:"primary"`
		}
		err := admin.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}},
			options.RunCmd().SetReadPreference(readpref.Nearest())).Decode(&hello)
		primary := err == nil && (hello.Writable || hello.Primary != "")
		if err == nil && !primary {
			sawNone = true
		}
		if primary && (sawNone || time.Since(start) > 10*time.Second) {
			return time.Since(start)
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("no primary within a minute of replSetStepDown (last error: %v)", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// currentLeader returns the keeper whose term is open.
func (c *testCluster) currentLeader() string {
	c.tb.Helper()
	open := c.openTerms()
	if len(open) != 1 {
		c.tb.Fatalf("want one open term, have %v", open)
	}
	return open[0].Instance
}
