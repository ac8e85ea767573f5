package locktest

import (
	"context"
	"errors"
	"time"

	"github.com/mongolock/mongolock/lock"
)

// ErrInjected is the error of a failure switched on with a nil error.
var ErrInjected = errors.New("locktest: injected failure")

// Always, as the count of Fail or FailAfter, fails every call of the
// operation until the switch is turned off (count 0) or Restore.
const Always = -1

// fault is a failure switch: the next n calls fail with err (every call
// while n < 0).
type fault struct {
	n   int
	err error
}

// take consumes one failure; nil if the switch is off.
func (f *fault) take() error {
	if f == nil || f.n == 0 {
		return nil
	}
	if f.n > 0 {
		f.n--
	}
	return f.err
}

// Fail makes the next n calls of op fail with err (ErrInjected if nil)
// without taking effect, as a write the server refused or never got: a
// failed renewal leaves the lease as it was, to expire. A call counts when
// it begins; it still waits out its Delay or Pause before failing. n is
// Always for every call until Fail(op, 0, nil) or Restore; 0 turns the
// switch off.
func (s *Store) Fail(op Op, n int, err error) {
	s.setFault(s.fail, op, n, err)
}

// FailAfter makes the next n calls of op take effect and then fail with
// err (ErrInjected if nil), as a write whose reply was lost: an
// acquisition that reports an error but took the lock, a release that
// reports an error but released it. n as for Fail.
func (s *Store) FailAfter(op Op, n int, err error) {
	s.setFault(s.failAfter, op, n, err)
}

func (s *Store) setFault(m map[Op]*fault, op Op, n int, err error) {
	if err == nil {
		err = ErrInjected
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n == 0 {
		delete(m, op)
		return
	}
	m[op] = &fault{n: n, err: err}
}

// Delay makes every call of op take d on the Store's clock before it
// takes effect (after its BeforeCall hook): a slow server or network. A
// call whose context ends meanwhile fails with its error. 0 removes it.
func (s *Store) Delay(op Op, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d <= 0 {
		delete(s.delay, op)
		return
	}
	s.delay[op] = d
}

// Pause makes calls of ops (of every op if none) wait, after their
// BeforeCall hook and delay and before taking effect, until Resume (or
// Restore) or until their context ends, when they fail with its error: a
// server that stopped answering.
func (s *Store) Pause(ops ...Op) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resumed == nil {
		s.resumed = make(chan struct{})
	}
	if len(ops) == 0 {
		s.pausedAll = true
	}
	for _, op := range ops {
		s.paused[op] = true
	}
}

// Resume lets paused calls, and later ones, proceed.
func (s *Store) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resumed != nil {
		close(s.resumed)
		s.resumed = nil
	}
	s.pausedAll = false
	clear(s.paused)
}

// waitPaused waits while op is paused, until ctx ends.
func (s *Store) waitPaused(ctx context.Context, op Op) error {
	for {
		s.mu.Lock()
		resumed, paused := s.resumed, s.pausedAll || s.paused[op]
		s.mu.Unlock()
		if !paused {
			return nil
		}
		select {
		case <-resumed:
		case <-ctx.Done():
			return ctxErr(ctx)
		}
	}
}

// Restore turns every Fail, FailAfter and Delay off and resumes paused
// calls. Hooks stay.
func (s *Store) Restore() {
	s.mu.Lock()
	clear(s.fail)
	clear(s.failAfter)
	clear(s.delay)
	s.mu.Unlock()
	s.Resume()
}

// Expire ends lockID's lease now, as if its TTL had passed since its last
// renewal: its holder's next renewal finds it lost, anyone may take it
// over, and Holder reports it Expired. It reports whether there was a
// live lease. Like the Store's other levers it bypasses hooks, faults and
// the call log.
func (s *Store) Expire(lockID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.clock.Now()
	e := s.locks[lockID]
	if !s.live(e, now) {
		return false
	}
	e.renewed = now.Add(-s.cfg.ttl)
	return true
}

// TakeOver makes keeperID hold lockID from now, in a new term with a
// larger fence, whoever held it: another process took the lock, or took
// over a lease it judged expired. The former holder's next renewal finds
// it lost.
func (s *Store) TakeOver(lockID, keeperID string) lock.Grant {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.clock.Now()
	return s.grant(lockID, keeperID, now, now)
}

// ForceRelease releases lockID whoever holds it, as Locker.ForceRelease
// does, and reports whether it was held (expired leases included).
func (s *Store) ForceRelease(lockID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.locks[lockID]
	if e == nil || e.keeper == "" {
		return false
	}
	e.keeper, e.renewed = "", s.cfg.clock.Now()
	return true
}

// HeldBy returns the keeper holding a live lease on lockID, "" if none.
// Unlike Holder it is not a call of the Store: no hooks, faults or log.
func (s *Store) HeldBy(lockID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.locks[lockID]; s.live(e, s.cfg.clock.Now()) {
		return e.keeper
	}
	return ""
}
