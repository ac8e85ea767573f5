package scheduler

import (
	"time"
)

// Admission: how many firings an instance tries at once. A server that
// cannot keep up makes every command slower as more firings share it, until
// none completes in time (a lease granted too late to trust, a lock wait
// over before the lock is taken) and nothing runs at all. So each instance
// limits the firings it is setting up at once (claiming, or resuming its own
// pending claims, taking the lock, recording the start: runs that go on do
// not count), additive increase, multiplicative decrease, as TCP does with
// its window: a firing whose claim, lock and start took d, longer than
// admissionTarget, shrinks the limit by a quarter at least, and down to the
// setups that fit in the target at the pace the server kept (Little's law:
// setups in flight × target / d), at most once per target, so one slow batch
// counts once; one that took less than half of it grows the limit by one (so
// by the whole limit per round of fast setups). The limit starts unbounded,
// so that jobs due together are tried together on a server that keeps up:
// the first slow setups cut it, in one step, to what the server kept up
// with. Firings over the limit are not tried here (ReasonOverloaded); the
// claim after them covers them and runs them late, within the misfire
// threshold. A job whose firing was refused goes
// ahead at its next firing whatever the load, so that the jobs tried first
// at each instant cannot starve it. A firing that waits for its job's lock
// (the previous run holds it) no longer counts: that wait is no load.
const (
	admissionMax = 100_000 // no limit, in effect
	admissionMin = 1
)

// admissionTarget is how long a firing's claim, lock and start may take
// before it counts as slow: half the Session's renew interval, well within
// the lease's trust.
func (s *Scheduler) admissionTarget() time.Duration {
	return s.session.Timings().RenewInterval / 2
}

// admit reports whether another firing may be tried now. Called with s.mu
// held.
func (s *Scheduler) admit() bool {
	return s.setups < int(s.admitLimit)
}

// setupTook adjusts the limit by how long a firing took from its dispatch
// to its start record (or to a lease too late to trust).
func (s *Scheduler) setupTook(d time.Duration) {
	target := s.admissionTarget()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	switch {
	case d > target:
		if now.Sub(s.lastDecrease) >= target {
			inFlight := float64(s.setups + 1)
			fit := inFlight * float64(target) / float64(d)
			s.admitLimit = max(admissionMin, min(s.admitLimit*0.75, inFlight*0.75, fit))
			s.lastDecrease = now
		}
	case d < target/2:
		s.admitLimit = min(admissionMax, s.admitLimit+1)
	}
}

// setupDone ends fr's setup, once: its start was recorded, or it was
// given up. Only firings dispatched by the loop, and resumed claims, count.
func (s *Scheduler) setupDone(fr *firing) {
	if !fr.counted {
		return
	}
	fr.counted = false
	s.mu.Lock()
	s.setups--
	fr.job.setups--
	s.mu.Unlock()
}
