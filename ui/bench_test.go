package ui_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/scheduler"
	"github.com/mongolock/mongolock/ui"
)

var (
	benchJobs  = flag.Int("ui.jobs", 1000, "jobs BenchmarkPages seeds")
	benchRuns  = flag.Int("ui.runs", 100000, "history records BenchmarkPages seeds, spread evenly over the jobs")
	benchLocks = flag.Int("ui.locks", 20000, "held locks BenchmarkPages seeds (entity/00000, ...), besides the jobs' released ones")
)

// dbTimer sums the time the server took for the commands of a client (as
// the driver measures it: from sending to the reply), and counts them.
type dbTimer struct {
	mu    sync.Mutex
	total time.Duration
	n     int
}

func (d *dbTimer) monitor() *event.CommandMonitor {
	add := func(took time.Duration) {
		d.mu.Lock()
		d.total += took
		d.n++
		d.mu.Unlock()
	}
	return &event.CommandMonitor{
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) { add(e.Duration) },
		Failed:    func(_ context.Context, e *event.CommandFailedEvent) { add(e.Duration) },
	}
}

// measure returns the database time and commands of f.
func (d *dbTimer) measure(f func()) (time.Duration, int) {
	d.mu.Lock()
	t0, n0 := d.total, d.n
	d.mu.Unlock()
	f()
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.total - t0, d.n - n0
}

// seed writes jobs job documents, their released locks, runs history
// records (every seventh failed, every eleventh a missed firing), and a
// term log of 100 terms, in bulk.
func seed(b testing.TB, db *mongo.Database, jobs, runs int) {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	if _, err := migrationsUp(ctx, db); err != nil {
		b.Fatal(err)
	}
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	perJob := max(runs/jobs, 1)
	var jobDocs, lockDocs []any
	for j := range jobs {
		name := fmt.Sprintf("job-%04d", j)
		last := base.Add(time.Duration(perJob-1) * time.Minute)
		d := bson.D{{Key: "_id", Value: name}, {Key: "last", Value: last}, {Key: "spec", Value: "@every 1m"},
			{Key: "by", Value: "bench/1"}, {Key: "at", Value: last}, {Key: "keeper", Value: "bench/1"},
			{Key: "scheduled", Value: last}, {Key: "start", Value: last.Add(time.Second)}, {Key: "end", Value: last.Add(2 * time.Second)},
			{Key: "fence", Value: bson.Timestamp{T: 1, I: uint32(j)}}, {Key: "outcome", Value: "succeeded"}}
		if j%50 == 0 {
			d = append(d, bson.E{Key: "fails", Value: 2})
		}
		jobDocs = append(jobDocs, d)
		lockDocs = append(lockDocs, bson.D{{Key: "_id", Value: "scheduler/" + name}, {Key: "ts", Value: last}, {Key: "at", Value: last},
			{Key: "epoch", Value: int64(1_790_000_000)}, {Key: "seq", Value: int64(perJob)}, {Key: "ttl", Value: int64(30000)}})
	}
	insert(b, db.Collection(scheduler.DefaultJobsCollection), jobDocs)
	insert(b, db.Collection("locks"), lockDocs)
	batch := make([]any, 0, 5000)
	n := 0
	for i := range perJob {
		for j := range jobs {
			if n == runs {
				break
			}
			f := base.Add(time.Duration(i) * time.Minute)
			name := fmt.Sprintf("job-%04d", j)
			d := bson.D{{Key: "_id", Value: name + "@" + f.Format(time.RFC3339Nano)}, {Key: "job", Value: name}, {Key: "keeper", Value: "bench/1"},
				{Key: "scheduled", Value: f}, {Key: "start", Value: f.Add(10 * time.Millisecond)}, {Key: "end", Value: f.Add(110 * time.Millisecond)},
				{Key: "fence", Value: bson.Timestamp{T: 1, I: uint32(n)}}}
			switch {
			case n%11 == 0:
				d = bson.D{{Key: "_id", Value: name + "@" + f.Format(time.RFC3339Nano)}, {Key: "job", Value: name}, {Key: "scheduled", Value: f},
					{Key: "end", Value: f.Add(time.Minute)}, {Key: "outcome", Value: "skipped"}, {Key: "reason", Value: scheduler.ReasonMisfired},
					{Key: "through", Value: f}, {Key: "count", Value: 1}}
			case n%7 == 0:
				d = append(d, bson.E{Key: "outcome", Value: "failed"}, bson.E{Key: "error", Value: "boom"})
			default:
				d = append(d, bson.E{Key: "outcome", Value: "succeeded"})
			}
			batch = append(batch, d)
			n++
			if len(batch) == cap(batch) {
				insert(b, db.Collection(scheduler.DefaultRunsCollection), batch)
				batch = batch[:0]
			}
		}
	}
	insert(b, db.Collection(scheduler.DefaultRunsCollection), batch)
	var terms []any
	for i := range 100 {
		at := base.Add(time.Duration(i) * time.Hour)
		terms = append(terms, bson.D{{Key: "_id", Value: fmt.Sprintf("leader#%d", i+1)}, {Key: "lock", Value: "leader"}, {Key: "fence", Value: int64(i + 1)},
			{Key: "keeper", Value: fmt.Sprintf("app%d/x", i%3)}, {Key: "start", Value: at}, {Key: "end", Value: at.Add(59 * time.Minute)},
			{Key: "reason", Value: "released"}, {Key: "gap", Value: int64(40)}})
	}
	insert(b, db.Collection("mongolock_terms"), terms)
	b.Logf("seeded %d jobs and %d history records in %v", jobs, n, time.Since(start).Round(time.Millisecond))
}

func insert(b testing.TB, coll *mongo.Collection, docs []any) {
	b.Helper()
	if len(docs) == 0 {
		return
	}
	if _, err := coll.InsertMany(context.Background(), docs, options.InsertMany().SetOrdered(false)); err != nil {
		b.Fatalf("seed %s: %v", coll.Name(), err)
	}
}

// migrationsUp creates the indexes the pages read by: mongolock's
// built-in migrations, as migrate up does.
func migrationsUp(ctx context.Context, db *mongo.Database) (migrations.Result, error) {
	m, err := migrations.New(db)
	if err != nil {
		return migrations.Result{}, err
	}
	return m.Up(ctx)
}

// BenchmarkPages measures the database time of each page of the dashboard
// at -ui.jobs jobs (1 000), -ui.runs history records (100 000) and
// -ui.locks held locks (20 000, written as documents in one InsertMany): every
// reading anew (the shared reader's clock moves past the refresh before
// each), interleaved with a baseline read in the same run, the indexed read
// of one job's last 50 runs that `mongolock jobs JOB --history 50` makes.
// It reports the page's database time per op (db-ms/op), its ratio to the
// baseline (x-baseline), and the commands it sent.
//
//	go test -run '^$' -bench Pages -benchtime 5x ./ui/
func BenchmarkPages(b *testing.B) {
	var timer dbTimer
	client := mongotest.NewClient(b, options.Client().SetMonitor(timer.monitor()))
	db := mongotest.Database(b, client, mongotest.NewDatabase(b).Name())
	seed(b, db, *benchJobs, *benchRuns)
	seedHeldLocks(b, db, *benchLocks)
	clk := clockwork.NewFakeClock()
	h, err := ui.New(db, ui.WithClock(clk), ui.WithReadTimeout(5*time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx := context.Background()
	runs := db.Collection(scheduler.DefaultRunsCollection)
	mid := fmt.Sprintf("job-%04d", *benchJobs/2)
	// A cursor half-way down the job's history: a deep page.
	deep := scheduler.HistoryCursor{At: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(*benchRuns / *benchJobs / 2) * time.Minute)}
	pages := []struct{ name, path string }{
		{"overview", "/"},
		{"locks", "/locks"},
		{"elections", "/elections"},
		{"jobs", "/jobs"},
		{"jobs-prefix", "/jobs?prefix=job-05"},
		{"jobs-last-page", "/jobs?after=job-0950"},
		{"job", "/jobs/" + mid},
		{"job-deep-page", "/jobs/" + mid + "?c=" + deep.String()},
		{"job-failed", "/jobs/" + mid + "?outcome=failed"},
		{"migrations", "/migrations"},
		{"locks-prefix", "/locks?prefix=entity/1"},
		{"locks-page-2", "/locks?after=entity/00999"},
		{"locks-late", "/locks?late=1"},
		{"lock", "/locks/entity/00010"},                                        // in the shared snapshot
		{"lock-far", fmt.Sprintf("/locks/entity/%05d", max(*benchLocks-1, 0))}, // past it: read by id
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			var pageDB, baseDB, wall []time.Duration
			cmds := 0
			for b.Loop() {
				clk.Advance(ui.DefaultRefresh) // every reading is stale: read anew
				d, _ := timer.measure(func() {
					if _, _, err := scheduler.LoadHistory(ctx, runs, mid, 50); err != nil {
						b.Fatal(err)
					}
				})
				baseDB = append(baseDB, d)
				t0 := time.Now()
				d, n := timer.measure(func() {
					resp, err := srv.Client().Get(srv.URL + p.path)
					if err != nil {
						b.Fatal(err)
					}
					body, _ := readAll(resp)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Fatalf("GET %s: %d %.300s", p.path, resp.StatusCode, body)
					}
				})
				wall = append(wall, time.Since(t0))
				pageDB, cmds = append(pageDB, d), n
			}
			pm, bm := median(pageDB), median(baseDB)
			b.ReportMetric(float64(pm.Microseconds())/1000, "db-ms/op")
			b.ReportMetric(float64(bm.Microseconds())/1000, "baseline-db-ms/op")
			b.ReportMetric(float64(pm)/float64(max(bm, 1)), "x-baseline")
			b.ReportMetric(float64(median(wall).Microseconds())/1000, "wall-ms/op")
			b.ReportMetric(float64(cmds), "commands/op")
		})
	}
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
