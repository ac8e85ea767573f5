package metrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mongolock/mongolock/lock"
)

// Label values of the lock metrics.
const (
	resultAcquired      = "acquired"
	resultHeldElsewhere = "held_elsewhere"
	resultTooLate       = "too_late"
	resultError         = "error"
	resultRenewed       = "renewed"
	resultFailed        = "failed"
	resultReleased      = "released"

	causeTakenOver     = "taken_over"
	causeRenewDeadline = "renew_deadline"
	causeAbandoned     = "abandoned"
	causeOther         = "other"
)

// Reasons of the lock package's events (lock/session.go, keepalive.go,
// lease.go) that the labels distinguish.
const (
	reasonHeldHere  = "held in this session"
	reasonTakenOver = "renewal found it taken over or expired"
	reasonDeadline  = "renew deadline passed"
	reasonAbandoned = "abandoned"
)

// leaseKey names a lease: a term of a lock held by a keeper.
type leaseKey struct {
	keeper, lock string
	fence        uint64
}

type lockMetrics struct {
	acquired, heldElsewhere, tooLate, acquireError prometheus.Counter
	renewed, renewFailed                           prometheus.Counter
	lostTakenOver, lostDeadline                    prometheus.Counter
	lostAbandoned, lostOther                       prometheus.Counter
	released, releaseError                         prometheus.Counter
	acquireTook, renewTook                         prometheus.Observer
	held                                           prometheus.Gauge
	abandoned                                      prometheus.Counter
	keeperShared                                   prometheus.Counter

	// The leases counted in held. A lease ends once, at its first
	// LeaseLost or Released: one lost and then released gets both.
	leases registry[leaseKey]
}

func (l *lockMetrics) init(m *Metrics, cfg config) {
	acq := m.counter("lock_acquisitions_total",
		"Lock acquisitions by result: acquired, held_elsewhere, too_late (granted too late to trust), error.", "result")
	l.acquired = acq.WithLabelValues(resultAcquired)
	l.heldElsewhere = acq.WithLabelValues(resultHeldElsewhere)
	l.tooLate = acq.WithLabelValues(resultTooLate)
	l.acquireError = acq.WithLabelValues(resultError)
	ren := m.counter("lock_renewals_total",
		"Lease renewals by result (renewed, failed), one per lease a keep-alive round renews.", "result")
	l.renewed = ren.WithLabelValues(resultRenewed)
	l.renewFailed = ren.WithLabelValues(resultFailed)
	lost := m.counter("lock_leases_lost_total",
		"Leases lost before their release, by cause: taken_over, renew_deadline, abandoned, other.", "cause")
	l.lostTakenOver = lost.WithLabelValues(causeTakenOver)
	l.lostDeadline = lost.WithLabelValues(causeRenewDeadline)
	l.lostAbandoned = lost.WithLabelValues(causeAbandoned)
	l.lostOther = lost.WithLabelValues(causeOther)
	rel := m.counter("lock_releases_total", "Lock releases by result: released, error.", "result")
	l.released = rel.WithLabelValues(resultReleased)
	l.releaseError = rel.WithLabelValues(resultError)
	l.acquireTook = m.histogram("lock_acquire_duration_seconds",
		"Round trip of lock acquisitions, whatever their result.", cfg.latency).WithLabelValues()
	l.renewTook = m.histogram("lock_renew_duration_seconds",
		"Round trip of successful lease renewals, one observation per lease renewed.", cfg.latency).WithLabelValues()
	l.held = m.gauge("lock_leases_held", "Leases this process holds and trusts.").WithLabelValues()
	l.abandoned = m.counter("lock_tasks_abandoned_total",
		"Work under a lease (Session.Do, a runner's task) abandoned because it ignored its cancelled context.").WithLabelValues()
	l.keeperShared = m.counter("lock_keeper_id_shared_total",
		"Sessions of this process refused a lock held by another live Session with their keeper id (two processes given one WithKeeperID), once per Session.").WithLabelValues()
}

func (l *lockMetrics) observe(e lock.Event) {
	switch e.Kind {
	case lock.Acquired:
		l.acquired.Inc()
		l.acquireTook.Observe(e.Took.Seconds())
		if l.leases.add(leaseKey{e.KeeperID, e.LockID, e.Fence}) {
			l.held.Inc()
		}
	case lock.Refused:
		l.refusedCounter(e).Inc()
		if e.Reason != reasonHeldHere { // refused without a round trip
			l.acquireTook.Observe(e.Took.Seconds())
		}
	case lock.AcquireFailed:
		l.acquireError.Inc()
		l.acquireTook.Observe(e.Took.Seconds())
	case lock.Renewed:
		l.renewed.Inc()
		l.renewTook.Observe(e.Took.Seconds())
	case lock.RenewFailed:
		l.renewFailed.Inc()
	case lock.LeaseLost:
		l.lostCounter(e.Reason).Inc()
		l.end(e)
	case lock.Released:
		if e.Err != nil {
			l.releaseError.Inc()
		} else {
			l.released.Inc()
		}
		l.end(e)
	case lock.TaskAbandoned:
		l.abandoned.Inc()
	case lock.KeeperIDShared:
		l.keeperShared.Inc()
	}
}

// end stops counting e's lease as held, if it still was.
func (l *lockMetrics) end(e lock.Event) {
	if l.leases.remove(leaseKey{e.KeeperID, e.LockID, e.Fence}) {
		l.held.Dec()
	}
}

// refusedCounter maps a Refused event to its result: too late to trust,
// refused because the Session closed meanwhile (an error), or held by
// another keeper or another holder in the Session.
func (l *lockMetrics) refusedCounter(e lock.Event) prometheus.Counter {
	switch {
	case errors.Is(e.Err, lock.ErrNotTrusted):
		return l.tooLate
	case e.Err != nil:
		return l.acquireError
	}
	return l.heldElsewhere
}

func (l *lockMetrics) lostCounter(reason string) prometheus.Counter {
	switch reason {
	case reasonTakenOver:
		return l.lostTakenOver
	case reasonDeadline:
		return l.lostDeadline
	case reasonAbandoned:
		return l.lostAbandoned
	}
	return l.lostOther
}
