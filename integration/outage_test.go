//go:build unix

package integration

import (
	"context"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"

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
	c.rec.await(t, 0, 2, 10*time.Second, "writes by the first leader", acceptedBy(first.Keeper))

	from := c.rec.mark()
	stoppedAt := wallNow()
	mongotest.StopServer(t)
	rd := lock.DefaultTimings(testTTL).RenewDeadline
	stop := c.rec.awaitOne(t, from, rd+slack, "the leader's stop", isKindBy(evLeadStop, first.Keeper))
	if outage := 2 * testTTL; time.Since(stoppedAt) < outage {
		sleep(outage - time.Since(stoppedAt))
	}
	during := c.rec.since(from)
	restarted := c.rec.mark()
	restartedAt := wallNow()
	mongotest.RestartServer(t)

	next := c.awaitLeader(restarted, testTTL+slack+20*time.Second)
	c.rec.awaitOne(t, restarted, 10*time.Second, "a write by the new leader", acceptedBy(next.Keeper))
	c.rec.awaitOne(t, restarted, testTTL+10*time.Second, "a firing after the outage", func(e event) bool {
		return e.Kind == evJob && e.Scheduled.After(restartedAt)
	})
	sleep(testTTL) // watch the cluster settle: one leader, no second
	after := c.rec.since(restarted)

	t.Logf("outage of %v: the leader %s stopped %v after it began (renew deadline %v, cause %q); after the restart %s led %v later",
		restartedAt.Sub(stoppedAt).Round(time.Millisecond), first.Keeper, stop.At.Sub(stoppedAt).Round(time.Millisecond), rd, stop.Cause,
		next.Keeper, next.At.Sub(restartedAt).Round(time.Millisecond))
	if !stop.Lost {
		t.Errorf("leader's task ended with cause %q, want lock.ErrLeaseLost", stop.Cause)
	}
	if took := stop.At.Sub(stoppedAt); took > rd+slack {
		t.Errorf("leader trusted its lease %v into the outage, want at most the renew deadline %v (+%v)", took, rd, slack)
	}
	for _, e := range during {
		switch {
		case e.Kind == evLeadStart:
			t.Errorf("a leader started during the outage: %v", e)
		case e.Kind == evWork && e.Accepted && e.Checked.After(stoppedAt):
			t.Errorf("a write was accepted during the outage: %v", e)
		case e.Kind == evJob && e.Scheduled.After(stoppedAt):
			t.Errorf("a job ran during the outage: %v", e)
		}
	}
	// An acquisition sent during the outage may complete right after it,
	// too late to be trusted (its deadline counts from the sending): that
	// term ends at once and the instance campaigns again. So count the
	// terms open at the end, not those started.
	var open []span
	for _, s := range leaderTerms(c.rec.all(), c.deaths(), wallNow()) {
		if s.Open {
			open = append(open, s)
		}
	}
	t.Logf("after the outage %d term(s) started:\n%s", len(filter(after, isKind(evLeadStart))), format(filter(after, func(e event) bool {
		return e.Kind == evLeadStart || e.Kind == evLeadStop
	})))
	if len(open) != 1 {
		t.Errorf("after the outage %d leaders, want 1: %v", len(open), open)
	}
	for _, p := range procs {
		select {
		case <-p.done:
			t.Errorf("instance %s exited: %v", p.keeper, p.err)
		default:
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
	c.rec.await(t, 0, 2, 10*time.Second, "writes by the first leader", acceptedBy(first.Keeper))

	rounds := 1
	if *longRun {
		rounds = 3
	}
	for round := range rounds {
		// While the leader renews.
		from := c.rec.mark()
		took := stepDown(t, c.db)
		next := c.awaitLeader(from, time.Minute)
		c.rec.awaitOne(t, from, 10*time.Second, "a write by the leader", acceptedBy(next.Keeper))
		t.Logf("round %d, step-down while renewing: no primary for %v; %s leads", round, took.Round(time.Millisecond), next.Keeper)

		// While the others campaign: the leader leaves (releasing the
		// lock) and the primary steps down at once.
		from = c.rec.mark()
		leader := c.currentLeader()
		c.proc(leader).signal(t, syscall.SIGTERM)
		took = stepDown(t, c.db)
		next = c.awaitLeader(from, time.Minute)
		c.rec.awaitOne(t, from, 10*time.Second, "a write by the leader", acceptedBy(next.Keeper))
		t.Logf("round %d, step-down while campaigning (%s left): no primary for %v; %s leads", round, leader, took.Round(time.Millisecond), next.Keeper)
		c.spawnN(1)
	}
	terms := leaderTerms(c.rec.all(), c.deaths(), wallNow())
	for i, g := range gaps(terms) {
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
func (c *cluster) currentLeader() string {
	c.tb.Helper()
	var open []span
	for _, s := range leaderTerms(c.rec.all(), c.deaths(), wallNow()) {
		if s.Open {
			open = append(open, s)
		}
	}
	if len(open) != 1 {
		c.tb.Fatalf("want one open term, have %v", open)
	}
	return open[0].Keeper
}
