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
	client, counter := mongotest.CountingClient(t)
	db := mongotest.Database(t, client, mongotest.NewDatabase(t).Name())
	const jobs = 50
	seed(t, db, jobs, 500)
	seedHeldLocks(t, db, 2*1000+10) // past the lock snapshot: its pages and lock pages read by id
	clk := clockwork.NewFakeClock()
	h, err := ui.New(db, ui.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(h)
	defer s.Close()

	// round asks viewers times for each of urls, 8 at a time, within one
	// refresh, and returns the commands sent and the answers by status.
	round := func(viewers int, urls []string) (int, map[int]int) {
		clk.Advance(ui.DefaultRefresh) // every reading stale
		counter.Reset()
		codes := make(map[int]int)
		var mu sync.Mutex
		work := make(chan string)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for u := range work {
					resp, err := s.Client().Get(s.URL + u)
					if err != nil {
						t.Error(err)
						continue
					}
					resp.Body.Close()
					if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
						t.Errorf("GET %s: 503 without Retry-After", u)
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
		return counter.Total(), codes
	}
	shared := []string{"/", "/locks", "/elections", "/jobs", "/migrations"}
	base, codes := round(1, shared)
	if codes[http.StatusOK] != len(shared) {
		t.Fatalf("the shared pages: %v", codes)
	}
	// An item reading is one query, two for a page of a lock past the
	// snapshot (its holder, with the server's clock).
	bound := base + 2*ui.MaxItemReadings
	urls := func(n int) []string {
		out := append([]string(nil), shared...)
		for i := range n {
			switch i % 6 {
			case 0:
				out = append(out, fmt.Sprintf("/jobs/job-%04d", i%jobs))
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
	for _, c := range []struct{ viewers, urls int }{{1, 10}, {5, 100}, {20, 1000}} {
		n, codes := round(c.viewers, urls(c.urls))
		t.Logf("%d viewer(s) of %d distinct URLs: %d commands in one refresh (the shared pages alone: %d; bound %d); answers %v",
			c.viewers, c.urls+len(shared), n, base, bound, codes)
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
