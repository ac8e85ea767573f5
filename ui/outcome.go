package ui

import (
	"fmt"
	"strings"
	"time"

	"github.com/mongolock/mongolock/scheduler"
)

// class is the outcome of a firing as the dashboard shows it: each has a
// colour, a shape and a label, so that no meaning rests on colour alone.
type class string

const (
	classRan      class = "ran"
	classLate     class = "late"
	classRetried  class = "retried"
	classFailed   class = "failed"
	classSkipped  class = "skipped"
	classMisfired class = "misfired"
	classSpent    class = "spent"
	classRunning  class = "running"
)

// classes in the order of the legend, with their symbol (shown in tables,
// beside the label) and what they mean.
var classes = []struct {
	Class  class
	Symbol string
	Label  string
	Means  string
}{
	{classRan, "●", "ran", "started on time and succeeded"},
	{classLate, "◗", "ran late", "succeeded, but started late"},
	{classRetried, "◆", "retried", "an attempt that failed and was tried again"},
	{classFailed, "✕", "failed", "the last attempt failed"},
	{classSkipped, "▽", "skipped", "not run on purpose or by the protocol: the reason says why"},
	{classMisfired, "○", "misfired", "could not start within the misfire threshold, and the misfire policy did not run it"},
	{classSpent, "□", "spent", "started on an instance that stopped before recording the end"},
	{classRunning, "◔", "running", "started, not ended yet"},
}

func symbolOf(c class) string {
	for _, k := range classes {
		if k.Class == c {
			return k.Symbol
		}
	}
	return "?"
}

// runView is a record of the history, or a job's last run, as shown.
type runView struct {
	scheduler.Run
	Class  class
	Symbol string
	Label  string // the outcome in words, with the reason or lateness
	Late   time.Duration
	Took   time.Duration
	Anchor string // id of its row
}

// viewRun classifies r. present tells which keepers' presence leases are
// held (a running run of a keeper that is gone is spent); retried tells
// which firings have a later attempt (a failed attempt then was retried).
func (h *Handler) viewRun(r scheduler.Run, present map[string]bool, retried map[int64]int) runView {
	v := runView{Run: r}
	if !r.Start.IsZero() {
		v.Late = max(r.Start.Sub(r.Scheduled), 0)
		if !r.End.IsZero() {
			v.Took = r.End.Sub(r.Start)
		}
	}
	switch r.Outcome {
	case scheduler.OutcomeSkipped:
		v.Class = classSkipped
		if isMisfire(r.Reason) {
			v.Class = classMisfired
		}
		v.Label = v.Class.word() + ": " + cmpOr(r.Reason, "no reason recorded")
		if r.Count > 1 {
			v.Label += fmt.Sprintf(" (%d firings through %s)", r.Count, fmtTime(r.Through))
		}
	case scheduler.OutcomeFailed:
		v.Class, v.Label = classFailed, "failed"
		if last, ok := retried[r.Scheduled.UnixNano()]; ok && r.Attempt < last {
			v.Class, v.Label = classRetried, fmt.Sprintf("attempt %d failed, retried", r.Attempt)
		}
	case scheduler.OutcomeSucceeded:
		v.Class, v.Label = classRan, "ran"
		if v.Late > h.cfg.lateAfter {
			v.Class, v.Label = classLate, "ran "+fmtDur(v.Late)+" late"
		}
	case scheduler.OutcomeRunning:
		v.Class, v.Label = classRunning, "running"
		if present != nil && !present[r.Keeper] {
			v.Class, v.Label = classSpent, "spent: its instance stopped before recording the end"
		}
	case scheduler.OutcomeSpent:
		v.Class, v.Label, v.Took = classSpent, spentLabel, 0
	default:
		v.Class, v.Label = classSkipped, string(r.Outcome)
	}
	if r.Attempt > 1 && v.Class != classRetried {
		v.Label += fmt.Sprintf(" (attempt %d)", r.Attempt)
	}
	if r.Triggered {
		v.Label += " (triggered)"
	}
	v.Symbol = symbolOf(v.Class)
	v.Anchor = "r-" + strings.NewReplacer(":", "", ".", "", "-", "").Replace(r.Scheduled.UTC().Format(time.RFC3339Nano)) + fmt.Sprintf("-%d", max(r.Attempt, 1))
	return v
}

func (c class) word() string {
	for _, k := range classes {
		if k.Class == c {
			return k.Label
		}
	}
	return string(c)
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// spentLabel is what the dashboard says of a run recorded as spent
// (scheduler.OutcomeSpent).
const spentLabel = "spent: its instance lost the job's lock before recording the end; whether it ran is not known"
