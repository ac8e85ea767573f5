package runner

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mongolock/mongolock/internal/planted"
	"github.com/mongolock/mongolock/lock"
)

// candidateMark follows the leadership's lock id in the lock ids of its
// candidacies: lockID + "@candidate/" + priority + "/" + keeper id.
const candidateMark = "@candidate/"

// yieldRounds is how many campaigns in a row a candidate skips, while the
// lock is free, for a candidate of a higher priority that waits: the
// preferred one campaigns within a retry period of the release, and if it
// cannot, the others lead after two.
const yieldRounds = 2

// Reasons of the TermEnded events of terms that stepped down.
const (
	reasonPreferred = "stepped down for a preferred candidate"
	reasonResigned  = "resigned"
)

// CandidatePrefix returns the prefix of the lock ids of the candidacies
// published for the leadership lockID (WithPriority). Ids under it belong
// to the runner: leave them alone.
func CandidatePrefix(lockID string) string { return lockID + candidateMark }

// Candidate is a runner with a priority (WithPriority), as its candidacy
// lock tells.
type Candidate struct {
	LockID   string // the leadership's lock id
	KeeperID string
	Priority int
	// Since is when the candidacy began, on the server's clock. A
	// candidate that comes and goes begins again each time.
	Since time.Time
}

// ParseCandidate reports whether h is a candidacy lock, and whose. It is
// for tools that list locks (mongolock locks); it does not say whether the
// candidacy is live (h.Expired, h.Released).
func ParseCandidate(h lock.Holder) (Candidate, bool) {
	i := strings.Index(h.LockID, candidateMark)
	if i <= 0 {
		return Candidate{}, false
	}
	rest := h.LockID[i+len(candidateMark):]
	j := strings.IndexByte(rest, '/')
	if j <= 0 || j == len(rest)-1 {
		return Candidate{}, false
	}
	p, err := strconv.Atoi(rest[:j])
	if err != nil {
		return Candidate{}, false
	}
	kid := h.KeeperID
	if kid == "" {
		kid = rest[j+1:]
	}
	return Candidate{LockID: h.LockID[:i], KeeperID: kid, Priority: p, Since: h.AcquiredAt}, true
}

// candidateLister is what the runner needs of its session's store to find
// the candidates: a *lock.Locker has it.
type candidateLister interface {
	LocksWithPrefix(ctx context.Context, prefix string) ([]lock.Holder, error)
}

var _ candidateLister = (*lock.Locker)(nil)

// candidacy is a runner's part in the preference among candidates. It is
// used only by the goroutine holding the gate.
type candidacy struct {
	lister candidateLister
	mutex  *lock.Mutex // this runner's candidacy lock
	// seen is when each live candidacy (by lock id, for its fence) was
	// first seen, on the runner's clock: how long a candidate has waited
	// is judged from there, so a candidate that comes and goes starts
	// waiting again each time.
	seen      map[string]seenCandidate
	lastCheck time.Time // runner clock: the last look for a preferred candidate
	yielded   int       // campaigns skipped in a row for a higher candidate
}

type seenCandidate struct {
	fence uint64
	since time.Time
	cand  Candidate
}

// initCandidacy checks the candidate options and prepares the candidacy.
func (r *LeaderAwareRunner) initCandidacy() error {
	if r.cfg.neverLead && r.cfg.hasPriority {
		return fmt.Errorf("%w: WithNeverLead and WithPriority: an observer is no candidate", ErrInvalidOption)
	}
	if !r.cfg.hasPriority {
		return nil
	}
	lister, ok := r.session.Store().(candidateLister)
	if !ok {
		return fmt.Errorf("%w: WithPriority: the session's store (%T) cannot list locks by prefix (LocksWithPrefix)",
			ErrInvalidOption, r.session.Store())
	}
	id := CandidatePrefix(r.lockID) + strconv.Itoa(r.cfg.priority) + "/" + r.KeeperID()
	m, err := r.session.Mutex(id)
	if err != nil {
		return fmt.Errorf("new runner: candidacy: %w", err)
	}
	r.cand = candidacy{lister: lister, mutex: m, seen: make(map[string]seenCandidate)}
	return nil
}

// publishCandidacy makes sure this runner's candidacy is published, while it does
// not lead. A failure is the session's to report; the next campaign tries
// again.
func (r *LeaderAwareRunner) publishCandidacy(ctx context.Context) {
	m := r.cand.mutex
	if m == nil {
		return
	}
	if l := m.Lease(); l != nil {
		if l.Err() == nil {
			return
		}
		_ = m.ReleaseLock(ctx) // lost: let go before it is taken again
	}
	_, _, _ = m.AcquireLock(ctx)
}

// withdraw ends this runner's candidacy: it resigned or stops. The
// release is bounded by the session's release timeout.
func (r *LeaderAwareRunner) withdraw() {
	if m := r.cand.mutex; m != nil && m.Lease() != nil {
		_ = m.ReleaseLock(context.Background())
	}
}

// candidates reads the live candidacies of the others, and notes when
// each was first seen.
func (r *LeaderAwareRunner) candidates(ctx context.Context) ([]seenCandidate, error) {
	lctx, cancel := lock.WithTimeout(ctx, r.clock, r.session.Timings().RetryPeriod)
	hs, err := r.cand.lister.LocksWithPrefix(lctx, CandidatePrefix(r.lockID))
	cancel()
	if err != nil {
		return nil, err
	}
	now := r.clock.Now()
	mine := r.cand.mutex.LockID()
	live := make(map[string]bool, len(hs))
	var out []seenCandidate
	for _, h := range hs {
		c, ok := ParseCandidate(h)
		if !ok || h.LockID == mine || h.Released || h.Expired || c.LockID != r.lockID {
			continue
		}
		live[h.LockID] = true
		s, known := r.cand.seen[h.LockID]
		if !known || s.fence != h.Fence {
			s = seenCandidate{fence: h.Fence, since: now}
		}
		s.cand = c
		r.cand.seen[h.LockID] = s
		out = append(out, s)
	}
	for id := range r.cand.seen {
		if !live[id] {
			delete(r.cand.seen, id)
		}
	}
	return out, nil
}

// higherWaiting reports whether a candidate of a higher priority than this
// runner's waits.
func (r *LeaderAwareRunner) higherWaiting(ctx context.Context) bool {
	cs, err := r.candidates(ctx)
	if err != nil {
		return false
	}
	for _, s := range cs {
		if s.cand.Priority > r.cfg.priority {
			return true
		}
	}
	return false
}

// yield reports whether this campaign is skipped for a higher candidate
// (see yieldRounds). It publishes this runner's candidacy first. A skipped
// campaign reads who leads instead.
func (r *LeaderAwareRunner) yield(ctx context.Context) bool {
	if !r.cfg.hasPriority {
		return false
	}
	r.publishCandidacy(ctx)
	if r.cand.yielded >= yieldRounds || !r.higherWaiting(ctx) {
		r.cand.yielded = 0
		return false
	}
	r.cand.yielded++
	r.lastCampaign = r.clock.Now()
	if r.observe(ctx) {
		r.cand.yielded = 0 // held: the rounds count from when it is free
	}
	return true
}

// preferred returns the cause to step down with, or nil: a candidate of a
// strictly higher priority has been seen waiting for the preference grace,
// and t has lasted as long (so handovers for preference are at most one
// per grace). Of several, the highest priority, then the longest waiting.
func (r *LeaderAwareRunner) preferred(ctx context.Context, t *term) error {
	if !r.cfg.hasPriority {
		return nil
	}
	now := r.clock.Now()
	r.cand.lastCheck = now
	cs, err := r.candidates(ctx)
	grace := r.cfg.preferenceGrace
	if planted.On(planted.StepDownAtOnce) { // planted: no grace
		grace = 0
	}
	if err != nil || now.Sub(t.started) < grace {
		return nil
	}
	var best *seenCandidate
	for i, s := range cs {
		if s.cand.Priority <= r.cfg.priority || now.Sub(s.since) < grace {
			continue
		}
		if best == nil || s.cand.Priority > best.cand.Priority ||
			(s.cand.Priority == best.cand.Priority && s.since.Before(best.since)) {
			best = &cs[i]
		}
	}
	if best == nil {
		return nil
	}
	return fmt.Errorf("%w: preferred candidate %s (priority %d) waiting %v, this leader's priority %d",
		ErrSteppedDown, best.cand.KeeperID, best.cand.Priority, now.Sub(best.since), r.cfg.priority)
}

// preferenceDue reports whether a RunTaskOnLeader leader looks for a
// preferred candidate now: once a retry period.
func (r *LeaderAwareRunner) preferenceDue() bool {
	return r.cfg.hasPriority && !r.clock.Now().Before(r.cand.lastCheck.Add(r.session.Timings().RetryPeriod))
}

// stepDownRequest asks the task running under RunTaskOnLeader, if any, to
// stop because the runner steps down (Resign). The lead loop cancels it
// with cause and starts its grace period.
func (r *LeaderAwareRunner) stepDownRequest(cause error) {
	r.mu.Lock()
	ch := r.stepCh
	r.mu.Unlock()
	if ch != nil {
		select {
		case ch <- cause:
		default:
		}
	}
}
