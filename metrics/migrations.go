package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mongolock/mongolock/lock"
)

// Directions of a migration (label direction). The migrations package
// marks a rollback with Reason "down".
const (
	directionUp   = "up"
	directionDown = "down"
)

type migrationMetrics struct {
	appliedUp, appliedDown prometheus.Counter
	failedUp, failedDown   prometheus.Counter
	waited                 prometheus.Observer
}

func (mm *migrationMetrics) init(m *Metrics, cfg config) {
	applied := m.counter("migrations_applied_total", "Migrations this process applied (up) or rolled back (down).", "direction")
	mm.appliedUp = applied.WithLabelValues(directionUp)
	mm.appliedDown = applied.WithLabelValues(directionDown)
	failed := m.counter("migrations_failed_total", "Migrations that failed in this process, by direction.", "direction")
	mm.failedUp = failed.WithLabelValues(directionUp)
	mm.failedDown = failed.WithLabelValues(directionDown)
	mm.waited = m.histogram("migrations_lock_wait_seconds",
		"Time a migrator waited for the migration lock another migrator held.", cfg.duration).WithLabelValues()
}

func (mm *migrationMetrics) observe(e lock.Event) {
	down := e.Reason == directionDown
	switch e.Kind {
	case lock.MigrationApplied:
		pick(down, mm.appliedDown, mm.appliedUp).Inc()
	case lock.MigrationFailed:
		pick(down, mm.failedDown, mm.failedUp).Inc()
	case lock.MigrationWaited:
		mm.waited.Observe(e.Took.Seconds())
	}
}

func pick[T any](cond bool, a, b T) T {
	if cond {
		return a
	}
	return b
}
