//go:build unix

package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
)

var failoverTrials = flag.Int("integration.trials", 8, "failovers BenchmarkFailover measures of each kind")

// BenchmarkFailover reports how long the leadership stays vacant when the
// leader's process goes away, as p50 and p99 ratios to the TTL (1s here, so
// the runner's retry period is 67ms and its documented bound, TTL plus a
// retry period, is 1.07× TTL). Three instance processes; each trial times
// from the signal to the next leader task's start, then starts a new
// instance. With 8 trials p99 is the slowest.
//
// "kill" sends SIGKILL at a random point of the leader's renewal cycle: the
// others must wait until its lease expires by the server's clock.
// "graceful", the baseline of the same run, sends SIGTERM: the leader
// releases the lock and the next campaign wins.
func BenchmarkFailover(b *testing.B) {
	for _, kind := range []string{"kill", "graceful"} {
		b.Run(kind, func(b *testing.B) { benchFailover(b, kind == "kill") })
	}
}

func benchFailover(b *testing.B, kill bool) {
	const benchTTL = time.Second
	c := newCluster(b, benchTTL)
	c.spawnN(3)
	leader := c.awaitLeader(0, startTimeout)
	ri := scaled(runner.DefaultRenewInterval, benchTTL)
	var samples []time.Duration
	for range b.N {
		for range *failoverTrials {
			// Not synchronisation: lands anywhere in the renewal cycle.
			sleep(ri + time.Duration(rand.Int64N(int64(ri))))
			from := c.rec.mark()
			p := c.proc(leader.Keeper)
			at := wallNow()
			if kill {
				p.kill(b)
			} else {
				p.terminate(b, instanceStopTimeout)
			}
			next := c.awaitLeader(from, benchTTL+slack+10*time.Second)
			samples = append(samples, next.At.Sub(at))
			c.spawnN(1)
			leader = next
		}
	}
	b.StopTimer()
	ttl := benchTTL.Seconds()
	b.ReportMetric(percentile(samples, 50).Seconds()/ttl, "p50/TTL")
	b.ReportMetric(percentile(samples, 99).Seconds()/ttl, "p99/TTL")
	b.ReportMetric(float64(percentile(samples, 50).Milliseconds()), "p50-ms")
	b.ReportMetric(float64(percentile(samples, 99).Milliseconds()), "p99-ms")
	b.Logf("%d failovers, TTL %v: %v", len(samples), benchTTL, samples)
	c.checkExclusion()
}

// BenchmarkAcquireRelease measures the throughput of uncontended
// AcquireLock+ReleaseLock pairs from several goroutines, against the
// baseline a user would write by hand with the driver (an upsert and a
// delete, with the same write concern), in alternating slots of the same run.
func BenchmarkAcquireRelease(b *testing.B) {
	useBackend(b)
	const (
		workers = 4
		slot    = 500 * time.Millisecond
		rounds  = 3
	)
	db := mongotest.NewDatabase(b)
	l, err := lock.New(db)
	if err != nil {
		b.Fatal(err)
	}
	raw := db.Collection("raw", options.Collection().SetWriteConcern(lock.DefaultWriteConcern()))
	withLock := func(ctx context.Context, id string) error {
		if _, ok, err := l.AcquireLock(ctx, id, "bench"); err != nil || !ok {
			return errors.Join(fmt.Errorf("acquire %s: acquired=%v", id, ok), err)
		}
		return l.ReleaseLock(ctx, id, "bench")
	}
	byHand := func(ctx context.Context, id string) error {
		filter := bson.M{"_id": id, "kid": "bench"}
		set := bson.M{"$set": bson.M{"kid": "bench"}, "$currentDate": bson.M{"ts": true}}
		if _, err := raw.UpdateOne(ctx, filter, set, options.UpdateOne().SetUpsert(true)); err != nil {
			return err
		}
		_, err := raw.DeleteOne(ctx, filter)
		return err
	}
	var lockPairs, rawPairs int
	for range b.N {
		for r := range rounds {
			// Alternate which goes first, so neither gains from the other's
			// warm caches.
			first, second := withLock, byHand
			if r%2 == 1 {
				first, second = byHand, withLock
			}
			n1, n2 := pairsIn(b, slot, workers, first), pairsIn(b, slot, workers, second)
			if r%2 == 1 {
				n1, n2 = n2, n1
			}
			lockPairs += n1
			rawPairs += n2
		}
	}
	secs := float64(b.N*rounds) * slot.Seconds()
	b.ReportMetric(float64(lockPairs)/secs, "lock-pairs/s")
	b.ReportMetric(float64(rawPairs)/secs, "raw-pairs/s")
	b.ReportMetric(float64(lockPairs)/float64(rawPairs), "lock/raw")
}

// pairsIn runs pair from workers goroutines, each on its own ids, for d and
// returns how many calls completed.
func pairsIn(b *testing.B, d time.Duration, workers int, pair func(context.Context, string) error) int {
	b.Helper()
	var stop atomic.Bool
	t := time.AfterFunc(d, func() { stop.Store(true) })
	defer t.Stop()
	ctx := context.Background()
	counts := make([]int, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				if errs[w] = pair(ctx, fmt.Sprintf("w%d-%d", w, i%16)); errs[w] != nil {
					return
				}
				counts[w]++
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	return total
}

// BenchmarkRenewBatch measures one Renew call for 10 000 locks held by one
// keeper, per lock, against the baseline of Renew calls for one lock each,
// in the same loop.
//
// FerretDB evaluates $in in Go against every document it scans (O(n·m)),
// and scans the whole collection for each query: 1 000 locks already take
// seconds per call there, 10 000 would take minutes. So on the embedded
// FerretDB the benchmark uses 1 000 locks; the 10 000 figure is MongoDB's.
func BenchmarkRenewBatch(b *testing.B) {
	be := useBackend(b)
	n := 10000
	if be.Embedded {
		n = 1000
		b.Logf("%s: %d locks instead of 10000 (each query scans the collection and evaluates $in in Go)", be.Kind, n)
	}
	db := mongotest.NewDatabase(b)
	l, err := lock.New(db, lock.WithTTL(10*time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("lock-%05d", i)
	}
	acquireAll(b, l, ids)
	ctx := context.Background()
	const singles = 20
	var batched, single time.Duration
	for b.Loop() {
		start := time.Now()
		r, err := l.Renew(ctx, "bench", ids...)
		if err != nil || len(r.Held) != n {
			b.Fatalf("batched renewal held %d of %d: %v", len(r.Held), n, err)
		}
		mid := time.Now()
		for i := range singles {
			if r, err := l.Renew(ctx, "bench", ids[i*n/singles]); err != nil || len(r.Held) != 1 {
				b.Fatalf("single renewal: %v %v", r, err)
			}
		}
		single += time.Since(mid)
		batched += mid.Sub(start)
	}
	perLock := float64(batched.Microseconds()) / float64(b.N*n)
	perCall := float64(single.Microseconds()) / float64(b.N*singles)
	b.ReportMetric(float64(n), "locks")
	b.ReportMetric(perLock, "batched-µs/lock")
	b.ReportMetric(perCall, "single-µs/call")
	b.ReportMetric(perCall/perLock, "single/batched")
}

// acquireAll takes every lock in ids as keeper "bench", from a few goroutines.
func acquireAll(b *testing.B, l *lock.Locker, ids []string) {
	b.Helper()
	const workers = 8
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(ids); i += workers {
				if _, ok, err := l.AcquireLock(ctx, ids[i], "bench"); err != nil || !ok {
					errs[w] = errors.Join(fmt.Errorf("acquire %s: acquired=%v", ids[i], ok), err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSchedulerRoundTrips counts the database commands three instances'
// schedulers send per firing run, with five "@every 1s" jobs, over whole
// periods. The job's own write is not counted. The scheduler documents six
// round trips for the instance that runs a firing and one (a losing claim)
// for every other: 8 with three instances.
func BenchmarkSchedulerRoundTrips(b *testing.B) {
	const periods = 5
	jobs := []string{"j1", "j2", "j3", "j4", "j5"}
	c := newCluster(b, testTTL, jobs...)
	var counters []*mongotest.Counter
	for range 3 {
		client, cnt := mongotest.CountingClient(b)
		c.startLocal(client, func(cfg *instanceConfig) { cfg.NoRunner = true })
		counters = append(counters, cnt)
	}
	byName := map[string]int{}
	commands, runs := 0, 0
	for range b.N {
		untilMidPeriod(0)
		for _, cnt := range counters {
			cnt.Reset()
		}
		from := c.rec.mark()
		sleep(periods * every)
		for _, cnt := range counters {
			for _, name := range []string{"update", "findAndModify", "insert", "delete", "find", "aggregate", "hello"} {
				byName[name] += cnt.Count(name)
			}
			commands += cnt.Total()
		}
		runs += len(filter(c.rec.since(from), isKind(evJob)))
	}
	if runs == 0 {
		b.Fatal("no firing ran")
	}
	commands -= runs // the jobs' own writes
	byName["update"] -= runs
	b.ReportMetric(float64(commands)/float64(runs), "rt/firing")
	b.ReportMetric(float64(runs)/float64(b.N*periods*len(jobs)), "ran/firing")
	names := make([]string, 0, len(byName))
	for k := range byName {
		names = append(names, k)
	}
	sort.Strings(names)
	var parts []string
	for _, k := range names {
		if byName[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s=%.2f", k, float64(byName[k])/float64(runs)))
		}
	}
	b.Logf("%d runs, %d commands; per firing: %s", runs, commands, strings.Join(parts, " "))
	c.checkExclusion()
}
