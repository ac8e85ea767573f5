package ui

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/lock"
)

// reader is the one reader of the database in the process: a reading (a
// page's data, the lock list, ...) is made at most once per refresh
// interval, whatever the number of viewers asking for it, and viewers
// asking while it is made wait for it. Readings are made in the goroutine
// of the request that asked first, with a context of their own bounded by
// the read timeout, so a viewer leaving does not fail the others; nothing
// runs when nobody looks.
type reader struct {
	clock   clockwork.Clock
	refresh time.Duration
	timeout time.Duration

	mu      sync.Mutex
	entries map[string]*entry
	reads   int // readings made, for tests
}

type entry struct {
	done  chan struct{} // closed when the reading is made
	at    time.Time     // when it was made, on clock
	value any
	err   error
}

func newReader(clk clockwork.Clock, refresh, timeout time.Duration) *reader {
	return &reader{clock: clk, refresh: refresh, timeout: timeout, entries: make(map[string]*entry)}
}

// get returns the reading of key, made by load if the last one is older
// than the refresh interval (failed readings are not kept). It returns
// ctx's error if ctx ends while it waits for another request's reading.
func get[T any](ctx context.Context, r *reader, key string, load func(context.Context) (T, error)) (T, error) {
	var zero T
	r.mu.Lock()
	e := r.entries[key]
	if e != nil {
		select {
		case <-e.done:
			if r.clock.Since(e.at) >= r.refresh || e.err != nil {
				e = nil // stale: read again
			}
		default: // being read: wait for it
		}
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
		if err != nil && r.entries[key] == e {
			delete(r.entries, key)
		}
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
	for k, e := range r.entries {
		select {
		case <-e.done:
			delete(r.entries, k)
		default: // being read: its waiters keep it
		}
	}
}
