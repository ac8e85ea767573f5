package cli

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mongolock/mongolock/internal/cluster"
	"github.com/mongolock/mongolock/scheduler"
)

// demoLog builds a demo log in which every event is received when it
// happens.
type demoLog struct {
	t0  time.Time
	log []cluster.Event
}

func (l *demoLog) add(at time.Duration, ev cluster.Event) *demoLog {
	ev.T = l.t0.Add(at)
	ev.Received = ev.T
	l.log = append(l.log, ev)
	return l
}

func (l *demoLog) run(at time.Duration, who, job string, firing time.Duration) *demoLog {
	return l.add(at, cluster.Event{Instance: who, Kind: cluster.EvRun, Job: job, Firing: l.t0.Add(firing)})
}

// cleanDemo: app1 and app2 start; app1 leads and is killed at 4.2s; app2
// leads at 6.5s; every firing from 1s to 9s runs once; both stop at 10.5s.
func cleanDemo() *demoLog {
	l := &demoLog{t0: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	l.add(0, cluster.Event{Instance: "app1", Kind: cluster.EvStart}).
		add(0, cluster.Event{Instance: "app2", Kind: cluster.EvStart}).
		add(300*time.Millisecond, cluster.Event{Instance: "app1", Kind: cluster.EvMigrated, Applied: []int64{-1000, -990}}).
		add(400*time.Millisecond, cluster.Event{Instance: "app2", Kind: cluster.EvMigrated}).
		add(500*time.Millisecond, cluster.Event{Instance: "app1", Kind: cluster.EvReady}).
		add(600*time.Millisecond, cluster.Event{Instance: "app2", Kind: cluster.EvReady}).
		add(700*time.Millisecond, cluster.Event{Instance: "app1", Kind: cluster.EvLead, Fence: 1})
	for s := 1; s <= 9; s++ {
		who := "app2"
		if s < 4 && s%2 == 1 {
			who = "app1"
		}
		f := time.Duration(s) * time.Second
		l.run(f+10*time.Millisecond, who, "tick", f)
		if s%2 == 0 {
			l.run(f+20*time.Millisecond, who, "even-second", f)
		}
		if s == 4 {
			l.add(4200*time.Millisecond, cluster.Event{Instance: "app1", Kind: cluster.EvKilled, Leader: true}).
				add(4210*time.Millisecond, cluster.Event{Instance: "app1", Kind: cluster.EvExited, Msg: "signal: killed"})
		}
		if s == 6 {
			l.add(6500*time.Millisecond, cluster.Event{Instance: "app2", Kind: cluster.EvLead, Fence: 2})
		}
	}
	return l.add(10500*time.Millisecond, cluster.Event{Instance: "app2", Kind: cluster.EvStopping, Msg: "end of the demo"}).
		add(10510*time.Millisecond, cluster.Event{Instance: "app2", Kind: cluster.EvUnlead, Fence: 2}).
		add(10520*time.Millisecond, cluster.Event{Instance: "app2", Kind: cluster.EvStopped}).
		add(10530*time.Millisecond, cluster.Event{Instance: "app2", Kind: cluster.EvExited})
}

func TestSummarizeClean(t *testing.T) {
	s := summarize(cleanDemo().log, demoJobs(), demoHistory{})
	if f := s.failures(); len(f) != 0 {
		t.Errorf("failures %v", f)
	}
	// Due: tick 1..8 and even-second 2..6 (an instance going down at 10.5s
	// counts for a firing whose next one falls by 9.5s).
	if s.firings() != 13 || s.runs != 13 || s.due != 11 || len(s.missed) != 0 || len(s.twice) != 0 {
		t.Errorf("firings %d, runs %d, due %d, missed %v, twice %v", s.firings(), s.runs, s.due, s.missed, s.twice)
	}
	if len(s.failovers) != 1 {
		t.Fatalf("failovers %+v", s.failovers)
	}
	if f := s.failovers[0]; !f.done || f.from != "app1" || f.to != "app2" || f.kind != "SIGKILL" || f.took != 2300*time.Millisecond {
		t.Errorf("failover %+v", f)
	}
	if len(s.terms) != 2 || len(s.overlaps) != 0 || !slices.Equal(s.migrations[-1000], []string{"app1"}) {
		t.Errorf("terms %v, overlaps %v, migrations %v", s.terms, s.overlaps, s.migrations)
	}
	// app1's term ends when it exited (it was killed), app2's at its unlead.
	if s.terms[0].End != cleanDemo().t0.Add(4210*time.Millisecond) || s.terms[1].End != cleanDemo().t0.Add(10510*time.Millisecond) {
		t.Errorf("terms %v", s.terms)
	}
	var b strings.Builder
	s.print(&b, 3*time.Second)
	for _, w := range []string{
		"firings run:         13 (even-second 4, tick 9); runs by app1 2, app2 11",
		"firings run twice:   0\n",
		"firings misfired:    0 of 11 due",
		"SIGKILL app1 (leader)  -> app2 led 2300 ms later (0.77 x TTL)",
		"migrations applied:  -1000 by app1, -990 by app1",
	} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("summary lacks %q:\n%s", w, b.String())
		}
	}
}

// TestSummarizeMetrics: an instance whose own /metrics counted the runs its
// events show is named in the summary.
func TestSummarizeMetrics(t *testing.T) {
	l := cleanDemo()
	l.add(10515*time.Millisecond, cluster.Event{Instance: "app2", Kind: cluster.EvMetrics, Runs: map[string]int{"tick": 7, "even-second": 4}})
	s := summarize(l.log, demoJobs(), demoHistory{})
	if f := s.failures(); len(f) != 0 || !slices.Equal(s.scraped, []string{"app2"}) {
		t.Fatalf("failures %v, scraped %v; want none and app2", f, s.scraped)
	}
	var b strings.Builder
	s.print(&b, 3*time.Second)
	if !strings.Contains(b.String(), "metrics:             the /metrics of app2 counted the runs their events show") {
		t.Errorf("summary:\n%s", b.String())
	}
}

func TestSummarizeFailures(t *testing.T) {
	tests := []struct {
		name   string
		change func(*demoLog)
		want   string
		check  func(*testing.T, demoSummary)
	}{
		{
			name:   "firing run twice",
			change: func(l *demoLog) { l.run(11*time.Second, "app1", "tick", 3*time.Second) },
			want:   "1 firing(s) ran twice",
			check: func(t *testing.T, s demoSummary) {
				if who := s.twice[s0("tick", 3)]; !slices.Equal(who, []string{"app1", "app1"}) {
					t.Errorf("twice %v", s.twice)
				}
			},
		},
		{
			name: "migration applied twice",
			change: func(l *demoLog) {
				l.add(time.Second, cluster.Event{Instance: "app2", Kind: cluster.EvMigrated, Applied: []int64{-990}})
			},
			want: "migration -990 was applied 2 times (app1, app2)",
		},
		{
			name: "nobody took over",
			change: func(l *demoLog) {
				l.log = slices.DeleteFunc(l.log, func(e cluster.Event) bool { return e.Kind == cluster.EvLead && e.Instance == "app2" })
			},
			want: "nobody took over from app1",
		},
		{
			name: "two leaders at once",
			change: func(l *demoLog) {
				l.add(3*time.Second, cluster.Event{Instance: "app2", Kind: cluster.EvLead, Fence: 9}).
					add(3500*time.Millisecond, cluster.Event{Instance: "app2", Kind: cluster.EvUnlead, Fence: 9})
			},
			want: "1 pair(s) of leader terms overlapped",
			check: func(t *testing.T, s demoSummary) {
				var b strings.Builder
				s.print(&b, 3*time.Second)
				if !strings.Contains(b.String(), "    app1 fence=1 [") || !strings.Contains(b.String(), "overlaps app2 fence=9 [") {
					t.Errorf("summary:\n%s", b.String())
				}
			},
		},
		{
			name:   "crash",
			change: func(l *demoLog) { l.log[len(l.log)-1].Msg = "exit status 1" },
			want:   "app2 exited unexpectedly: exit status 1",
		},
		{
			name: "error",
			change: func(l *demoLog) {
				l.add(time.Second, cluster.Event{Instance: "app2", Kind: cluster.EvError, Msg: "boom"})
			},
			want: "app2: boom",
		},
		{
			name: "metrics disagree with the events",
			change: func(l *demoLog) {
				l.add(10515*time.Millisecond, cluster.Event{Instance: "app2", Kind: cluster.EvMetrics, Runs: map[string]int{"tick": 6, "even-second": 4}})
			},
			want: "app2: its /metrics counted 6 runs of tick, its events 7",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := cleanDemo()
			tt.change(l)
			s := summarize(l.log, demoJobs(), demoHistory{})
			if f := s.failures(); len(f) != 1 || f[0] != tt.want {
				t.Errorf("failures %q, want [%q]", f, tt.want)
			}
			if tt.check != nil {
				tt.check(t, s)
			}
		})
	}
}

// s0 is the firing of job at second n of the clean demo.
func s0(job string, n int) cluster.Firing {
	return cluster.NewFiring(job, cleanDemo().t0.Add(time.Duration(n)*time.Second))
}

// without removes the run of job's firing at second n from l.
func (l *demoLog) without(job string, n int) *demoLog {
	l.log = slices.DeleteFunc(l.log, func(e cluster.Event) bool {
		return e.Kind == cluster.EvRun && e.Job == job && e.Firing.Equal(l.t0.Add(time.Duration(n)*time.Second))
	})
	return l
}

// TestSummarizeMissed: a firing nobody ran while an instance was up, and
// that is neither spent nor skipped by a policy, is missed, and fails the
// demo; one due while nobody was up is not counted.
func TestSummarizeMissed(t *testing.T) {
	l := cleanDemo().without("tick", 5)
	s := summarize(l.log, demoJobs(), demoHistory{})
	if want := []noteFiring{{s0("tick", 5), "no record of it"}}; !slices.Equal(s.missed, want) || s.due != 11 {
		t.Errorf("missed %v of %d, want %v of 11", s.missed, s.due, want)
	}
	if f := s.failures(); !slices.Equal(f, []string{"1 firing(s) missed while an instance was up"}) {
		t.Errorf("failures %q", f)
	}
	var b strings.Builder
	s.print(&b, 3*time.Second)
	for _, w := range []string{
		"firings misfired:    1 of 11 due while an instance was up\n    tick " + s0("tick", 5).Scheduled.Local().Format("15:04:05") + ": no record of it\n",
		"these were lost)",
	} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("summary lacks %q:\n%s", w, b.String())
		}
	}

	// Only app1, killed at 4.2s: tick 1s and 2s were due; the firings
	// from 3s on were not (the claim of the firing after 3s, which covers
	// it if it was not tried, falls within demoSettle of the kill), and
	// neither was even-second 2s.
	solo := &demoLog{t0: l.t0}
	solo.add(0, cluster.Event{Instance: "app1", Kind: cluster.EvStart}).
		add(500*time.Millisecond, cluster.Event{Instance: "app1", Kind: cluster.EvReady}).
		run(time.Second, "app1", "tick", time.Second).
		add(4200*time.Millisecond, cluster.Event{Instance: "app1", Kind: cluster.EvKilled}).
		add(4300*time.Millisecond, cluster.Event{Instance: "app1", Kind: cluster.EvExited, Msg: "signal: killed"})
	s = summarize(solo.log, demoJobs(), demoHistory{})
	if s.due != 2 || len(s.missed) != 1 || s.missed[0].Firing != s0("tick", 2) {
		t.Errorf("solo: missed %v of %d due, want tick 2s of 2", s.missed, s.due)
	}
}

// TestSummarizeSpent: a firing whose start was recorded, and whose job was
// never called, is spent, not missed: from a start record a killed
// instance left running, or from the history's "not run:" record. A start
// record of a firing that ran (the instance died mid-run) is a run.
func TestSummarizeSpent(t *testing.T) {
	l := cleanDemo().without("tick", 3).without("even-second", 6)
	for i := range l.log {
		if l.log[i].Kind == cluster.EvStart {
			l.log[i].Keeper = l.log[i].Instance + "/k"
		}
	}
	l.add(4300*time.Millisecond, cluster.Event{Instance: "app1", Kind: cluster.EvStartSeen, Job: "tick", Firing: l.t0.Add(3 * time.Second), Keeper: "app1/k"}).
		add(4300*time.Millisecond, cluster.Event{Instance: "app1", Kind: cluster.EvStartSeen, Job: "even-second", Firing: l.t0.Add(2 * time.Second), Keeper: "app1/k"})
	hist := demoHistory{notRun: map[cluster.Firing]startRecord{
		s0("even-second", 6): {keeper: "app2/k", err: "not run: lock: lease lost"},
	}}
	s := summarize(l.log, demoJobs(), hist)
	want := []noteFiring{
		{s0("tick", 3), "started by app1, killed before it called the job"},
		{s0("even-second", 6), "started by app2, recorded as not run: lock: lease lost"},
	}
	if !slices.Equal(s.spent, want) || len(s.missed) != 0 || s.due != 11 || s.firings() != 11 {
		t.Errorf("spent %v, missed %v of %d, firings run %d; want spent %v, none missed of 11, 11 run", s.spent, s.missed, s.due, s.firings(), want)
	}
	if f := s.failures(); len(f) != 0 {
		t.Errorf("failures %q", f)
	}
	var b strings.Builder
	s.print(&b, 3*time.Second)
	for _, w := range []string{
		"firings spent:       2 (started, then their instance died or lost its lease before running the job)\n",
		"it is not run\n    again, anywhere.",
		"firings misfired:    0 of 11 due",
	} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("summary lacks %q:\n%s", w, b.String())
		}
	}
}

// TestSummarizeSkipped: a firing the history records as not run by a
// documented policy (the overlap policy here) is skipped, not missed; one
// it records as not run for another reason while an instance was up is
// missed, with that reason.
func TestSummarizeSkipped(t *testing.T) {
	l := cleanDemo().without("tick", 7).without("tick", 8)
	hist := demoHistory{skipped: []skipRecord{
		{job: "tick", from: l.t0.Add(7 * time.Second), through: l.t0.Add(7 * time.Second), reason: scheduler.ReasonLockHeld},
		{job: "tick", from: l.t0.Add(8 * time.Second), through: l.t0.Add(8 * time.Second), reason: scheduler.ReasonMisfired},
	}}
	s := summarize(l.log, demoJobs(), hist)
	if want := []noteFiring{{s0("tick", 7), scheduler.ReasonLockHeld}}; !slices.Equal(s.skipped, want) {
		t.Errorf("skipped %v, want %v", s.skipped, want)
	}
	if want := []noteFiring{{s0("tick", 8), "recorded as not run: " + scheduler.ReasonMisfired}}; !slices.Equal(s.missed, want) {
		t.Errorf("missed %v, want %v", s.missed, want)
	}
}

// TestSummarizeMigrationsNotReached: instances that failed before their
// migrations ran do not make the summary claim the migrations were
// already applied.
func TestSummarizeMigrationsNotReached(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	l := &demoLog{t0: t0}
	for _, who := range []string{"app1", "app2", "app3"} {
		l.add(0, cluster.Event{Instance: who, Kind: cluster.EvStart}).
			add(100*time.Millisecond, cluster.Event{Instance: who, Kind: cluster.EvError, Msg: "connection refused"}).
			add(110*time.Millisecond, cluster.Event{Instance: who, Kind: cluster.EvExited, Msg: "exit status 1"})
	}
	s := summarize(l.log, demoJobs(), demoHistory{})
	var b strings.Builder
	s.print(&b, 3*time.Second)
	if !strings.Contains(b.String(), "migrations applied:  none (no instance got that far)\n") {
		t.Errorf("summary:\n%s", b.String())
	}
	if len(s.failures()) != 6 {
		t.Errorf("failures %q", s.failures())
	}

	// Instances that found the migrations applied say so.
	l = &demoLog{t0: t0}
	l.add(0, cluster.Event{Instance: "app1", Kind: cluster.EvMigrated})
	b.Reset()
	summarize(l.log, demoJobs(), demoHistory{}).print(&b, 3*time.Second)
	if !strings.Contains(b.String(), "migrations applied:  none (already applied)\n") {
		t.Errorf("summary:\n%s", b.String())
	}
}

// TestSummarizeDeadLockHolder: a firing recorded as not run because the
// previous run still held the job's lock, when that run's instance had been
// killed before the firing fell, is missed: the documented policy waits out
// a dead run's lock and runs the firing late.
func TestSummarizeDeadLockHolder(t *testing.T) {
	l := cleanDemo().without("tick", 4).without("tick", 5)
	hist := demoHistory{skipped: []skipRecord{
		{job: "tick", from: l.t0.Add(4 * time.Second), through: l.t0.Add(5 * time.Second), reason: scheduler.ReasonLockHeld + " (2 through x)"},
	}}
	s := summarize(l.log, demoJobs(), hist)
	// tick 4s fell before app1, which ran tick 3s, was killed (4.2s).
	if want := []noteFiring{{s0("tick", 4), scheduler.ReasonLockHeld + " (2 through x)"}}; !slices.Equal(s.skipped, want) {
		t.Errorf("skipped %v, want %v", s.skipped, want)
	}
	kill := l.t0.Add(4200 * time.Millisecond).Local().Format(clockFormat)
	want := []noteFiring{{s0("tick", 5), "recorded as not run: " + scheduler.ReasonLockHeld + " (2 through x); but the run before it, of " +
		s0("tick", 3).String() + ", was on app1, killed at " + kill}}
	if !slices.Equal(s.missed, want) {
		t.Errorf("missed %v, want %v", s.missed, want)
	}
}

// TestSkipReason: a record of firings not run covers its range, and only
// the reasons of documented policies excuse a firing due while instances
// were up.
func TestSkipReason(t *testing.T) {
	t0 := cleanDemo().t0
	h := demoHistory{skipped: []skipRecord{
		{job: "tick", from: t0.Add(7 * time.Second), through: t0.Add(9 * time.Second), reason: scheduler.ReasonRunGoing + " (3 through 12:00:09)"},
	}}
	for _, tt := range []struct {
		k    cluster.Firing
		want bool
	}{{s0("tick", 6), false}, {s0("tick", 7), true}, {s0("tick", 9), true}, {s0("tick", 10), false}, {s0("even-second", 8), false}} {
		if _, ok := h.skipReason(tt.k); ok != tt.want {
			t.Errorf("skipReason(%v) = %v, want %v", tt.k, ok, tt.want)
		}
	}
	for reason, want := range map[string]bool{
		scheduler.ReasonRunGoing: true, scheduler.ReasonLockHeld: true, scheduler.ReasonPaused: true,
		scheduler.ReasonRemoved: true, scheduler.ReasonMisfired: false, "": false,
	} {
		if byPolicy(reason) != want {
			t.Errorf("byPolicy(%q) = %v, want %v", reason, !want, want)
		}
	}
}
