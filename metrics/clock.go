package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mongolock/mongolock/lock"
)

// ServerClock is what WatchLocker needs: *lock.Locker is one.
type ServerClock interface {
	// ServerTime returns an interval holding the server's time now, and
	// whether there is an estimate yet.
	ServerTime() (lo, hi time.Time, ok bool)
}

var _ ServerClock = (*lock.Locker)(nil)

type clockMetrics struct {
	desc *prometheus.Desc

	mu     sync.Mutex
	clocks []ServerClock
}

func (c *clockMetrics) init(m *Metrics) {
	const name, help = "server_clock_uncertainty_seconds",
		"Width of the interval the server's time is known to be in (the widest of the watched Lockers); absent until a Locker has an estimate."
	c.desc = prometheus.NewDesc(m.fqName(name), help, nil, nil)
	m.defs = append(m.defs, def{name: m.fqName(name), kind: "gauge", help: help})
}

// collect reads the estimates at scrape time: a Locker keeps its own, and
// nothing emits an event when it changes.
func (c *clockMetrics) collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	clocks := c.clocks
	c.mu.Unlock()
	width, any := time.Duration(0), false
	for _, sc := range clocks {
		if lo, hi, ok := sc.ServerTime(); ok {
			width, any = max(width, hi.Sub(lo)), true
		}
	}
	if any {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, width.Seconds())
	}
}

// WatchLocker reports the uncertainty of l's estimate of the server's
// clock, read at every scrape: how much of the safety margin a slow
// network eats. Pass a *lock.Locker. With several Lockers watched, the
// widest interval is reported.
func (m *Metrics) WatchLocker(l ServerClock) {
	m.clock.mu.Lock()
	m.clock.clocks = append(m.clock.clocks, l)
	m.clock.mu.Unlock()
}
