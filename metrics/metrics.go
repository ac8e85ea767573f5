package metrics

import (
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mongolock/mongolock/lock"
)

// Metrics turns the events of Sessions (and of the runners, schedulers and
// migrators built on them) into Prometheus metrics. Register makes one,
// registers it on your registry and watches a Session; WatchSession
// watches more. It is safe for concurrent use; one Metrics may observe
// several Sessions, whose figures it adds up.
type Metrics struct {
	ns         string
	collectors []prometheus.Collector
	defs       []def // what the collectors export, in order

	locks      lockMetrics
	elections  electionMetrics
	jobs       jobMetrics
	migrations migrationMetrics
	clock      clockMetrics

	watchMu  sync.Mutex
	sessions []*lock.Session // watched (WatchSession)
}

var (
	_ lock.Observer        = (*Metrics)(nil)
	_ prometheus.Collector = (*Metrics)(nil)
)

// def describes one exported metric: for the tests, which check the
// package documentation, the alert rules and the dashboard against it.
type def struct {
	name   string // with the namespace
	kind   string // counter, gauge or histogram
	labels []string
	help   string
}

// New returns a Metrics with every series that does not depend on a label
// value (lock results, lease-loss causes, migration directions) present at
// zero. Register it on your registry: reg.MustRegister(m).
func New(opts ...Option) (*Metrics, error) {
	cfg := config{namespace: DefaultNamespace, latency: DefaultLatencyBuckets, duration: DefaultDurationBuckets}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	m := &Metrics{ns: cfg.namespace}
	m.locks.init(m, cfg)
	m.elections.init(m, cfg)
	m.jobs.init(m, cfg)
	m.migrations.init(m, cfg)
	m.clock.init(m)
	return m, nil
}

// Observe records e. It implements lock.Observer: quick, no I/O.
func (m *Metrics) Observe(e lock.Event) {
	switch e.Kind {
	case lock.Acquired, lock.Refused, lock.AcquireFailed, lock.Renewed, lock.RenewFailed, lock.LeaseLost, lock.Released,
		lock.TaskAbandoned, lock.KeeperIDShared:
		m.locks.observe(e)
		if e.Kind == lock.LeaseLost || e.Kind == lock.Released {
			// A term's lease ending ends the term, even before the runner
			// says so (RunTaskOnLeader reports it only at its next call).
			m.elections.leaseEnded(e)
		}
	case lock.TermStarted, lock.TermEnded, lock.LeaderSeen:
		m.elections.observe(e)
	case lock.FiringLost, lock.FiringSkipped, lock.RunStarted, lock.RunEnded, lock.RunRetrying, lock.FiringTakenOver,
		lock.JobPaused, lock.JobResumed, lock.JobTriggered, lock.JobRemoved, lock.JobSpecSuperseded, lock.JobSpecRestored:
		m.jobs.observe(e)
	case lock.MigrationApplied, lock.MigrationFailed, lock.MigrationWaited:
		m.migrations.observe(e)
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors {
		c.Describe(ch)
	}
	ch <- m.clock.desc
}

// Collect implements prometheus.Collector. It adds the jobs of watched
// schedulers added since the last scrape, and the schedulers and runners
// built on watched Sessions since then, and reads the watched Lockers'
// server-clock estimates.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.refresh()
	for _, c := range m.collectors {
		c.Collect(ch)
	}
	m.clock.collect(ch)
}

func (m *Metrics) fqName(name string) string { return prometheus.BuildFQName(m.ns, "", name) }

func (m *Metrics) add(c prometheus.Collector, name, kind, help string, labels []string) {
	m.collectors = append(m.collectors, c)
	m.defs = append(m.defs, def{name: m.fqName(name), kind: kind, labels: labels, help: help})
}

func (m *Metrics) counter(name, help string, labels ...string) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: m.fqName(name), Help: help}, labels)
	m.add(v, name, "counter", help, labels)
	return v
}

func (m *Metrics) gauge(name, help string, labels ...string) *prometheus.GaugeVec {
	v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: m.fqName(name), Help: help}, labels)
	m.add(v, name, "gauge", help, labels)
	return v
}

func (m *Metrics) histogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: m.fqName(name), Help: help, Buckets: buckets}, labels)
	m.add(v, name, "histogram", help, labels)
	return v
}

// registry is a set of keys guarded by a mutex: leases held, terms led.
type registry[K comparable] struct {
	mu  sync.Mutex
	set map[K]struct{}
}

// add adds k and reports whether it was new.
func (r *registry[K]) add(k K) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.set[k]; ok {
		return false
	}
	if r.set == nil {
		r.set = make(map[K]struct{})
	}
	r.set[k] = struct{}{}
	return true
}

// remove removes k and reports whether it was there.
func (r *registry[K]) remove(k K) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.set[k]; !ok {
		return false
	}
	delete(r.set, k)
	return true
}

// labelValue is s as a label value: Prometheus panics on a value that is
// not valid UTF-8 (a job name or lock id from a foreign document), so each
// byte of an invalid sequence is written as \xNN, which keeps two such
// names apart.
func labelValue(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && n == 1 {
			fmt.Fprintf(&b, `\x%02x`, s[0])
		} else {
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}
