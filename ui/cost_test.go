package ui_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/ui"
)

// seedHeldLocks writes n held locks (entity/00000, ...) of keeper
// "bench/2", renewed now and for an hour, in one InsertMany, as
// documents: what n holders of one lock each would have written.
func seedHeldLocks(tb testing.TB, db *mongo.Database, n int) {
	tb.Helper()
	now := time.Now().UTC()
	docs := make([]any, 0, n)
	for i := range n {
		docs = append(docs, bson.D{{Key: "_id", Value: fmt.Sprintf("entity/%05d", i)}, {Key: "kid", Value: "bench/2"},
			{Key: "ts", Value: now}, {Key: "at", Value: now}, {Key: "epoch", Value: int64(1_790_000_000)},
			{Key: "seq", Value: int64(1)}, {Key: "ttl", Value: int64(time.Hour / time.Millisecond)}})
	}
	insert(tb, db.Collection("locks"), docs)
}

// costRig is a dashboard on a database seeded with costJobs jobs and
// past the lock snapshot's held locks, its clock fake and its commands
// counted: what TestReadsPerRefreshBounded and BenchmarkReadsPerRefresh
// measure.
type costRig struct {
	srv     *httptest.Server
	clk     *clockwork.FakeClock
	counter *mongotest.Counter
}

const costJobs = 50

// sharedPages are the pages that read only the shared snapshots.
var sharedPages = []string{"/", "/locks", "/elections", "/jobs", "/migrations"}

func newCostRig(tb testing.TB) costRig {
	tb.Helper()
	client, counter := mongotest.CountingClient(tb)
	db := mongotest.Database(tb, client, mongotest.NewDatabase(tb).Name())
	seed(tb, db, costJobs, 500)
	seedHeldLocks(tb, db, 2*1000+10) // past the lock snapshot: its pages and lock pages read by id
	clk := clockwork.NewFakeClock()
	h, err := ui.New(db, ui.WithClock(clk))
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewServer(h)
	tb.Cleanup(srv.Close)
	return costRig{srv: srv, clk: clk, counter: counter}
}

// round asks viewers times for each of urls, 8 at a time, within one
// refresh, and returns the commands sent and the answers by status.
func (r costRig) round(tb testing.TB, viewers int, urls []string) (int, map[int]int) {
	r.clk.Advance(ui.DefaultRefresh) // every reading stale
	r.counter.Reset()
	codes := make(map[int]int)
	var mu sync.Mutex
	work := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for u := range work {
				resp, err := r.srv.Client().Get(r.srv.URL + u)
				if err != nil {
					tb.Error(err)
					continue
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
					tb.Errorf("GET %s: 503 without Retry-After", u)
				}
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	for range viewers {
		for _, u := range urls {
			work <- u
		}
	}
	close(work)
	wg.Wait()
	return r.counter.Total(), codes
}

// costURLs returns the shared pages and n distinct URLs of items: jobs,
// unknown jobs and locks, locks past the snapshot, pages of locks and of
// jobs.
func costURLs(n int) []string {
	out := append([]string(nil), sharedPages...)
	for i := range n {
		switch i % 6 {
		case 0:
			out = append(out, fmt.Sprintf("/jobs/job-%04d", i%costJobs))
		case 1:
			out = append(out, fmt.Sprintf("/jobs/nosuch-%d", i))
		case 2:
			out = append(out, fmt.Sprintf("/locks/nosuch-%d", i))
		case 3:
			out = append(out, fmt.Sprintf("/locks/entity/%05d", i))
		case 4:
			out = append(out, fmt.Sprintf("/locks?prefix=entity/%03d", i%1000))
		default:
			out = append(out, fmt.Sprintf("/jobs?prefix=job-%03d&n=%d", i%100, 10+i%400))
		}
	}
	return out
}

// TestReadsPerRefreshBounded checks, on the command monitor, that the
// dashboard's database work per refresh does not grow with the viewers
// or the distinct URLs they ask for, 404s for unknown jobs and locks
// included: rounds of 1 to 20 viewers of 10 to 1 000 distinct URLs, each
// within one refresh, cost at most what the shared snapshots cost plus
// MaxItemReadings item readings; repeated misses cost one reading; past
// the budget a page answers 503 with Retry-After, never reads.
func TestReadsPerRefreshBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds a database")
	}
	t.Parallel()
	r := newCostRig(t)
	s, clk, counter := r.srv, r.clk, r.counter
	base, codes := r.round(t, 1, sharedPages)
	if codes[http.StatusOK] != len(sharedPages) {
		t.Fatalf("the shared pages: %v", codes)
	}
	// An item reading is one query, two for a page of a lock past the
	// snapshot (its holder, with the server's clock).
	bound := base + 2*ui.MaxItemReadings
	for _, c := range []struct{ viewers, urls int }{{1, 10}, {5, 100}, {20, 1000}} {
		n, codes := r.round(t, c.viewers, costURLs(c.urls))
		t.Logf("%d viewer(s) of %d distinct URLs: %d commands in one refresh (the shared pages alone: %d; bound %d); answers %v",
			c.viewers, c.urls+len(sharedPages), n, base, bound, codes)
		if n > bound {
			t.Errorf("%d viewer(s) of %d URLs: %d commands in one refresh, want at most %d", c.viewers, c.urls, n, bound)
		}
		for code := range codes {
			if code != http.StatusOK && code != http.StatusNotFound && code != http.StatusServiceUnavailable {
				t.Errorf("%d viewer(s) of %d URLs: answers %v", c.viewers, c.urls, codes)
			}
		}
	}

	// Pages past the lock snapshot: a lock read by id, and the locks page
	// paged by id.
	clk.Advance(ui.DefaultRefresh)
	for _, c := range []struct{ path, want, not string }{
		{"/locks/entity/02005", "bench/2", ""},
		{"/locks?after=entity/00999&n=10", "after=entity%2F01009", "entity/00999<"},
		{"/locks?after=entity/01999", "entity/02009", "Next locks"}, // the last page
		{"/locks?prefix=entity/0200", "entity/02009", "entity/01999"},
	} {
		code, body := get(t, s, c.path)
		if code != http.StatusOK || !strings.Contains(body, c.want) || (c.not != "" && strings.Contains(body, c.not)) {
			t.Errorf("GET %s: %d, want 200 with %q and without %q:\n%.2000s", c.path, code, c.want, c.not, body)
		}
	}

	// Misses repeated: 50 requests for an unknown job, and for an unknown
	// lock, cost what one does.
	for _, u := range []string{"/jobs/nosuch", "/locks/nosuch"} {
		clk.Advance(ui.DefaultRefresh)
		if code, _ := get(t, s, "/"); code != http.StatusOK {
			t.Fatalf("GET /: %d", code)
		}
		counter.Reset()
		if code, _ := get(t, s, u); code != http.StatusNotFound {
			t.Fatalf("GET %s: %d, want 404", u, code)
		}
		one := counter.Total()
		for range 49 {
			get(t, s, u)
		}
		if more := counter.Total() - one; more != 0 {
			t.Errorf("49 more requests for %s cost %d more commands (the first %d)", u, more, one)
		}
	}
}

// BenchmarkReadsPerRefresh reports the database commands of one refresh
// interval of the dashboard for 1 to 20 viewers of 15 to 1 005 distinct
// URLs (costURLs: a third of them 404s), against the baseline of the same
// run, one viewer of the shared pages alone: commands/refresh stays flat
// at MaxItemReadings item readings above it, whatever the viewers and
// the URLs.
//
//	go test -run '^$' -bench ReadsPerRefresh -benchtime 3x ./ui/
func BenchmarkReadsPerRefresh(b *testing.B) {
	r := newCostRig(b)
	for _, c := range []struct{ viewers, urls int }{{1, 10}, {1, 1000}, {5, 100}, {20, 10}, {20, 1000}} {
		b.Run(fmt.Sprintf("viewers=%d/urls=%d", c.viewers, c.urls+len(sharedPages)), func(b *testing.B) {
			var cmds, base, reqs int
			for b.Loop() {
				n, _ := r.round(b, 1, sharedPages)
				base += n
				n, codes := r.round(b, c.viewers, costURLs(c.urls))
				cmds += n
				for _, k := range codes {
					reqs += k
				}
			}
			b.ReportMetric(float64(cmds)/float64(b.N), "commands/refresh")
			b.ReportMetric(float64(base)/float64(b.N), "baseline-commands/refresh")
			b.ReportMetric(float64(reqs)/float64(b.N), "requests/refresh")
		})
	}
}
