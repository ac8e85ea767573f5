package metrics

import (
	"errors"
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mongolock/mongolock/lock"
)

// ErrInvalidArgument is returned by Register and WatchSession for a nil
// registerer or session.
var ErrInvalidArgument = errors.New("metrics: invalid argument")

// Register returns a Metrics (New with opts), registered on reg, that
// watches s (WatchSession): the metrics of s's locks, and of every runner,
// scheduler and migrator built on s, before or after the call. It is the
// one call a program needs:
//
//	m, err := metrics.Register(reg, session)
//
// Nothing is registered or watched when it returns an error.
func Register(reg prometheus.Registerer, s *lock.Session, opts ...Option) (*Metrics, error) {
	switch {
	case reg == nil:
		return nil, fmt.Errorf("%w: Register: nil registerer", ErrInvalidArgument)
	case s == nil:
		return nil, fmt.Errorf("%w: Register: nil session", ErrInvalidArgument)
	}
	m, err := New(opts...)
	if err != nil {
		return nil, err
	}
	if err := reg.Register(m); err != nil {
		return nil, fmt.Errorf("metrics: register: %w", err)
	}
	if err := m.WatchSession(s); err != nil {
		reg.Unregister(m)
		return nil, err
	}
	return m, nil
}

// elector is what the election series need of a runner:
// *runner.LeaderAwareRunner is one.
type elector interface {
	LockID() string
	IsLeader() bool
}

// WatchSession observes s's events (lock.Session.AddObserver: from now on,
// so call it before s takes locks) and reads, at every scrape, what is
// built on s (lock.Session.Components): the jobs of its schedulers
// (WatchScheduler) and the elections of its runners (AddElections), so
// that their series are present at zero before their first event, whenever
// they were built. It also watches the server clock of s's store when it
// has one, as a *lock.Locker does (WatchLocker). Watching a Session twice,
// or one given this Metrics with lock.WithObserver too, counts its events
// once.
func (m *Metrics) WatchSession(s *lock.Session) error {
	if s == nil {
		return fmt.Errorf("%w: WatchSession: nil session", ErrInvalidArgument)
	}
	if err := s.AddObserver(m); err != nil {
		return fmt.Errorf("metrics: watch session: %w", err)
	}
	m.watchMu.Lock()
	if slices.Contains(m.sessions, s) {
		m.watchMu.Unlock()
		return nil
	}
	m.sessions = append(m.sessions, s)
	m.watchMu.Unlock()
	if sc, ok := s.Store().(ServerClock); ok {
		m.WatchLocker(sc)
	}
	m.refresh()
	return nil
}

// refresh adds the series of the jobs of watched schedulers and of the
// elections of watched Sessions' runners.
func (m *Metrics) refresh() {
	m.jobs.refresh()
	m.watchMu.Lock()
	sessions := m.sessions
	m.watchMu.Unlock()
	for _, s := range sessions {
		for _, c := range s.Components() {
			switch c := c.(type) {
			case JobLister:
				m.AddJobs(c.JobNames()...)
			case elector:
				m.AddElections(c.LockID())
			}
		}
	}
}
