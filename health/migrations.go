package health

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/migrations"
)

// Migrator is what the readiness check reads of a migrator:
// *migrations.Migrator is one.
type Migrator interface {
	Status(ctx context.Context) ([]migrations.Entry, error)
}

var _ Migrator = (*migrations.Migrator)(nil)

// migratorCheck reads one migrator's status until everything is applied,
// and then remembers it. Concurrent probes share one read.
type migratorCheck struct {
	m       Migrator
	clock   clockwork.Clock
	timeout time.Duration

	mu      sync.Mutex
	applied bool        // every registered migration was applied
	summary string      // what the read that found it said
	reading *statusRead // in progress; nil if none
}

// statusRead is a read of the status that several probes may wait for.
type statusRead struct {
	done chan struct{}
	res  Check
}

// forget makes the next check read the status again (after a rollback).
func (mc *migratorCheck) forget() {
	mc.mu.Lock()
	mc.applied = false
	mc.mu.Unlock()
}

// cached returns the outcome of the check if everything was found applied
// (and no rollback seen since): the check reads nothing then.
func (mc *migratorCheck) cached() (Check, bool) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return Check{OK: true, Reason: mc.summary}, mc.applied
}

// check reports whether every migration the migrator registers is applied,
// reading its status at most once at a time, bounded by the timeout, and
// not at all once it found them applied.
func (mc *migratorCheck) check(ctx context.Context) Check {
	mc.mu.Lock()
	if mc.applied {
		s := mc.summary
		mc.mu.Unlock()
		return Check{OK: true, Reason: s}
	}
	if r := mc.reading; r != nil {
		mc.mu.Unlock()
		select {
		case <-r.done:
			return r.res
		case <-ctx.Done():
			return Check{Reason: "status not read: " + ctx.Err().Error()}
		}
	}
	r := &statusRead{done: make(chan struct{})}
	mc.reading = r
	mc.mu.Unlock()

	r.res = mc.read(ctx)
	mc.mu.Lock()
	mc.reading = nil
	if r.res.OK {
		mc.applied, mc.summary = true, r.res.Reason
	}
	mc.mu.Unlock()
	close(r.done)
	return r.res
}

// read reads the status once.
func (mc *migratorCheck) read(ctx context.Context) Check {
	rctx, cancel := lock.WithTimeout(ctx, mc.clock, mc.timeout)
	defer cancel()
	entries, err := mc.m.Status(rctx)
	if err != nil {
		if ctx.Err() == nil && errors.Is(context.Cause(rctx), context.DeadlineExceeded) {
			return Check{Reason: fmt.Sprintf("status not read within %v: %v", mc.timeout, err)}
		}
		return Check{Reason: "status not read: " + err.Error()}
	}
	var pending []string
	applied := 0
	for _, e := range entries {
		switch e.State {
		case migrations.StateApplied:
			applied++
		case migrations.StateUnknown:
			// Applied by a newer version of the program: not this one's
			// business, and no reason to refuse traffic during a rollout.
		default:
			w := fmt.Sprintf("%d %s (%s", e.Version, e.Description, e.State)
			if e.State == migrations.StateFailed && e.Record != nil && e.Record.Error != "" {
				w += ": " + e.Record.Error
			}
			pending = append(pending, w+")")
		}
	}
	if len(pending) > 0 {
		return Check{Reason: fmt.Sprintf("%d of %d migrations not applied: %s",
			len(pending), len(pending)+applied, strings.Join(pending, ", "))}
	}
	return Check{OK: true, Reason: fmt.Sprintf("%d migrations applied", applied)}
}
