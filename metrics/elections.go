package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mongolock/mongolock/lock"
)

// termKey names a term of an election: the keeper leading and its lease's
// fencing token.
type termKey struct {
	keeper string
	fence  uint64
}

type electionMetrics struct {
	leader  *prometheus.GaugeVec
	terms   *prometheus.CounterVec
	gap     *prometheus.HistogramVec
	changes *prometheus.CounterVec

	mu  sync.Mutex
	all map[string]*election // by lock id
}

// election is the series of one election, and the terms of it this
// process leads: normally at most one, but two runners of one process
// may see their terms overlap in the events when the loser notices its
// loss late, so the gauge is 1 while any is open.
type election struct {
	leader  prometheus.Gauge
	terms   prometheus.Counter
	gap     prometheus.Observer
	changes prometheus.Counter
	leading map[termKey]struct{}
}

func (el *electionMetrics) init(m *Metrics, cfg config) {
	el.leader = m.gauge("election_leader",
		"1 while this process leads the election (a runner's lock id), else 0.", "election")
	el.terms = m.counter("election_terms_total", "Terms this process started as leader.", "election")
	el.gap = m.histogram("election_failover_gap_seconds",
		"Failover gap of the terms this process started, on the server's clock: from the previous term's last renewal or release to this term's start.",
		cfg.duration, "election")
	el.changes = m.counter("election_leader_changes_total",
		"Changes of leader this process observed, itself included.", "election")
	el.all = make(map[string]*election)
}

// get returns the series of election id, creating them at zero.
// Called with el.mu held.
func (el *electionMetrics) get(id string) *election {
	e := el.all[id]
	if e == nil {
		label := labelValue(id)
		e = &election{
			leader:  el.leader.WithLabelValues(label),
			terms:   el.terms.WithLabelValues(label),
			gap:     el.gap.WithLabelValues(label),
			changes: el.changes.WithLabelValues(label),
			leading: make(map[termKey]struct{}),
		}
		el.all[id] = e
	}
	return e
}

func (el *electionMetrics) observe(e lock.Event) {
	el.mu.Lock()
	defer el.mu.Unlock()
	x := el.get(e.LockID)
	switch e.Kind {
	case lock.TermStarted:
		x.leading[termKey{e.KeeperID, e.Fence}] = struct{}{}
		x.leader.Set(1)
		x.terms.Inc()
		if e.Gap > 0 {
			x.gap.Observe(e.Gap.Seconds())
		}
	case lock.TermEnded:
		delete(x.leading, termKey{e.KeeperID, e.Fence})
		if len(x.leading) == 0 {
			x.leader.Set(0)
		}
	case lock.LeaderSeen:
		x.changes.Inc()
	}
}

// leaseEnded ends the term whose lease e reports lost or released, if this
// process leads an election with it. It adds no election.
func (el *electionMetrics) leaseEnded(e lock.Event) {
	el.mu.Lock()
	defer el.mu.Unlock()
	x, ok := el.all[e.LockID]
	if !ok {
		return
	}
	k := termKey{e.KeeperID, e.Fence}
	if _, leading := x.leading[k]; !leading {
		return
	}
	delete(x.leading, k)
	if len(x.leading) == 0 {
		x.leader.Set(0)
	}
}

// AddElections makes the series of the elections named by their lock ids
// (runner.LeaderAwareRunner.LockID) present at zero, so that a "no leader"
// alert works before any process led. An election is added by itself at
// its first event.
func (m *Metrics) AddElections(lockIDs ...string) {
	m.elections.mu.Lock()
	defer m.elections.mu.Unlock()
	for _, id := range lockIDs {
		m.elections.get(id)
	}
}
