package health

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
)

// Reasons of the events the checks read (packages lock and runner).
const (
	reasonDeadlinePassed = "renew deadline passed"
	reasonTakenOver      = "renewal found it taken over or expired"
	reasonHeldElsewhere  = "held elsewhere"
	reasonAbandoned      = "abandoned"
	// of the runner's lock.TermEnded
	reasonDidNotStop = "task did not stop"
	reasonStalled    = "task stalled"
)

// termKey names one term of a lock: a lease.
type termKey struct {
	keeper, lock string
	fence        uint64
}

func keyOf(e lock.Event) termKey { return termKey{e.KeeperID, e.LockID, e.Fence} }

func (k termKey) String() string {
	return fmt.Sprintf("%q (keeper %s, fence %d)", k.lock, k.keeper, k.fence)
}

// failing is a Session's run of failed renewals: from the first failure
// after its last successful round trip.
type failing struct {
	since    time.Time // the first failure
	deadline time.Time // the earliest instant a lease it failed for stopped being trusted
	lockID   string    // that lease's lock
	attempts int       // failed renewals in a row, as the keep-alive counts them
	lastErr  string
}

// stall is a term the runner's stall detection ended.
type stall struct {
	at       time.Time
	returned bool // the task returned: its lock was released
}

// Observe updates the checks with an event of a Session it observes. It is
// quick, does no I/O and is safe for concurrent use: pass the Checker to
// lock.WithObserver.
func (c *Checker) Observe(e lock.Event) {
	if e.At.IsZero() {
		e.At = c.clock.Now()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch e.Kind {
	case lock.RenewFailed:
		f := c.failingLocked(e)
		f.attempts = max(f.attempts, e.Attempt)
		if e.Err != nil {
			f.lastErr = e.Err.Error()
		}
		if until := e.At.Add(e.Remaining); until.Before(f.deadline) {
			f.deadline, f.lockID = until, e.LockID
		}

	case lock.LeaseLost:
		switch {
		case e.Reason == reasonDeadlinePassed:
			// Reported when the keep-alive noticed, at or after the deadline.
			if f := c.failingLocked(e); e.At.Before(f.deadline) {
				f.deadline, f.lockID = e.At, e.LockID
			}
		case e.Reason == reasonTakenOver:
			c.succeededLocked() // the renewal got an answer
		}
		c.endedLocked(e)

	case lock.TaskAbandoned, lock.TermEnded:
		c.endedLocked(e)

	case lock.Renewed, lock.Acquired,
		// Each of these follows a command the database answered: a runner
		// read who leads, a scheduler won or lost a claim, a migration ran
		// or waited. A process whose leases were lost during an outage may
		// hold none to renew afterwards; these show the store is back.
		lock.LeaderSeen, lock.FiringClaimed, lock.FiringLost, lock.RunStarted, lock.MigrationWaited:
		c.succeededLocked()

	case lock.Refused:
		if e.Reason == reasonHeldElsewhere {
			c.succeededLocked()
		}

	case lock.Released:
		if e.Err == nil {
			c.succeededLocked()
		}
		// The work under the lease returned: its holder released it.
		k := keyOf(e)
		delete(c.abandoned, k)
		if s := c.stalls[k]; s != nil {
			s.returned = true
		}

	case lock.MigrationApplied:
		c.succeededLocked()
		if e.Reason == "down" {
			for _, m := range c.migrators {
				m.forget()
			}
		}
	}
}

// failingLocked returns the Session's run of failures, starting one at e.
func (c *Checker) failingLocked(e lock.Event) *failing {
	f := c.failing[e.KeeperID]
	if f == nil {
		f = &failing{since: e.At, deadline: e.At.Add(e.Remaining), lockID: e.LockID}
		c.failing[e.KeeperID] = f
	}
	return f
}

// succeededLocked ends every run of failures: a Session got an answer from
// the store. Any Session's answer will do: the connection to the store is
// the process's, and a Session that lost its leases, or was closed, may
// never make another round trip. One whose renewals still fail starts a
// run again at its next failure, with the same deadline.
func (c *Checker) succeededLocked() {
	clear(c.failing)
}

// endedLocked notes a task abandoned because it ignored its cancelled
// context, or a term the stall detection ended. Only the events that say
// so count: a task's own error may wrap these errors too (a task that ran
// lock.Session.Do), and is reported after its lock was released.
func (c *Checker) endedLocked(e lock.Event) {
	k := keyOf(e)
	switch {
	case e.Kind == lock.TaskAbandoned,
		e.Kind == lock.LeaseLost && e.Reason == reasonAbandoned && errors.Is(e.Err, lock.ErrTaskDidNotStop),
		e.Kind == lock.TermEnded && e.Reason == reasonDidNotStop:
		if _, ok := c.abandoned[k]; !ok {
			c.abandoned[k] = e.At
		}
	case e.Kind == lock.TermEnded && e.Reason == reasonStalled,
		e.Kind == lock.LeaseLost && e.Reason == reasonAbandoned && errors.Is(e.Err, runner.ErrStalled):
		if c.stalls[k] == nil {
			c.stalls[k] = &stall{at: e.At}
		}
	}
}

// renewalsCheck fails while a Session's renewals have been failing for
// longer than the renew deadline of a lease they were for, plus the slack.
func (c *Checker) renewalsCheckLocked(now time.Time) Check {
	if len(c.failing) == 0 {
		return Check{OK: true, Reason: "no renewal failing"}
	}
	ch := Check{OK: true}
	var bad, fine []string
	for _, keeper := range sortedKeys(c.failing) {
		f := c.failing[keeper]
		what := fmt.Sprintf("keeper %s: renewals failing for %v (%d in a row", keeper, dur(now.Sub(f.since)), f.attempts)
		if f.lastErr != "" {
			what += ", last: " + f.lastErr
		}
		what += ")"
		failAt := f.deadline.Add(c.cfg.renewSlack)
		if now.Before(failAt) {
			if now.Before(f.deadline) {
				fine = append(fine, fmt.Sprintf("%s; lease %q trusted for %v more", what, f.lockID, dur(f.deadline.Sub(now))))
			} else {
				fine = append(fine, fmt.Sprintf("%s; lease %q untrusted for %v, within the slack of %v",
					what, f.lockID, dur(now.Sub(f.deadline)), dur(c.cfg.renewSlack)))
			}
			continue
		}
		bad = append(bad, fmt.Sprintf("%s; lease %q stopped being trusted %v ago, past the renew deadline plus %v",
			what, f.lockID, dur(now.Sub(f.deadline)), dur(c.cfg.renewSlack)))
		if ch.OK || failAt.Before(ch.Since) {
			ch.Since = failAt
		}
		ch.OK = false
	}
	if ch.OK {
		ch.Reason = strings.Join(fine, "; ")
	} else {
		ch.Reason = strings.Join(bad, "; ")
	}
	return ch
}

// abandonedCheckLocked fails while a task abandoned because it ignored its
// cancellation has not returned.
func (c *Checker) abandonedCheckLocked(now time.Time) Check {
	if len(c.abandoned) == 0 {
		return Check{OK: true, Reason: "no task abandoned"}
	}
	ch := Check{}
	var why []string
	for _, k := range sortedTerms(c.abandoned) {
		at := c.abandoned[k]
		why = append(why, fmt.Sprintf("task under %v ignored its cancelled context and was abandoned %v ago; it has not returned",
			k, dur(now.Sub(at))))
		if ch.Since.IsZero() || at.Before(ch.Since) {
			ch.Since = at
		}
	}
	ch.Reason = strings.Join(why, "; ")
	return ch
}

// stallsCheckLocked fails from a stall until the stalled task returned and
// the hold passed. Stalls past both are forgotten.
func (c *Checker) stallsCheckLocked(now time.Time) Check {
	ch := Check{OK: true, Reason: "no task stalled"}
	var why []string
	for _, k := range sortedTerms(c.stalls) {
		s := c.stalls[k]
		until := s.at.Add(c.cfg.stallHold)
		if s.returned && !now.Before(until) {
			delete(c.stalls, k)
			continue
		}
		w := fmt.Sprintf("task under %v stalled %v ago (no heartbeat within the stall timeout)", k, dur(now.Sub(s.at)))
		if s.returned {
			w += fmt.Sprintf("; it returned, failing for %v more", dur(until.Sub(now)))
		} else {
			w += "; it has not returned"
		}
		why = append(why, w)
		if ch.OK || s.at.Before(ch.Since) {
			ch.Since = s.at
		}
		ch.OK = false
	}
	if !ch.OK {
		ch.Reason = strings.Join(why, "; ")
	}
	return ch
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sortedTerms[V any](m map[termKey]V) []termKey {
	out := make([]termKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b termKey) int {
		return cmp.Or(strings.Compare(a.keeper, b.keeper), strings.Compare(a.lock, b.lock), cmp.Compare(a.fence, b.fence))
	})
	return out
}

// dur rounds d for a reason.
func dur(d time.Duration) time.Duration {
	if d >= time.Second || d <= -time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Microsecond)
}
