package scheduler_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/scheduler"
)

// BenchmarkCluster runs n jobs "@every 1s" on three schedulers (and, as the
// baseline, on one) against one server for a few seconds, and reports:
//
//   - once-%: share of the firings in the window (all instances up) that ran
//     exactly once, once/s the same per second; doubles: firings that ran
//     more than once (must be 0); runs/s: runs begun in the window, of any
//     firing (late ones included: claims resumed, firings caught up);
//   - rt/run: database commands per run, all instances together, and
//     rt/s: commands per second (not counting hello), the Sessions'
//     renewals and releases included;
//   - lag-p50-ms, lag-p99-ms: from the scheduled time to the job's start;
//   - cpu-%/instance: process CPU time over wall time, per instance. With the
//     embedded FerretDB it includes the server's CPU, which runs in the test
//     process.
//
// The "server" baseline reports the single-document upserts per second the
// server sustains on its own.
//
// The "server/docs=n" baselines report the conditional writes per second
// (a filter of more than the _id, as a claim's) the server sustains on a
// collection of n documents. With the embedded FerretDB 1.24 such a
// statement reads and decodes the collection, so the rate falls as jobs
// grow: the curve of runs/s can only follow it down, and runs/s per
// server write shows whether the scheduler keeps its share.
//
// Each size takes warmup + window + warmup whatever b.N is (seven seconds
// by default). All jobs fire together from the first second, and at 300
// jobs and more admission needs tens of seconds to settle after that first
// burst, so measure the larger sizes with a longer warmup:
//
//	go test -run '^$' -bench Cluster -benchtime 1x ./scheduler
//	go test -run '^$' -bench 'Cluster/server$|Cluster/(server|jobs=.*)/(docs=.*|instances=1)$' -benchtime 1x ./scheduler -cluster.warmup=45s -cluster.window=20s
//
// (Cluster/server$ is there because a pattern that matches a benchmark's
// name only in part runs it without reporting it: TestBenchPatternsReport
// checks the documents' patterns.)
func BenchmarkCluster(b *testing.B) {
	// Baseline: what the server does alone, single-document upserts from 64
	// goroutines for a second. A cluster needs about jobs × rt/run of them
	// per second.
	clusterLeaf(b, "server", func(b *testing.B) {
		for range b.N {
			benchServer(b)
		}
	})
	for _, jobs := range []int{10, 100, 300, 1000} {
		// Baseline: conditional writes as a claim's (a filter of more
		// than the _id) on a collection of as many documents as jobs: what
		// the server can do for each of the sizes below.
		clusterLeaf(b, fmt.Sprintf("server/docs=%d", jobs), func(b *testing.B) {
			for range b.N {
				benchServerScan(b, jobs)
			}
		})
		for _, instances := range []int{1, 3} {
			clusterLeaf(b, fmt.Sprintf("jobs=%d/instances=%d", jobs, instances), func(b *testing.B) {
				for range b.N {
					benchCluster(b, jobs, instances)
				}
			})
		}
	}
}

// clusterDry makes BenchmarkCluster's benchmarks say that they ran instead
// of running: for TestBenchPatternsReport, which checks that a pattern
// reports every benchmark it runs.
var clusterDry = flag.Bool("cluster.dry", false, "BenchmarkCluster: print the benchmarks run, and run none")

// clusterDryRan begins the line a dry benchmark prints.
const clusterDryRan = "cluster.dry ran "

// clusterLeaf runs f as the sub-benchmark name of b, unless -cluster.dry.
func clusterLeaf(b *testing.B, name string, f func(*testing.B)) {
	b.Run(name, func(b *testing.B) {
		if *clusterDry {
			fmt.Println(clusterDryRan + b.Name())
			return
		}
		f(b)
	})
}

var (
	clusterWarmup = flag.Duration("cluster.warmup", 1500*time.Millisecond,
		"BenchmarkCluster: time from Start before the window, and after it before Stop")
	clusterWindow = flag.Duration("cluster.window", 4*time.Second,
		"BenchmarkCluster: the window whose firings are counted")
)

func benchCluster(b *testing.B, jobs, instances int) {
	window, warmup := *clusterWindow, *clusterWarmup
	b.StopTimer()
	dbName := mongotest.NewDatabase(b).Name()
	type run struct {
		job   int
		sched time.Time
		start time.Time
	}
	var mu sync.Mutex
	var runs []run
	skips := map[string]int{} // FiringSkipped events by reason, up to its first colon, and the server's error codes
	var counters []*mongotest.Counter
	var scheds []*scheduler.Scheduler
	for i := range instances {
		client, counter := mongotest.CountingClient(b)
		counters = append(counters, counter)
		db := mongotest.Database(b, client, dbName)
		lk, err := lock.New(db, lock.WithTTL(5*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		session, err := lock.NewSession(lk, lock.WithKeeperID(fmt.Sprintf("k%d", i)), lock.WithSessionLogger(benchLogger()),
			lock.WithObserver(lock.ObserverFunc(func(e lock.Event) {
				if e.Kind == lock.FiringSkipped {
					reason, _, _ := strings.Cut(e.Reason, ":")
					if codes := mongo.ErrorCodes(e.Err); len(codes) > 0 {
						reason += fmt.Sprintf(" %v", codes)
					}
					mu.Lock()
					skips[reason]++
					mu.Unlock()
				}
			})))
		if err != nil {
			b.Fatal(err)
		}
		defer func() {
			if err := session.Close(); err != nil {
				b.Error(err)
			}
		}()
		s, err := scheduler.New(db, session)
		if err != nil {
			b.Fatal(err)
		}
		for j := range jobs {
			err := s.AddJob(fmt.Sprintf("job-%04d", j), "@every 1s", func(ctx context.Context) error {
				r, _ := scheduler.RunFromContext(ctx)
				now := time.Now()
				mu.Lock()
				runs = append(runs, run{j, r.Scheduled, now})
				mu.Unlock()
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		scheds = append(scheds, s)
	}
	for _, c := range counters {
		c.Reset()
	}
	b.StartTimer()
	cpu0 := cpuTime()
	t0 := time.Now()
	for _, s := range scheds {
		if err := s.Start(); err != nil {
			b.Fatal(err)
		}
	}
	<-time.After(warmup + window + warmup)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range scheds {
		wg.Go(func() {
			if err := s.Stop(ctx); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	wall := time.Since(t0)
	cpu := cpuTime() - cpu0
	b.StopTimer()

	mu.Lock()
	defer mu.Unlock()
	count := map[[2]int64]int{}
	var lags []time.Duration
	for _, r := range runs {
		count[[2]int64{int64(r.job), r.sched.Unix()}]++
		lags = append(lags, r.start.Sub(r.sched))
	}
	doubles := 0
	for _, n := range count {
		if n > 1 {
			doubles++
		}
	}
	from, to := t0.Add(warmup).Truncate(time.Second).Add(time.Second), t0.Add(warmup+window)
	expected, once := 0, 0
	for f := from; f.Before(to); f = f.Add(time.Second) {
		for j := range jobs {
			expected++
			if count[[2]int64{int64(j), f.Unix()}] == 1 {
				once++
			}
		}
	}
	b.Logf("%d runs; %d of the %d firings in the window ran exactly once", len(runs), once, expected)
	// Whether admission settled: runs begun in each second from the start.
	perSecond := make([]int, int(wall/time.Second)+1)
	for _, r := range runs {
		if i := int(r.start.Sub(t0) / time.Second); i >= 0 && i < len(perSecond) {
			perSecond[i]++
		}
	}
	b.Logf("runs begun in each second from Start: %v; skipped, by reason: %v", perSecond, skips)
	inWindow := 0 // runs begun in the window, of any firing (caught up, late)
	for _, r := range runs {
		if !r.start.Before(t0.Add(warmup)) && r.start.Before(t0.Add(warmup+window)) {
			inWindow++
		}
	}
	total := 0
	byName := map[string]int{}
	for _, c := range counters {
		total += c.Total()
		for k, v := range c.Counts() {
			byName[k] += v
		}
	}
	b.Logf("commands: %v", byName)
	slices.Sort(lags)
	pct := func(p float64) float64 {
		if len(lags) == 0 {
			return 0
		}
		return float64(lags[int(p*float64(len(lags)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(100*float64(once)/float64(expected), "once-%")
	b.ReportMetric(float64(once)/window.Seconds(), "once/s")
	b.ReportMetric(float64(inWindow)/window.Seconds(), "runs/s")
	b.ReportMetric(float64(doubles), "doubles")
	if len(runs) > 0 {
		b.ReportMetric(float64(total)/float64(len(runs)), "rt/run")
	}
	b.ReportMetric(float64(total)/wall.Seconds(), "rt/s")
	b.ReportMetric(pct(0.5), "lag-p50-ms")
	b.ReportMetric(pct(0.99), "lag-p99-ms")
	b.ReportMetric(100*cpu.Seconds()/wall.Seconds()/float64(instances), "cpu-%/instance")
	if doubles > 0 {
		b.Errorf("%d firings ran more than once", doubles)
	}
}

func benchServer(b *testing.B) {
	coll := mongotest.NewDatabase(b).Collection("baseline")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b.ResetTimer()
	b.ReportMetric(writesPerSecond(b, 64, time.Second, func(g, i int) error {
		_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: fmt.Sprint(g, "-", i%50)}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: i}}}}, options.UpdateOne().SetUpsert(true))
		return err
	}), "writes/s")
}

// writesPerSecond calls write(g, i) from workers goroutines g, each with
// i = 0, 1, ..., until d has passed, and returns the successful calls per
// second. A failed call fails b and ends its goroutine.
func writesPerSecond(b *testing.B, workers int, d time.Duration, write func(g, i int) error) float64 {
	var n atomic.Int64
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop); i++ {
				if err := write(g, i); err != nil {
					b.Error(err)
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return float64(n.Load()) / d.Seconds()
}

// benchServerScan measures the conditional single-document updates per
// second the server sustains on a collection of docs documents, from 16
// goroutines for two seconds: each filters on the _id and one more field,
// as a claim or a start record does. FerretDB 1.24 reads the collection for
// such a filter, so its rate falls as the collection grows; MongoDB's does
// not (the _id index).
func benchServerScan(b *testing.B, docs int) {
	coll := mongotest.NewDatabase(b).Collection("scan")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seed := make([]any, docs)
	for i := range seed {
		seed[i] = bson.D{{Key: "_id", Value: fmt.Sprintf("job-%04d", i)}, {Key: "v", Value: 0}}
	}
	if _, err := coll.InsertMany(ctx, seed); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	const workers = 16
	b.ReportMetric(writesPerSecond(b, workers, 2*time.Second, func(g, i int) error {
		_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: fmt.Sprintf("job-%04d", (g+i*workers)%docs)}, {Key: "v", Value: bson.D{{Key: "$gte", Value: 0}}}},
			bson.D{{Key: "$inc", Value: bson.D{{Key: "v", Value: 1}}}})
		return err
	}), "writes/s")
}

// benchLogger shows warnings with -v.
func benchLogger() zerolog.Logger {
	if !testing.Verbose() {
		return zerolog.Nop()
	}
	return zerolog.New(os.Stderr).Level(zerolog.WarnLevel)
}

// cpuTime is the CPU time (user and system) used by the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
