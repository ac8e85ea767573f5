package lock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/address"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/simdb"
	"github.com/mongolock/mongolock/internal/wirefault"
	"github.com/mongolock/mongolock/lock"
)

// Tests of deployments the test server cannot be, played by rules of the
// wire fault layer (internal/wirefault) in front of it.

// rewritten returns a Locker on database dbName through a client whose
// traffic rules rewrite.
func rewritten(t testing.TB, dbName string, rules []wirefault.Rule, opts ...lock.Option) *lock.Locker {
	t.Helper()
	l, err := lock.New(mongotest.Database(t, mongotest.NewRewrittenClient(t, rules), dbName), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestMongosClockAheadNeverTakesOverEarly: behind mongos, hello answers
// with mongos's clock, while leases are stamped by the shard that holds
// them. A contender whose mongos runs 200 ms ahead must still take a lapsed
// lease over only after its holder stopped trusting it.
func TestMongosClockAheadNeverTakesOverEarly(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	dbName := newDB(t)
	holder := onNewClient(t, dbName, lock.WithTTL(ttl))
	contender := rewritten(t, dbName, []wirefault.Rule{wirefault.Mongos(), wirefault.ClockOffset(200 * time.Millisecond)}, lock.WithTTL(ttl))
	ctx := testCtx(t, 30*time.Second)
	for _, id := range []string{"a", "b", "c"} {
		// The holder takes the lock once and never renews it: a crash.
		g := mustAcquire(t, ctx, holder, id, "holder")
		for {
			a, err := contender.AcquireLocks(ctx, "contender", id)
			if err != nil {
				t.Fatal(err)
			}
			if len(a.Granted) == 1 {
				if now := time.Now(); now.Before(g.Deadline) {
					t.Fatalf("%s: the contender took the lease over %v before the holder's deadline", id, g.Deadline.Sub(now))
				}
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestShardedRenewalsAreReadBack: behind mongos an update of several
// documents can count orphaned copies a chunk migration left behind
// (SERVER-20361), so a lease another keeper took over would be counted as
// renewed.
func TestShardedRenewalsAreReadBack(t *testing.T) {
	t.Parallel()
	dbName := newDB(t)
	k := rewritten(t, dbName, []wirefault.Rule{wirefault.Mongos(), wirefault.OrphanMatches(1, nil)})
	other := onNewClient(t, dbName)
	ctx := testCtx(t, 30*time.Second)
	mustAcquire(t, ctx, k, "a", "K")
	mustAcquire(t, ctx, k, "b", "K")
	if err := other.ForceRelease(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, ctx, other, "a", "K2")
	r, err := k.Renew(ctx, "K", "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	if !sameSet(r.Held, []string{"b"}) || !sameSet(r.Lost, []string{"a"}) {
		t.Fatalf("renewal counted orphans: held %v lost %v, want b held and a lost", r.Held, r.Lost)
	}
}

// TestShardedLockCollectionIsRefused: a sharded lock collection would
// spread lock documents over shards with their own clocks.
func TestShardedLockCollectionIsRefused(t *testing.T) {
	t.Parallel()
	dbName := newDB(t)
	sharded := wirefault.RuleFuncs{OnRequest: func(cmd bson.D) (out, reply bson.D) {
		m := map[string]any{}
		for _, e := range cmd {
			m[e.Key] = e.Value
		}
		if m["find"] != "collections" || m["$db"] != "config" {
			return nil, nil
		}
		doc := bson.D{{Key: "_id", Value: dbName + "." + lock.DefaultCollection}, {Key: "key", Value: bson.D{{Key: "_id", Value: "hashed"}}}}
		return nil, bson.D{{Key: "cursor", Value: bson.D{
			{Key: "firstBatch", Value: bson.A{doc}}, {Key: "id", Value: int64(0)}, {Key: "ns", Value: "config.collections"},
		}}, {Key: "ok", Value: 1.0}}
	}}
	l := rewritten(t, dbName, []wirefault.Rule{wirefault.Mongos(), sharded})
	ctx := testCtx(t, 30*time.Second)
	for range 2 { // for good, not once
		if _, err := l.AcquireLocks(ctx, "K", "a"); !errors.Is(err, lock.ErrUnsupportedDeployment) {
			t.Fatalf("acquire on a sharded lock collection: %v, want ErrUnsupportedDeployment", err)
		}
	}
	n, err := l.Collection().CountDocuments(ctx, bson.D{{Key: "_id", Value: "a"}})
	if err != nil || n != 0 {
		t.Fatalf("the refused acquisition wrote %d documents (%v)", n, err)
	}
}

// TestFerretDB2DuplicateKeyIsHeld: FerretDB 2.x answers a findAndModify
// upsert that collides on _id with an InternalError whose message is
// PostgreSQL's; that is "held by another keeper", not a failure.
func TestFerretDB2DuplicateKeyIsHeld(t *testing.T) {
	t.Parallel()
	dbName := newDB(t)
	holder := onNewClient(t, dbName)
	contender := rewritten(t, dbName, []wirefault.Rule{wirefault.DuplicateKeyAsInternalError()})
	ctx := testCtx(t, 30*time.Second)
	mustAcquire(t, ctx, holder, "a", "holder")
	if _, ok, err := acquireOne(ctx, contender, "a", "contender"); ok || err != nil {
		t.Fatalf("contended acquire: ok=%v err=%v, want refused without error", ok, err)
	}
}

// TestFencesIncreaseWhateverTheServersTimestamps: fences must strictly
// increase per lock id on servers whose $currentDate timestamps are not a
// unique increasing tick (FerretDB 2.x: its wall clock), and on a
// standalone restarted with its clock set back. Fences no longer use the
// server's timestamps, so the first two cases guard against going back to
// them (they failed when fences were $currentDate timestamps); the third
// tests the epoch's $max.
func TestFencesIncreaseWhateverTheServersTimestamps(t *testing.T) {
	t.Parallel()
	start := bson.Timestamp{T: uint32(time.Now().Unix()), I: 1}
	clock := wirefault.ServerClock(0)
	for name, rules := range map[string][]wirefault.Rule{
		"tied timestamps":      {wirefault.Timestamps(wirefault.FixedTimestamp(start))},
		"decreasing":           {wirefault.Timestamps(wirefault.Decreasing(start))},
		"clock set back by 1h": {clock},
	} {
		t.Run(name, func(t *testing.T) {
			dbName := newDB(t)
			ls := []*lock.Locker{rewritten(t, dbName, rules), rewritten(t, dbName, rules)}
			ctx := testCtx(t, 30*time.Second)
			var last uint64
			for i := range 6 {
				if i == 3 && name == "clock set back by 1h" {
					clock.Set(-time.Hour)
					// A restarted server: a fresh Locker reads its clock.
					ls[0] = rewritten(t, dbName, rules)
				}
				l, kid := ls[i%2], []string{"A", "B"}[i%2]
				g := mustAcquire(t, ctx, l, "x", kid)
				if g.Fence <= last {
					t.Fatalf("term %d: fence %d, not above the previous %d", i, g.Fence, last)
				}
				last = g.Fence
				if err := releaseOne(ctx, l, "x", kid); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestMixedTTLs: Lockers with different TTLs share a collection. A lease
// lapses its own TTL after its last renewal, whoever takes it over: a
// contender with a 1s TTL takes a 3s lease over after 3s by the server's
// clock, never before; one with a longer TTL takes a shorter lease over
// after the shorter one. How soon, TestMixedTTLsTakeoverOnTime checks.
func TestMixedTTLs(t *testing.T) {
	t.Parallel()
	for _, c := range mixedTTLCases {
		t.Run(c.name(), func(t *testing.T) {
			t.Parallel()
			dbName := newDB(t)
			holder := onNewClient(t, dbName, lock.WithTTL(c.holder))
			contender := onNewClient(t, dbName, lock.WithTTL(c.contender))
			took, _ := mixedTTLTakeover(t, holder, contender)
			t.Logf("taken over %v after the holder's write was sent", took)
		})
	}
}

// TestMixedTTLsTakeoverOnTime: the same on a simulated server, in a
// synctest bubble, where the contender must take the lock at its first
// poll after the holder's lease lapsed: within the holder's TTL and the
// contender's retry period of the holder's write, plus four round trips (see
// TestTakeoverWithinTTLAndPeriod). A contender that waited for its own
// TTL instead of the lease's, or for the wrong one, is 2s late.
func TestMixedTTLsTakeoverOnTime(t *testing.T) {
	t.Parallel()
	for _, c := range mixedTTLCases {
		t.Run(c.name(), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				srv := simdb.NewServer(simdb.MongoDB, 0)
				holder, _, _ := simLocker(t, srv, "holder", simPlan, nil, lock.WithTTL(c.holder))
				contender, _, _ := simLocker(t, srv, "contender", simPlan, nil, lock.WithTTL(c.contender))
				took, rp := mixedTTLTakeover(t, holder, contender)
				// As in TestTakeoverWithinTTLAndPeriod: an attempt takes up
				// to two round trips (the acquisition, and a read of the
				// server's clock when a refusal left the estimate old), and
				// two attempts count, the one refused just before the
				// expiry and the one that takes the lock.
				if late := took - c.holder - rp; late > 4*simRTT {
					t.Fatalf("taken over %v after the lease lapsed plus the retry period, want at most four round trips (%v)", late, 4*simRTT)
				}
			})
		})
	}
}

var mixedTTLCases = []mixedTTLs{{3 * time.Second, time.Second}, {time.Second, 3 * time.Second}}

// mixedTTLs is a holder's and a contender's lease length.
type mixedTTLs struct{ holder, contender time.Duration }

func (c mixedTTLs) name() string {
	return c.holder.String() + " lease, " + c.contender.String() + " contender"
}

// mixedTTLTakeover takes a lock on holder, never renewed, and waits for it
// on a Session of contender's: not before the holder's deadline, with a
// larger fence. It returns how long after the holder's write was sent the
// contender had it, and the contender's retry period.
func mixedTTLTakeover(t *testing.T, holder, contender *lock.Locker) (took, retryPeriod time.Duration) {
	t.Helper()
	s := newSession(t, contender)
	ctx := testCtx(t, time.Minute)
	g := mustAcquire(t, ctx, holder, "x", "holder") // never renewed
	lease, err := newMutex(t, s, "x").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if now.Before(g.Deadline) {
		t.Fatalf("taken over %v before the holder's deadline", g.Deadline.Sub(now))
	}
	if lease.Fence() <= g.Fence {
		t.Fatalf("fence %d, not above the holder's %d", lease.Fence(), g.Fence)
	}
	return now.Sub(g.Sent), s.Timings().RetryPeriod
}

// TestTopologyWatchRefreshesTheClock: a new primary stamps leases with its
// own clock, so a Locker with a topology watch reads the clock again as
// soon as the driver sees one, not a clock refresh interval later.
func TestTopologyWatchRefreshesTheClock(t *testing.T) {
	t.Parallel()
	var clockReads, driverEvents atomic.Int64
	watch := lock.NewTopologyWatch()
	mon := watch.ServerMonitor(&event.ServerMonitor{TopologyDescriptionChanged: func(*event.TopologyDescriptionChangedEvent) {
		driverEvents.Add(1)
	}})
	cmds := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if _, ok := e.Command.Lookup("query", "_id").DocumentOK(); ok && e.CommandName == "findAndModify" {
			clockReads.Add(1)
		}
	}}
	client := mongotest.NewClient(t, options.Client().SetServerMonitor(mon).SetMonitor(cmds))
	l, err := lock.New(mongotest.Database(t, client, newDB(t)), lock.WithTopologyWatch(watch))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 30*time.Second)
	mustAcquire(t, ctx, l, "a", "K")
	mustAcquire(t, ctx, l, "b", "K")
	if n := clockReads.Load(); n != 1 {
		t.Fatalf("%d clock reads for two acquisitions, want 1", n)
	}
	if driverEvents.Load() == 0 {
		t.Fatal("the monitor passed on none of the driver's events")
	}
	primary := func(addr string, election bson.ObjectID) event.TopologyDescription {
		return event.TopologyDescription{Kind: "ReplicaSetWithPrimary", Servers: []event.ServerDescription{
			{Addr: address.Address(addr), Kind: "RSPrimary", ElectionID: election},
			{Addr: "h3:27017", Kind: "RSSecondary"},
		}}
	}
	e1, e2 := bson.NewObjectID(), bson.NewObjectID()
	for _, c := range []struct {
		what          string
		before, after event.TopologyDescription
		reads         int64
	}{
		{"same primary", primary("h1:27017", e1), primary("h1:27017", e1), 0},
		{"no primary", primary("h1:27017", e1), event.TopologyDescription{}, 0},
		{"another primary", primary("h1:27017", e1), primary("h2:27017", e2), 1},
		{"a new election of the same node", primary("h2:27017", e2), primary("h2:27017", e1), 1},
	} {
		before := clockReads.Load()
		mon.TopologyDescriptionChanged(&event.TopologyDescriptionChangedEvent{PreviousDescription: c.before, NewDescription: c.after})
		mustAcquire(t, ctx, l, "a", "K")
		if n := clockReads.Load() - before; n != c.reads {
			t.Errorf("%s: %d clock reads, want %d", c.what, n, c.reads)
		}
	}
}

// TestReadOnlyUserListsLocks: reading the server's clock writes the clock
// document; a user who may only read (a monitoring role) still gets Holder
// and Locks, with the clock read through hello.
func TestReadOnlyUserListsLocks(t *testing.T) {
	t.Parallel()
	dbName := newDB(t)
	holder := onNewClient(t, dbName)
	ctx := testCtx(t, 30*time.Second)
	mustAcquire(t, ctx, holder, "a", "K")
	unauthorized := bson.D{{Key: "ok", Value: 0.0}, {Key: "code", Value: int32(13)}, {Key: "codeName", Value: "Unauthorized"},
		{Key: "errmsg", Value: "not authorized to execute command findAndModify"}}
	var sent atomic.Int64 // commands that reach the server (or the refusal)
	count := wirefault.RuleFuncs{OnRequest: func(cmd bson.D) (out, reply bson.D) {
		if len(cmd) > 0 && cmd[0].Key != "hello" && cmd[0].Key != "isMaster" && cmd[0].Key != "ismaster" {
			sent.Add(1)
		}
		return nil, nil
	}}
	reader := rewritten(t, dbName, []wirefault.Rule{count, wirefault.Fail("findAndModify", nil, unauthorized)})
	h, err := reader.Holder(ctx, "a")
	if err != nil || h.KeeperID != "K" || h.ReadAt.IsZero() || h.Expired {
		t.Fatalf("holder for a read-only user: %+v %v", h, err)
	}
	sent.Store(0)
	if hs, err := reader.Locks(ctx); err != nil || len(hs) != 1 {
		t.Fatalf("locks for a read-only user: %+v %v", hs, err)
	}
	// The refused clock write is not tried again at every read.
	if n := sent.Load(); n != 1 {
		t.Errorf("Locks sent %d commands besides hello, want 1 (the find)", n)
	}
	// hello's time (mongos's, behind mongos) never feeds the estimate
	// takeovers are judged by.
	if _, _, ok := reader.ServerTime(); ok {
		t.Fatal("a hello reading fed the Locker's server-clock estimate")
	}
	if _, err := reader.AcquireLocks(ctx, "R", "b"); err == nil {
		t.Fatal("a read-only user acquired a lock")
	}
}
