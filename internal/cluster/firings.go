package cluster

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"
)

// Firing is one firing of a cron job: the job and its scheduled time, in
// UTC so that it compares with ==.
type Firing struct {
	Job       string
	Scheduled time.Time
}

// NewFiring returns the firing of job at scheduled.
func NewFiring(job string, scheduled time.Time) Firing { return Firing{job, scheduled.UTC()} }

// String is the job and the firing's local time of day.
func (f Firing) String() string { return f.Job + " " + f.Scheduled.Local().Format("15:04:05") }

// Runs returns, for each firing that ran, the instances that reported its
// run (EvRun), in the order of the log. A firing with more than one ran
// twice. Triggered runs are not firings of the schedule: they are left out.
func Runs(evs []Event) map[Firing][]string {
	out := map[Firing][]string{}
	for _, e := range evs {
		if e.Kind == EvRun && !e.Triggered {
			k := NewFiring(e.Job, e.Firing)
			out[k] = append(out[k], e.Instance)
		}
	}
	return out
}

// SortedFirings returns the keys of m by scheduled time, then job.
func SortedFirings[V any](m map[Firing]V) []Firing {
	return slices.SortedFunc(maps.Keys(m), compareFirings)
}

// SortFirings sorts fs by scheduled time, then job.
func SortFirings(fs []Firing) { slices.SortFunc(fs, compareFirings) }

func compareFirings(a, b Firing) int {
	return cmp.Or(a.Scheduled.Compare(b.Scheduled), strings.Compare(a.Job, b.Job))
}

// Scheduled returns the multiples of every from from to to, both included:
// the firings of a job that fires at the multiples of every since the Unix
// epoch (as "@every 1s" does, and "*/2 * * * * *" in seconds).
func Scheduled(from, to time.Time, every time.Duration) []time.Time {
	var out []time.Time
	for f := from.Truncate(every); !f.After(to); f = f.Add(every) {
		if !f.Before(from) {
			out = append(out, f)
		}
	}
	return out
}
