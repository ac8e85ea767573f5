package lock

import (
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
)

// watchers is what a Session tells those who watch it: the observers added
// after NewSession, and the components built on it.
type watchers struct {
	mu         sync.Mutex // serializes AddObserver and guards components
	observers  atomic.Pointer[observers]
	components []any
}

// observers returns the Session's observers: those of WithObserver and
// WithSessionLogger, then those of AddObserver.
func (s *Session) observers() observers {
	if p := s.watch.observers.Load(); p != nil {
		return *p
	}
	return s.cfg.observers
}

// AddObserver adds an observer of the Session's events and of those of the
// runners, schedulers and migrators built on it, as WithObserver does, for
// those given the Session after it was made (metrics.Register,
// health.ForSession). It sees the events from the call on, so call it
// before the Session takes locks. Adding an observer it already has (the
// same pointer) does nothing, so that nothing is counted twice. It is safe
// for concurrent use.
func (s *Session) AddObserver(o Observer) error {
	if o == nil {
		return fmt.Errorf("%w: AddObserver: nil observer", ErrInvalidArgument)
	}
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	cur := s.observers()
	if slices.ContainsFunc(cur, func(x Observer) bool { return samePointer(x, o) }) {
		return nil
	}
	next := append(slices.Clip(cur), o)
	s.watch.observers.Store(&next)
	return nil
}

// samePointer reports whether a and b are the same pointer. Other kinds
// are never the same: comparing two funcs, or structs holding them, would
// panic.
func samePointer(a, b any) bool {
	ta := reflect.TypeOf(a)
	return ta == reflect.TypeOf(b) && ta.Kind() == reflect.Pointer && a == b
}

// AddComponent records c as built on the Session, for those who watch
// everything built on it (Components): the runner, scheduler and migrations
// packages add what their constructors return (a *runner.LeaderAwareRunner,
// a *scheduler.Scheduler, a *migrations.Migrator given WithSession). A
// component stays recorded for the Session's life. Adding nil, or c again,
// does nothing. It is safe for concurrent use.
func (s *Session) AddComponent(c any) {
	if c == nil {
		return
	}
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	if slices.ContainsFunc(s.watch.components, func(x any) bool { return samePointer(x, c) }) {
		return
	}
	s.watch.components = append(s.watch.components, c)
}

// Components returns what was built on the Session (AddComponent), in the
// order it was added. Those who watch a Session read it when they need it,
// so they see components built after they began watching: the metrics
// package at each scrape, the health package at each probe.
func (s *Session) Components() []any {
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	return slices.Clone(s.watch.components)
}
