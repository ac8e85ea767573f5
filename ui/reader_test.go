package ui

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// TestReader checks the shared reader on a fake clock: a reading is
// shared by every request within the refresh, made anew after it, kept
// for the refresh when it failed too, shared with the requests that wait
// for it, and the readings kept are bounded.
func TestReader(t *testing.T) {
	clk := clockwork.NewFakeClock()
	r := newReader(clk, time.Second, time.Minute)
	ctx := context.Background()
	loads := 0
	load := func(context.Context) (int, error) { loads++; return loads, nil }
	for range 3 {
		if v, err := get(ctx, r, "k", load); err != nil || v != 1 {
			t.Fatalf("within the refresh: %d, %v; want the first reading", v, err)
		}
	}
	clk.Advance(time.Second)
	if v, _ := get(ctx, r, "k", load); v != 2 {
		t.Fatalf("after the refresh: %d, want a new reading", v)
	}
	boom := errors.New("boom")
	if _, err := get(ctx, r, "bad", func(context.Context) (int, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Fatalf("failed reading: %v", err)
	}
	if _, err := get(ctx, r, "bad", load); !errors.Is(err, boom) {
		t.Fatalf("within the refresh of a failed reading: %v, want it kept", err)
	}
	clk.Advance(time.Second)
	if v, err := get(ctx, r, "bad", load); err != nil || v != 3 {
		t.Fatalf("after the refresh of a failed reading: %d, %v; want a new one", v, err)
	}
	if _, err := get(ctx, r, "panics", func(context.Context) (int, error) { panic("oops") }); err == nil {
		t.Fatal("a reading that panics gave no error")
	}

	// Requests that come while a reading is made wait for it.
	release := make(chan struct{})
	started := make(chan struct{})
	var wg sync.WaitGroup
	results := make([]int, 10)
	wg.Go(func() {
		results[0], _ = get(ctx, r, "slow", func(context.Context) (int, error) { close(started); <-release; return 42, nil })
	})
	<-started
	for i := 1; i < len(results); i++ {
		wg.Go(func() {
			results[i], _ = get(ctx, r, "slow", func(context.Context) (int, error) { return -1, nil })
		})
	}
	close(release)
	wg.Wait()
	for i, v := range results {
		if v != 42 && v != -1 {
			t.Errorf("request %d got %d", i, v)
		}
	}
	// A waiter whose context ends stops waiting.
	block := make(chan struct{})
	begun := make(chan struct{})
	wg.Go(func() {
		_, _ = get(ctx, r, "blocked", func(context.Context) (int, error) { close(begun); <-block; return 0, nil })
	})
	<-begun
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := get(cctx, r, "blocked", load); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled waiter: %v", err)
	}
	close(block)
	wg.Wait()

	for i := range 2 * maxCached {
		_, _ = get(ctx, r, fmt.Sprint("many", i), load)
	}
	r.mu.Lock()
	n := len(r.entries)
	r.mu.Unlock()
	if n > maxCached {
		t.Errorf("%d readings kept, want at most %d", n, maxCached)
	}
	r.forget()
	if v, _ := get(ctx, r, "k", load); v == 2 {
		t.Error("forget kept a reading")
	}
}

// TestReaderItemBudget checks that the item readings made per refresh are
// bounded whatever the keys asked for: past maxItemReadings, a new key
// fails with errBusy and reads nothing, while the items already read and
// the snapshots are served; the next interval has a budget of its own.
func TestReaderItemBudget(t *testing.T) {
	clk := clockwork.NewFakeClock()
	r := newReader(clk, time.Second, time.Minute)
	ctx := context.Background()
	loads := 0
	load := func(context.Context) (int, error) { loads++; return loads, nil }
	for i := range 3 * maxItemReadings {
		_, err := getItem(ctx, r, fmt.Sprint("item", i), load)
		if busy := errors.Is(err, errBusy); busy != (i >= maxItemReadings) {
			t.Fatalf("item %d: %v", i, err)
		}
	}
	if loads != maxItemReadings {
		t.Fatalf("%d item readings in one refresh, want %d", loads, maxItemReadings)
	}
	if _, err := getItem(ctx, r, "item0", load); err != nil {
		t.Errorf("an item read in this refresh: %v", err)
	}
	if _, err := get(ctx, r, "snapshot", load); err != nil {
		t.Errorf("a snapshot past the item budget: %v", err)
	}
	clk.Advance(time.Second)
	if _, err := getItem(ctx, r, "new", load); err != nil {
		t.Errorf("an item in the next refresh: %v", err)
	}
}
