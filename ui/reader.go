package ui

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/lock"
)

// reader is the one reader of the database in the process: a reading (a
// page's data, the lock list, ...) is made at most once per refresh
// interval, whatever the number of viewers asking for it, and viewers
// asking while it is made wait for it; a reading that failed, or found
// nothing, is kept for the interval too. Readings are made in the
// goroutine of the request that asked first, with a context of their own
// bounded by the read timeout, so a viewer leaving does not fail the
// others; nothing runs when nobody looks.
//
// Readings are of two sorts: the snapshots every page shares (get), a
// fixed set, and the readings of one item a URL names (getItem: a job's
// record, a page of its history, a lock's terms), of which at most
// maxItemReadings are made per refresh interval, whatever the URLs: past
// that, a request for an item not read in the interval fails with
// errBusy, at no cost to the database.
type reader struct {
	clock   clockwork.Clock
	refresh time.Duration
	timeout time.Duration

	mu      sync.Mutex
	entries map[string]*entry
	reads   int // readings made, for tests
	// The item readings made in the interval that began at spentFrom.
	spent     int
	spentFrom time.Time
}

// maxItemReadings bounds the item readings made per refresh interval.
const maxItemReadings = 64

// errBusy is a request for an item not read in this refresh interval,
// when the interval's item readings are spent.
var errBusy = errors.New("ui: busy: too many distinct pages read in this refresh interval; retry in a moment")

type entry struct {
	done  chan struct{} // closed when the reading is made
	at    time.Time     // when it was made, on clock
	value any
	err   error
}

func newReader(clk clockwork.Clock, refresh, timeout time.Duration) *reader {
	return &reader{clock: clk, refresh: refresh, timeout: timeout, entries: make(map[string]*entry)}
}

// get returns the snapshot key, read by load if the last reading is
// older than the refresh interval. It returns ctx's error if ctx ends
// while it waits for another request's reading.
func get[T any](ctx context.Context, r *reader, key string, load func(context.Context) (T, error)) (T, error) {
	return read(ctx, r, key, false, load)
}

// getItem is get for a reading of one item a URL names: it fails with
// errBusy rather than read past the interval's maxItemReadings.
func getItem[T any](ctx context.Context, r *reader, key string, load func(context.Context) (T, error)) (T, error) {
	return read(ctx, r, "item:"+key, true, load)
}

func read[T any](ctx context.Context, r *reader, key string, item bool, load func(context.Context) (T, error)) (T, error) {
	var zero T
	r.mu.Lock()
	e := r.entries[key]
	if e != nil {
		select {
		case <-e.done:
			if r.clock.Since(e.at) >= r.refresh {
				e = nil // stale: read again
			}
		default: // being read: wait for it
		}
	}
	if e == nil && item {
		if r.spentFrom.IsZero() || r.clock.Since(r.spentFrom) >= r.refresh {
			r.spent, r.spentFrom = 0, r.clock.Now()
		}
		if r.spent >= maxItemReadings {
			r.mu.Unlock()
			return zero, errBusy
		}
		r.spent++
	}
	if e == nil {
		e = &entry{done: make(chan struct{})}
		r.evictLocked()
		r.entries[key] = e
		r.reads++
		r.mu.Unlock()
		lctx, cancel := lock.WithTimeout(context.WithoutCancel(ctx), r.clock, r.timeout)
		var v T
		var err error
		func() {
			// A reading that panics fails, and its waiters with it.
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("ui: reading %s: panic: %v", key, p)
				}
			}()
			v, err = load(lctx)
		}()
		cancel()
		r.mu.Lock()
		e.value, e.err, e.at = v, err, r.clock.Now()
		close(e.done)
		r.mu.Unlock()
		return v, err
	}
	r.mu.Unlock()
	select {
	case <-e.done:
	case <-ctx.Done():
		return zero, ctx.Err()
	}
	if e.err != nil {
		return zero, e.err
	}
	return e.value.(T), nil
}

// evictLocked keeps at most maxCached readings: stale ones go first, then
// the oldest.
func (r *reader) evictLocked() {
	if len(r.entries) < maxCached {
		return
	}
	var oldestKey string
	var oldest time.Time
	for k, e := range r.entries {
		select {
		case <-e.done:
		default:
			continue // being read
		}
		if r.clock.Since(e.at) >= r.refresh {
			delete(r.entries, k)
			continue
		}
		if oldestKey == "" || e.at.Before(oldest) {
			oldestKey, oldest = k, e.at
		}
	}
	if len(r.entries) >= maxCached && oldestKey != "" {
		delete(r.entries, oldestKey)
	}
}

// readings returns how many readings were made.
func (r *reader) readings() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads
}

// forget drops every reading made, so that the next request reads anew:
// after an action, its author sees its effect at once.
func (r *reader) forget() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spent = 0
	for k, e := range r.entries {
		select {
		case <-e.done:
			delete(r.entries, k)
		default: // being read: its waiters keep it
		}
	}
}
