package lock_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/simdb"
	"github.com/mongolock/mongolock/lock"
)

// TestRoundTrips counts commands with the driver's command monitor: acquire,
// renew-many, release and release of several take one each; the first
// refused acquire adds a read of the holder's TTL; a renewal that lost a
// lock takes two (to say which), and so does acquiring many (to read their
// fences); a Locker's first call adds a hello (and an uncounted buildInfo)
// to learn the deployment, and a write to read the server's clock.
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	client, counter := mongotest.CountingClient(t)
	db := mongotest.Database(t, client, newDB(t))
	l, err := lock.New(db, lock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 30*time.Second)
	// buildInfo, which the probe sends too, is not counted; FerretDB 1.x
	// is asked whether a serializing proxy is in front of it.
	firstAcquire := map[string]int{"hello": 1, "findAndModify": 2}
	if mongotest.Backend() == mongotest.BackendFerretDB {
		firstAcquire["mongolockSerialized"] = 1
	}

	steps := []struct {
		name string
		do   func() error
		want map[string]int
	}{
		{"first acquire", func() error { mustAcquire(t, ctx, l, "warm-up", "k"); return nil },
			firstAcquire}, // the deployment, the clock, the lock

		{"acquire", func() error { mustAcquire(t, ctx, l, "a", "k"); return nil }, map[string]int{"findAndModify": 1}},
		// The first refusal reads how long the lease is; the next, within
		// that lease, does not.
		{"acquire held by other", func() error { _, _, err := acquireOne(ctx, l, "a", "other"); return err }, map[string]int{"findAndModify": 1, "find": 1}},
		{"acquire held by other again", func() error { _, _, err := acquireOne(ctx, l, "a", "other"); return err }, map[string]int{"findAndModify": 1}},
		{"renew many", func() error {
			for _, id := range []string{"b", "c", "d"} {
				mustAcquire(t, ctx, l, id, "k")
			}
			counter.Reset()
			r, err := l.Renew(ctx, "k", "a", "b", "c", "d")
			if len(r.Held) != 4 {
				t.Errorf("renewed %v", r.Held)
			}
			return err
		}, map[string]int{"update": 1}},
		{"release", func() error { return releaseOne(ctx, l, "a", "k") }, map[string]int{"update": 1}},
		{"renew with a lost lock", func() error {
			r, err := l.Renew(ctx, "k", "b", "a")
			if len(r.Held) != 1 || len(r.Lost) != 1 {
				t.Errorf("renew: held %v lost %v", r.Held, r.Lost)
			}
			return err
		}, map[string]int{"update": 1, "find": 1}},
		{"release several", func() error {
			mustAcquire(t, ctx, l, "e", "k")
			counter.Reset()
			n, err := l.ReleaseLocks(ctx, "k", "b", "e")
			if n != 2 {
				t.Errorf("released %d of 2", n)
			}
			return err
		}, map[string]int{"update": 1}},
		{"acquire many", func() error {
			ids := make([]string, 50)
			for i := range ids {
				ids[i] = fmt.Sprint("m", i)
			}
			a, err := l.AcquireLocks(ctx, "k", ids...)
			if len(a.Granted) != len(ids) {
				t.Errorf("acquired %d of %d", len(a.Granted), len(ids))
			}
			return err
		}, map[string]int{"update": 1, "find": 1}},
		{"release many", func() error { _, err := l.ReleaseLocks(ctx, "k", "a", "m0", "m1"); return err }, map[string]int{"update": 1}},
	}
	for _, s := range steps {
		counter.Reset()
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		total := 0
		for cmd, n := range s.want {
			if got := counter.Count(cmd); got != n {
				t.Errorf("%s: %d %s commands, want %d", s.name, got, cmd, n)
			}
			total += n
		}
		if counter.Total() != total {
			t.Errorf("%s: %d commands in all, want %d", s.name, counter.Total(), total)
		}
	}
}

// TestEnsureIndexes: the TTL index is the same whatever TTL the Locker
// uses (Retention), so Lockers with different TTLs never change it under
// each other.
func TestEnsureIndexes(t *testing.T) {
	t.Parallel()
	dbName := newDB(t)
	ctx := testCtx(t, 30*time.Second)
	want := int64(lock.TTLSeconds(lock.Retention))
	for _, ttl := range []time.Duration{30 * time.Second, 1500 * time.Millisecond, lock.MaxTTL} {
		l := onNewClient(t, dbName, lock.WithTTL(ttl))
		for range 2 { // idempotent
			if err := l.EnsureIndexes(ctx); err != nil {
				t.Fatal(err)
			}
		}
		got := indexTTL(t, l)
		switch {
		case mongotest.Backend() == mongotest.BackendFerretDB:
			if got != nil {
				t.Fatalf("FerretDB got a TTL index: %v", *got)
			}
		case got == nil || *got != want:
			t.Fatalf("TTL %v: expireAfterSeconds %v, want %d", ttl, got, want)
		}
	}
}

// indexTTL returns the TTL index's expireAfterSeconds, failing if the
// expected indexes are missing.
func indexTTL(t *testing.T, l *lock.Locker) *int64 {
	t.Helper()
	cur, err := l.Collection().Indexes().List(testCtx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var specs []struct {
		Name string `bson:"name"`
		Key  bson.D `bson:"key"`
		TTL  *int64 `bson:"expireAfterSeconds"`
	}
	if err := cur.All(testCtx(t, 10*time.Second), &specs); err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	var ttl *int64
	for _, s := range specs {
		found[s.Name] = true
		if s.Name == lock.TTLIndexName {
			ttl = s.TTL
		}
	}
	if len(specs) != 3 || !found[lock.TTLIndexName] || !found[lock.KeeperIndexName] {
		t.Fatalf("indexes %+v, want _id, %s and %s", specs, lock.TTLIndexName, lock.KeeperIndexName)
	}
	return ttl
}

// TestEnsureIndexesRaisesAnOldTTLIndex: earlier versions made the TTL
// index follow the lease TTL; EnsureIndexes raises it to Retention in
// place, so leases longer than it are no longer deleted while held.
func TestEnsureIndexesRaisesAnOldTTLIndex(t *testing.T) {
	t.Parallel()
	if mongotest.Backend() == mongotest.BackendFerretDB {
		t.Skip("FerretDB has no TTL indexes")
	}
	dbName := newDB(t)
	ctx := testCtx(t, 30*time.Second)
	l := onNewClient(t, dbName, lock.WithTTL(time.Minute))
	_, err := l.Collection().Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "ts", Value: 1}},
		Options: options.Index().SetName(lock.TTLIndexName).SetExpireAfterSeconds(2)})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	if ttl := indexTTL(t, l); ttl == nil || *ttl != int64(lock.TTLSeconds(lock.Retention)) {
		t.Fatalf("expireAfterSeconds %v, want %d", ttl, lock.TTLSeconds(lock.Retention))
	}
}

// TestReleaseLinear: releasing n terms sends commands whose statements
// each name one lock, so that the bytes sent, and the work of a server that
// plans each filter, grow linearly with n: one filter of every term (an
// $or of {_id, fence} clauses) took 6 s for 10 000 on FerretDB 2.x,
// quadratic in n, past the release timeout. On the simulated server: the
// shape of the commands is the point, and the embedded FerretDB 1.x
// writes 10 000 locks too slowly for a test. The 10 000 terms are not
// held (the simulated server, without indexes, takes long to write them):
// their release sends the same commands. BenchmarkKeepAlive/locks=10000
// releases 10 000 held locks on a real server.
func TestReleaseLinear(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var updates []bson.Raw // the update commands sent
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "update" {
			mu.Lock()
			updates = append(updates, slices.Clone(e.Command))
			mu.Unlock()
		}
	}}
	l, _, _ := simLocker(t, simdb.NewServer(simdb.MongoDB, 0), "app", nil, options.Client().SetMonitor(monitor), lock.WithTTL(time.Minute))
	ctx := testCtx(t, 120*time.Second)
	perTerm := map[int]float64{}
	for _, n := range []int{10, 1000, 10000} {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("n%d-%05d", n, i)
		}
		terms := make([]lock.Term, n)
		held := n <= 1000 // the simulated server has no index: 10 000 take a while
		if held {
			a, err := l.AcquireLocks(ctx, "k", ids...)
			if err != nil || len(a.Granted) != n {
				t.Fatalf("acquire %d: %d granted, %v", n, len(a.Granted), err)
			}
			for i, g := range a.Granted {
				terms[i] = lock.Term{LockID: g.LockID, Fence: g.Fence}
			}
		} else {
			for i, id := range ids {
				terms[i] = lock.Term{LockID: id, Fence: uint64(1_800_000_000)<<32 + uint64(i+1)}
			}
		}
		mu.Lock()
		updates = nil
		mu.Unlock()
		start := time.Now()
		released, err := l.ReleaseTerms(ctx, "k", terms...)
		took := time.Since(start)
		if want := map[bool]int{true: n}[held]; err != nil || released != want {
			t.Fatalf("release %d: %d released, %v", n, released, err)
		}
		mu.Lock()
		statements, size, largest := 0, 0, 0
		for _, cmd := range updates {
			docs, _ := cmd.Lookup("updates").Array().Values()
			for _, d := range docs {
				statements++
				f := len(d.Document().Lookup("q").Document())
				size += f
				largest = max(largest, f)
			}
		}
		mu.Unlock()
		if want := (n + 99) / 100; statements != want {
			t.Errorf("release of %d terms: %d statements, want %d, one per hundred terms", n, statements, want)
		}
		perTerm[n] = float64(size) / float64(n)
		t.Logf("release of %d terms: %d commands, %d statements, filters %d bytes (largest %d), %v", n, len(updates), statements, size, largest, took)
		if largest > 15000 {
			t.Errorf("release of %d terms: a filter of %d bytes; each should name at most a hundred terms", n, largest)
		}
	}
	// Linear: the bytes of filters per term do not grow with n.
	if perTerm[10000] > 1.2*perTerm[1000] {
		t.Errorf("filter bytes per term: %v; want them flat in n", perTerm)
	}
}
