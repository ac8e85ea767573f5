package ui

import (
	"strings"
	"testing"
	"time"

	"github.com/mongolock/mongolock/scheduler"
)

// TestTimeline draws a job's firings: a lane per instance, one for firings
// not run and one for actions; each firing classed with its shape; a tail
// for a late start; firings of the spec with no record as spent.
func TestTimeline(t *testing.T) {
	h := &Handler{cfg: defaultConfig()}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
	runs := []scheduler.Run{ // oldest first here; reversed below
		{Keeper: "app1/x", Scheduled: at(0), Start: at(0), End: at(1), Outcome: scheduler.OutcomeSucceeded, Attempt: 1},
		{Keeper: "app2/y", Scheduled: at(1), Start: at(4), End: at(5), Outcome: scheduler.OutcomeSucceeded, Attempt: 1},
		{Keeper: "app1/x", Scheduled: at(2), Start: at(2), End: at(2), Outcome: scheduler.OutcomeFailed, Attempt: 1},
		{Keeper: "app1/x", Scheduled: at(2), Start: at(2), End: at(3), Outcome: scheduler.OutcomeSucceeded, Attempt: 2},
		{Scheduled: at(3), Through: at(3), Count: 1, Outcome: scheduler.OutcomeSkipped, Reason: scheduler.ReasonMissed},
		{Scheduled: at(4), Through: at(5), Count: 2, Outcome: scheduler.OutcomeSkipped, Reason: scheduler.ReasonPaused},
		// at(6): no record.
		{Keeper: "app2/y", Scheduled: at(7), Start: at(7), End: at(7), Outcome: scheduler.OutcomeFailed, Attempt: 1},
	}
	retried := map[int64]int{at(2).UnixNano(): 2}
	var views []runView
	for i := len(runs) - 1; i >= 0; i-- {
		runs[i].Job = "j"
		views = append(views, h.viewRun(runs[i], nil, retried))
	}
	rec := scheduler.Record{Name: "j", Spec: "@every 1s"}
	acts := []actionRecord{{Kind: ActionPause, Job: "j", By: "alice", At: at(4)}}
	tl := h.buildTimeline(rec, views, acts, func(r scheduler.Run) string { return "#x" })
	var lanes []string
	for _, l := range tl.Lanes {
		lanes = append(lanes, l.Label)
	}
	if got := strings.Join(lanes, ","); got != "operators,app1,app2,not run" {
		t.Errorf("lanes %s", got)
	}
	count := map[class]int{}
	late := 0
	for _, m := range tl.Marks {
		count[m.Class]++
		if m.TailX > m.X {
			late++
		}
		if m.D == "" || m.Title == "" {
			t.Errorf("mark %+v without a shape or a title", m)
		}
	}
	want := map[class]int{classRan: 2, classLate: 1, classRetried: 1, classFailed: 1, classMissed: 1, classSkipped: 1, classSpent: 1, classAction: 1}
	for c, n := range want {
		if count[c] != n {
			t.Errorf("%d marks of %s, want %d (%v)", count[c], c, n, count)
		}
	}
	if late != 1 {
		t.Errorf("%d late tails, want 1", late)
	}
	if !strings.Contains(tl.Summary, "1 spent") || !strings.Contains(tl.Summary, "1 ran late") {
		t.Errorf("summary %q", tl.Summary)
	}
	if empty := h.buildTimeline(rec, nil, nil, nil); !empty.Empty {
		t.Error("no firing: not empty")
	}
	// A running run of a keeper that is gone is spent; of one up, running.
	run := scheduler.Run{Job: "j", Keeper: "gone", Scheduled: at(9), Start: at(9), Outcome: scheduler.OutcomeRunning, Attempt: 1}
	if v := h.viewRun(run, map[string]bool{"up": true}, nil); v.Class != classSpent {
		t.Errorf("a run of a keeper gone: %s", v.Class)
	}
	run.Keeper = "up"
	if v := h.viewRun(run, map[string]bool{"up": true}, nil); v.Class != classRunning {
		t.Errorf("a run of a keeper up: %s", v.Class)
	}
}
