package cli

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// demoLog builds a demo log in which every event is received when it
// happens.
type demoLog struct {
	t0  time.Time
	log []demoRecord
}

func (l *demoLog) add(at time.Duration, ev demoEvent) *demoLog {
	ev.T = l.t0.Add(at)
	l.log = append(l.log, demoRecord{at: ev.T, ev: ev})
	return l
}

func (l *demoLog) run(at time.Duration, who, job string, firing time.Duration) *demoLog {
	return l.add(at, demoEvent{Instance: who, Ev: evRun, Job: job, Firing: l.t0.Add(firing)})
}

// cleanDemo: app1 and app2 start; app1 leads and is killed at 4.2s; app2
// leads at 6.5s; every firing from 1s to 9s runs once; both stop at 10.5s.
func cleanDemo() *demoLog {
	l := &demoLog{t0: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	l.add(0, demoEvent{Instance: "app1", Ev: evStart}).
		add(0, demoEvent{Instance: "app2", Ev: evStart}).
		add(300*time.Millisecond, demoEvent{Instance: "app1", Ev: evMigrated, Applied: []int64{-1000, -990}}).
		add(400*time.Millisecond, demoEvent{Instance: "app2", Ev: evMigrated}).
		add(500*time.Millisecond, demoEvent{Instance: "app1", Ev: evReady}).
		add(600*time.Millisecond, demoEvent{Instance: "app2", Ev: evReady}).
		add(700*time.Millisecond, demoEvent{Instance: "app1", Ev: evLead, Fence: 1})
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
			l.add(4200*time.Millisecond, demoEvent{Instance: "app1", Ev: evKilled, Leader: true}).
				add(4210*time.Millisecond, demoEvent{Instance: "app1", Ev: evExited, Msg: "signal: killed"})
		}
		if s == 6 {
			l.add(6500*time.Millisecond, demoEvent{Instance: "app2", Ev: evLead, Fence: 2})
		}
	}
	return l.add(10500*time.Millisecond, demoEvent{Instance: "app2", Ev: evStopping, Msg: "end of the demo"}).
		add(10510*time.Millisecond, demoEvent{Instance: "app2", Ev: evUnlead}).
		add(10520*time.Millisecond, demoEvent{Instance: "app2", Ev: evStopped}).
		add(10530*time.Millisecond, demoEvent{Instance: "app2", Ev: evExited})
}

func TestSummarizeClean(t *testing.T) {
	s := summarize(cleanDemo().log, demoJobs())
	if f := s.failures(); len(f) != 0 {
		t.Errorf("failures %v", f)
	}
	// Due: tick 1..9 and even-second 2..8 (9.5s is the last instant an
	// instance going down at 10.5s counts for).
	if s.firings() != 13 || s.runs != 13 || s.due != 13 || len(s.missed) != 0 || len(s.twice) != 0 {
		t.Errorf("firings %d, runs %d, due %d, missed %v, twice %v", s.firings(), s.runs, s.due, s.missed, s.twice)
	}
	if len(s.failovers) != 1 {
		t.Fatalf("failovers %+v", s.failovers)
	}
	if f := s.failovers[0]; !f.done || f.from != "app1" || f.to != "app2" || f.kind != "SIGKILL" || f.took != 2300*time.Millisecond {
		t.Errorf("failover %+v", f)
	}
	if s.terms != 2 || !slices.Equal(s.migrations[-1000], []string{"app1"}) {
		t.Errorf("terms %d, migrations %v", s.terms, s.migrations)
	}
	var b strings.Builder
	s.print(&b, 3*time.Second)
	for _, w := range []string{
		"firings run:         13 (even-second 4, tick 9); runs by app1 2, app2 11",
		"firings run twice:   0\n",
		"firings missed:      0 of 13 due",
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
	l.add(10515*time.Millisecond, demoEvent{Instance: "app2", Ev: evMetrics, Runs: map[string]int{"tick": 7, "even-second": 4}})
	s := summarize(l.log, demoJobs())
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
				if who := s.twice[firingKey{"tick", s0(3)}]; !slices.Equal(who, []string{"app1", "app1"}) {
					t.Errorf("twice %v", s.twice)
				}
			},
		},
		{
			name: "migration applied twice",
			change: func(l *demoLog) {
				l.add(time.Second, demoEvent{Instance: "app2", Ev: evMigrated, Applied: []int64{-990}})
			},
			want: "migration -990 was applied 2 times (app1, app2)",
		},
		{
			name: "nobody took over",
			change: func(l *demoLog) {
				l.log = slices.DeleteFunc(l.log, func(r demoRecord) bool { return r.ev.Ev == evLead && r.ev.Instance == "app2" })
			},
			want: "nobody took over from app1",
		},
		{
			name:   "crash",
			change: func(l *demoLog) { l.log[len(l.log)-1].ev.Msg = "exit status 1" },
			want:   "app2 exited unexpectedly: exit status 1",
		},
		{
			name:   "error",
			change: func(l *demoLog) { l.add(time.Second, demoEvent{Instance: "app2", Ev: evError, Msg: "boom"}) },
			want:   "app2: boom",
		},
		{
			name: "metrics disagree with the events",
			change: func(l *demoLog) {
				l.add(10515*time.Millisecond, demoEvent{Instance: "app2", Ev: evMetrics, Runs: map[string]int{"tick": 6, "even-second": 4}})
			},
			want: "app2: its /metrics counted 6 runs of tick, its events 7",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := cleanDemo()
			tt.change(l)
			s := summarize(l.log, demoJobs())
			if f := s.failures(); len(f) != 1 || f[0] != tt.want {
				t.Errorf("failures %q, want [%q]", f, tt.want)
			}
			if tt.check != nil {
				tt.check(t, s)
			}
		})
	}
}

// s0 is firing second n of the clean demo, in Unix nanoseconds.
func s0(n int) int64 { return cleanDemo().t0.Add(time.Duration(n) * time.Second).UnixNano() }

// TestSummarizeMissed: a firing nobody ran while an instance was up is
// missed; one due while nobody was up is not counted.
func TestSummarizeMissed(t *testing.T) {
	l := cleanDemo()
	l.log = slices.DeleteFunc(l.log, func(r demoRecord) bool {
		return r.ev.Ev == evRun && r.ev.Job == "tick" && r.ev.Firing.Equal(l.t0.Add(5*time.Second))
	})
	s := summarize(l.log, demoJobs())
	if !slices.Equal(s.missed, []firingKey{{"tick", s0(5)}}) || s.due != 13 {
		t.Errorf("missed %v of %d", s.missed, s.due)
	}
	if f := s.failures(); len(f) != 0 {
		t.Errorf("a missed firing failed the demo: %v", f) // at most once, not exactly once
	}

	// Only app1, killed at 4.2s: firings from 4s on were due while no
	// instance could run them (4s is within demoSettle of the kill).
	solo := &demoLog{t0: l.t0}
	solo.add(0, demoEvent{Instance: "app1", Ev: evStart}).
		add(500*time.Millisecond, demoEvent{Instance: "app1", Ev: evReady}).
		run(time.Second, "app1", "tick", time.Second).
		run(2*time.Second, "app1", "tick", 2*time.Second).
		run(2*time.Second, "app1", "even-second", 2*time.Second).
		add(4200*time.Millisecond, demoEvent{Instance: "app1", Ev: evKilled}).
		add(4300*time.Millisecond, demoEvent{Instance: "app1", Ev: evExited, Msg: "signal: killed"})
	s = summarize(solo.log, demoJobs())
	if s.due != 4 || !slices.Equal(s.missed, []firingKey{{"tick", s0(3)}}) {
		t.Errorf("solo: missed %v of %d due, want tick 3s of 4", s.missed, s.due)
	}
	if f := s.failures(); len(f) != 0 {
		t.Errorf("solo: failures %v", f)
	}
}

// TestSummarizeMigrationsNotReached: instances that failed before their
// migrations ran do not make the summary claim the migrations were
// already applied.
func TestSummarizeMigrationsNotReached(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	l := &demoLog{t0: t0}
	for _, who := range []string{"app1", "app2", "app3"} {
		l.add(0, demoEvent{Instance: who, Ev: evStart}).
			add(100*time.Millisecond, demoEvent{Instance: who, Ev: evError, Msg: "connection refused"}).
			add(110*time.Millisecond, demoEvent{Instance: who, Ev: evExited, Msg: "exit status 1"})
	}
	s := summarize(l.log, demoJobs())
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
	l.add(0, demoEvent{Instance: "app1", Ev: evMigrated})
	b.Reset()
	summarize(l.log, demoJobs()).print(&b, 3*time.Second)
	if !strings.Contains(b.String(), "migrations applied:  none (already applied)\n") {
		t.Errorf("summary:\n%s", b.String())
	}
}
