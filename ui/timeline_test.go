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
		{Scheduled: at(3), Through: at(3), Count: 1, Outcome: scheduler.OutcomeSkipped, Reason: scheduler.ReasonMisfired},
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
	want := map[class]int{classRan: 2, classLate: 1, classRetried: 1, classFailed: 1, classMisfired: 1, classSkipped: 1, classSpent: 1, classAction: 1}
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
	// A run the job's next run recorded as spent: no duration (its end is
	// when it was found), whoever is up.
	run.Outcome, run.End = scheduler.OutcomeSpent, at(12)
	if v := h.viewRun(run, map[string]bool{"up": true}, nil); v.Class != classSpent || v.Took != 0 || !strings.HasPrefix(v.Label, "spent") {
		t.Errorf("a run recorded as spent: %s %v %q", v.Class, v.Took, v.Label)
	}
}

// TestAxisTicks: the axis is labelled at round times, at most 6, as
// precisely as the step needs, with the date where the span crosses one.
func TestAxisTicks(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		lo, hi string
		want   string
	}{
		{"2026-11-27T23:26:43.86Z", "2026-11-27T23:26:46.14Z", "23:26:44.0,23:26:44.5,23:26:45.0,23:26:45.5,23:26:46.0"},
		{"2026-11-27T23:26:43.86Z", "2026-11-27T23:26:44.5Z", "23:26:44.0,23:26:44.2,23:26:44.4"},
		{"2026-11-27T10:03:00Z", "2026-11-27T10:58:00Z", "10:10,10:20,10:30,10:40,10:50"},
		{"2026-11-27T22:00:00Z", "2026-11-28T03:30:00Z", "11-27 22:00,11-27 23:00,11-28 00:00,11-28 01:00,11-28 02:00,11-28 03:00"},
		{"2026-11-20T05:00:00Z", "2026-11-27T05:00:00Z", "2026-11-21,2026-11-23,2026-11-25,2026-11-27"},
	} {
		lo, hi := at(c.lo), at(c.hi)
		ticks := axisTicks(lo, hi, func(v time.Time) float64 {
			return tlLeft + float64(v.Sub(lo))/float64(hi.Sub(lo))*(tlWidth-tlLeft-tlRight)
		})
		var got []string
		for _, k := range ticks {
			got = append(got, k.Label)
		}
		if g := strings.Join(got, ","); g != c.want {
			t.Errorf("%s..%s: ticks %s, want %s", c.lo, c.hi, g, c.want)
		}
	}
}
