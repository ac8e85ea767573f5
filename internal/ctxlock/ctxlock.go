// Package ctxlock is a mutex for sections that hold it across a round trip
// to the database: a waiter gives up when its context ends, instead of
// waiting out another caller's round trip, and waits on a channel, which
// testing/synctest counts as durably blocked (a sync.Mutex waiter is not,
// so a simulation would never advance its clock).
package ctxlock

import "context"

// Mutex is a mutual exclusion lock; the zero value is not usable: make
// one with New.
type Mutex struct{ c chan struct{} }

// New returns an unlocked Mutex.
func New() *Mutex { return &Mutex{c: make(chan struct{}, 1)} }

// Lock locks m, or returns ctx's error if ctx ends first.
func (m *Mutex) Lock(ctx context.Context) error {
	select {
	case m.c <- struct{}{}:
		return nil
	default:
	}
	select {
	case m.c <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Unlock unlocks m.
func (m *Mutex) Unlock() { <-m.c }
