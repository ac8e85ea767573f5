package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Concurrent requests share commands, one command per key at a time, and
// each request gets its own result.
func TestBatcherGroupsConcurrentRequests(t *testing.T) {
	var inFlight [2]atomic.Int32
	var mu sync.Mutex
	var sizes []int
	b := newBatcher(func(_ context.Context, key int, reqs []int) ([]string, error) {
		if n := inFlight[key].Add(1); n != 1 {
			t.Errorf("%d commands in flight for key %d", n, key)
		}
		defer inFlight[key].Add(-1)
		mu.Lock()
		sizes = append(sizes, len(reqs))
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		out := make([]string, len(reqs))
		for i, r := range reqs {
			out[i] = fmt.Sprint(key, "/", r)
		}
		return out, nil
	})
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Go(func() {
			key := i % 2
			res, err := b.submit(context.Background(), key, i)
			if want := fmt.Sprint(key, "/", i); err != nil || res != want {
				t.Errorf("request %d: %q, %v; want %q", i, res, err, want)
			}
		})
	}
	wg.Wait()
	total, most := 0, 0
	for _, n := range sizes {
		total += n
		most = max(most, n)
	}
	if total != 400 {
		t.Errorf("commands carried %d requests, want 400", total)
	}
	if most < 2 {
		t.Errorf("no command carried more than one request (%d commands)", len(sizes))
	}
	if len(b.queues) != 0 {
		t.Errorf("%d queues left", len(b.queues))
	}
	t.Logf("400 requests in %d commands, the largest of %d", len(sizes), most)
}

// A request whose context ends while it waits is withdrawn: it is in no
// command. One already in a command waits for its result.
func TestBatcherWithdrawsAbandonedRequests(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var sent []int
	b := newBatcher(func(_ context.Context, _ int, reqs []int) ([]int, error) {
		mu.Lock()
		sent = append(sent, reqs...)
		mu.Unlock()
		if reqs[0] == 1 {
			<-release
		}
		return reqs, nil
	})
	first := make(chan error, 1)
	go func() {
		_, err := b.submit(context.Background(), 0, 1)
		first <- err
	}()
	// Wait for request 1 to be in flight, then queue 2 (abandoned) and 3.
	for {
		mu.Lock()
		n := len(sent)
		mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	abandoned := make(chan error, 1)
	go func() {
		_, err := b.submit(ctx, 0, 2)
		abandoned <- err
	}()
	third := make(chan int, 1)
	go func() {
		r, _ := b.submit(context.Background(), 0, 3)
		third <- r
	}()
	for {
		b.mu.Lock()
		n := len(b.queues[0].pending)
		b.mu.Unlock()
		if n == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-abandoned; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned request: %v", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if r := <-third; r != 3 {
		t.Fatalf("third request got %d", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(sent) != "[1 3]" {
		t.Fatalf("sent %v, want [1 3]: the abandoned request must not be sent", sent)
	}
}

// An error reaches every request of its command; a short result list is an
// error, not a panic.
func TestBatcherErrors(t *testing.T) {
	boom := errors.New("boom")
	b := newBatcher(func(_ context.Context, key int, reqs []int) ([]int, error) {
		if key == 0 {
			return nil, boom
		}
		return reqs[1:], nil
	})
	if _, err := b.submit(context.Background(), 0, 1); !errors.Is(err, boom) {
		t.Errorf("got %v, want boom", err)
	}
	if _, err := b.submit(context.Background(), 1, 1); err == nil {
		t.Error("a missing result was not an error")
	}
}
