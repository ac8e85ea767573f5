package lock

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"
)

// renewal is a keep-alive renewal in flight.
type renewal struct {
	leases []*Lease
	sent   time.Time
	boot   bootReading        // the boot clock, read before sent
	result chan renewalResult // buffered
	cancel context.CancelFunc
	span   Span
}

type renewalResult struct {
	r   Renewal
	err error
}

// keepAlive is the only loop that renews leases. Every lease the Session
// holds is renewed in one store call, due a renew interval after the
// oldest lease's last renewal, so N leases cost one round trip per renew
// interval. A failed renewal is retried every retry period; each attempt
// gives up after half the time the leases have left (at least a retry
// period), so a hung connection leaves time for another. A lease whose
// renew deadline passes ends with ErrLeaseLost, as does one a renewal finds
// taken over or expired.
func (s *Session) keepAlive() {
	defer close(s.done)
	var cur *renewal
	var retryAt time.Time // after a failure: when to try again
	failures := 0         // renewals failed in a row
	defer func() {
		if cur != nil {
			cur.cancel()
			res := <-cur.result
			cur.span.End(res.err)
		}
	}()
	for {
		s.mu.Lock()
		boot := s.bootNow()
		now := s.clock.Now()
		events := s.expireLocked(now)
		due, expiry, any := s.planLocked(retryAt)
		if !any && cur == nil {
			retryAt, failures = time.Time{}, 0 // nothing left that failed
		}
		var batch []*Lease
		if any && cur == nil && left(due, now) <= 0 {
			batch = s.activeLocked()
		}
		s.mu.Unlock()
		for _, e := range events {
			s.Emit(e)
		}
		if len(batch) > 0 {
			cur = s.startRenewal(batch, now, boot, failures+1)
			continue
		}

		var timer clockwork.Timer
		var timerC <-chan time.Time
		if any {
			wait := left(expiry, now)
			if cur == nil {
				wait = min(wait, left(due, now))
			}
			// At least every retry period: after a suspend the monotonic
			// clock, and so the timer, is late; the wall clock shows it.
			wait = min(wait, s.cfg.timings.RetryPeriod)
			timer = s.clock.NewTimer(max(0, wait))
			timerC = timer.Chan()
		}
		var resultC chan renewalResult
		if cur != nil {
			resultC = cur.result
		}
		stopped := false
		select {
		case <-s.stop:
			stopped = true
		case <-s.wake:
		case <-timerC:
		case res := <-resultC:
			cur.cancel()
			var ev []Event
			if res.err != nil {
				retryAt = cur.sent.Add(s.cfg.timings.RetryPeriod)
				failures++
				ev = s.renewalFailed(cur.leases, res.err, failures)
			} else {
				retryAt, failures = time.Time{}, 0
				ev = s.applyRenewal(cur.leases, res.r, cur.sent, cur.boot)
			}
			span := cur.span
			cur = nil
			for _, e := range ev {
				s.Emit(e)
				span.Event(e)
			}
			span.End(renewErr(res.err, ev))
		}
		if timer != nil {
			timer.Stop()
		}
		if stopped {
			return
		}
	}
}

// planLocked returns when the next renewal is due, when the first lease
// stops being trusted, and whether there is any lease to keep.
func (s *Session) planLocked(retryAt time.Time) (due, expiry time.Time, any bool) {
	for _, sl := range s.slots {
		l := sl.lease
		if l == nil || l.ended {
			continue
		}
		d := l.lastSent.Add(s.cfg.timings.RenewInterval)
		if !any || d.Before(due) {
			due = d
		}
		if !any || l.trustUntil.Before(expiry) {
			expiry = l.trustUntil
		}
		any = true
	}
	if any && !retryAt.IsZero() {
		due = retryAt
	}
	return due, expiry, any
}

// activeLocked lists the leases kept alive, by lock id: a renewal's
// command does not depend on the order of a map.
func (s *Session) activeLocked() []*Lease {
	var out []*Lease
	for _, sl := range s.slots {
		if sl.lease != nil && !sl.lease.ended {
			out = append(out, sl.lease)
		}
	}
	slices.SortFunc(out, func(a, b *Lease) int { return strings.Compare(a.grant.LockID, b.grant.LockID) })
	return out
}

// expireLocked ends the leases whose renew deadline has passed at now.
func (s *Session) expireLocked(now time.Time) []Event {
	var ev []Event
	for _, sl := range s.slots {
		l := sl.lease
		if l == nil || l.ended || s.leaseLeft(l, now) > 0 {
			continue
		}
		s.endLocked(l, ErrLeaseLost)
		if s.observed() {
			ev = append(ev, Event{Kind: LeaseLost, LockID: l.grant.LockID, Fence: l.grant.Fence,
				Err: ErrLeaseLost, Reason: "renew deadline passed", Took: now.Sub(l.lastSent)})
		}
	}
	return ev
}

// startRenewal sends one renewal of leases, the attempt-th since the last
// that succeeded, at now (boot: the boot clock read before).
func (s *Session) startRenewal(leases []*Lease, now time.Time, boot bootReading, attempt int) *renewal {
	s.mu.Lock()
	remaining := s.leaseLeft(leases[0], now)
	ids := make([]string, len(leases))
	for i, l := range leases {
		ids[i] = l.grant.LockID
		remaining = min(remaining, s.leaseLeft(l, now))
	}
	s.mu.Unlock()
	rp := s.cfg.timings.RetryPeriod
	timeout := min(remaining, max(rp, remaining/2))
	// The keep-alive's renewals are nobody's children: each begins a trace.
	ctx, span := s.trace(context.Background(), OpRenew, attempt, 0, ids)
	ctx, cancel := WithTimeout(ctx, s.clock, timeout)
	r := &renewal{leases: leases, sent: now, boot: boot, result: make(chan renewalResult, 1), cancel: cancel, span: span}
	go func() {
		ren, err := s.storeRenew(ctx, ids)
		r.result <- renewalResult{r: ren, err: err}
	}()
	return r
}

// applyRenewal moves on the deadlines of the leases r renewed, sent at
// sent, and ends those it found lost. Leases released or lost meanwhile
// are left alone.
func (s *Session) applyRenewal(leases []*Lease, r Renewal, sent time.Time, boot bootReading) []Event {
	held := make(map[string]bool, len(r.Held))
	for _, id := range r.Held {
		held[id] = true
	}
	var ev []Event
	s.mu.Lock()
	now := s.clock.Now()
	for _, l := range leases {
		if l.ended {
			continue
		}
		if !held[l.grant.LockID] {
			if l.lastSent.After(sent) {
				// Renewed since this renewal was sent (Lease.Renew), which
				// is what made this one miss it.
				continue
			}
			s.endLocked(l, ErrLeaseLost)
			if s.observed() {
				ev = append(ev, Event{Kind: LeaseLost, LockID: l.grant.LockID, Fence: l.grant.Fence,
					Err: ErrLeaseLost, Reason: "renewal found it taken over or expired", Took: now.Sub(sent)})
			}
			continue
		}
		if sent.After(l.lastSent) {
			l.lastSent = sent
		}
		if t := earliest(r.Deadline, sent.Add(s.cfg.timings.RenewDeadline)); t.After(l.trustUntil) {
			l.trustUntil, l.bootUntil = t, bootDeadline(t, sent, boot)
		}
		if s.observed() {
			ev = append(ev, Event{Kind: Renewed, LockID: l.grant.LockID, Fence: l.grant.Fence,
				Took: now.Sub(sent), Remaining: s.leaseLeft(l, now)})
		}
	}
	s.mu.Unlock()
	return ev
}

// renewalFailed reports a failed renewal of leases, the attempt-th in a
// row.
func (s *Session) renewalFailed(leases []*Lease, err error, attempt int) []Event {
	if !s.observed() {
		return nil
	}
	var ev []Event
	s.mu.Lock()
	now := s.clock.Now()
	for _, l := range leases {
		if !l.ended {
			ev = append(ev, Event{Kind: RenewFailed, LockID: l.grant.LockID, Fence: l.grant.Fence,
				Err: err, Remaining: max(0, s.leaseLeft(l, now)), Attempt: attempt})
		}
	}
	s.mu.Unlock()
	return ev
}

// renewErr is the failure a renewal's span reports: the store's error, or
// ErrLeaseLost if the renewal found leases lost.
func renewErr(err error, events []Event) error {
	if err != nil {
		return err
	}
	for _, e := range events {
		if e.Kind == LeaseLost {
			return ErrLeaseLost
		}
	}
	return nil
}
