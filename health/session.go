package health

import (
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/mongolock/mongolock/lock"
)

// ErrInvalidArgument is returned by ForSession and WatchSession for a nil
// session.
var ErrInvalidArgument = errors.New("health: invalid argument")

// ForSession returns a Checker (New with opts) that watches s
// (WatchSession), on s's clock unless WithClock says otherwise. It is the
// one call a program needs:
//
//	checker, err := health.ForSession(session)
//	checker.Register(mux) // /livez, /healthz, /readyz, /leader
func ForSession(s *lock.Session, opts ...Option) (*Checker, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: ForSession: nil session", ErrInvalidArgument)
	}
	c, err := New(append([]Option{WithClock(s.Clock())}, opts...)...)
	if err != nil {
		return nil, err
	}
	if err := c.WatchSession(s); err != nil {
		return nil, err
	}
	return c, nil
}

// WatchSession observes s's events (lock.Session.AddObserver: from now on,
// so call it before s takes locks) and checks, at every probe, what is
// built on s (lock.Session.Components), whenever it was built: its
// schedulers' loops (as WatchScheduler), its runners' elections (as
// WatchRunner) and its migrators' migrations (as WatchMigrations; those
// made with migrations.WithSession). If s's store is a *lock.Locker, its
// database is added to readiness (CheckDatabase, and the default
// migrations: WithMigrationOptions). Each is checked once, however often it
// is watched. The Checker's clock should be s's (ForSession sees to it).
func (c *Checker) WatchSession(s *lock.Session) error {
	if s == nil {
		return fmt.Errorf("%w: WatchSession: nil session", ErrInvalidArgument)
	}
	if err := s.AddObserver(c); err != nil {
		return fmt.Errorf("health: watch session: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := s.Store().(*lock.Locker); ok {
		if err := c.watchDatabaseLocked(l); err != nil {
			return err
		}
	}
	if !slices.Contains(c.sessions, s) {
		c.sessions = append(c.sessions, s)
	}
	return nil
}

// syncLocked watches what was built on the watched Sessions since the last
// probe.
func (c *Checker) syncLocked() {
	for _, s := range c.sessions {
		for _, comp := range s.Components() {
			switch x := comp.(type) {
			case Runner:
				c.watchRunnerLocked(x)
			case Scheduler:
				c.watchSchedulerLocked(x)
			case Migrator:
				c.watchMigrationsLocked(x)
			}
		}
	}
}

// firstLocked reports whether x is watched for the first time, and notes
// it. Only pointers are told apart; anything else is watched each time it
// is given. Nil is never watched.
func (c *Checker) firstLocked(x any) bool {
	if x == nil {
		return false
	}
	if reflect.TypeOf(x).Kind() != reflect.Pointer {
		return true
	}
	if _, ok := c.watched[x]; ok {
		return false
	}
	if c.watched == nil {
		c.watched = make(map[any]struct{})
	}
	c.watched[x] = struct{}{}
	return true
}

func (c *Checker) watchSchedulerLocked(s Scheduler) {
	if c.firstLocked(s) {
		c.schedulers = append(c.schedulers, s)
	}
}

func (c *Checker) watchRunnerLocked(r Runner) {
	if c.firstLocked(r) {
		c.runners = append(c.runners, r)
	}
}

func (c *Checker) watchMigrationsLocked(m Migrator) {
	if c.firstLocked(m) {
		c.migrators = append(c.migrators, &migratorCheck{m: m, clock: c.clock, timeout: c.cfg.checkTimeout})
	}
}
