//go:build unix

package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mongolock/mongolock/internal/cluster"
	"github.com/mongolock/mongolock/scheduler"
)

// misfireCase is a job of TestMisfires, with the misfire policy it has and
// how many of the two misfires, D+1 and D+2, it runs: the newest; the
// others are recorded as not run (ReasonMisfired), one record each.
type misfireCase struct {
	job    string
	policy scheduler.MisfirePolicy
	runs   int
}

// misfireThreshold is TestMisfires' threshold: a little over the shortest
// the scheduler accepts (TTL and two polls, 3.33s), so that of D+1..Z the
// three newest are within it and the two oldest are misfires.
const misfireThreshold = 3400 * time.Millisecond

// misfireCases are the jobs of TestMisfires when the new instance's clock
// is skewed by skew.
func misfireCases(skew time.Duration) []misfireCase {
	return []misfireCase{
		{"skip", scheduler.MisfireSkip(), 0},
		{"latest", scheduler.MisfireRunLatest(time.Hour), 1},
		{"all-max-3", scheduler.MisfireRunAll(time.Hour, 3), 2},
		// The claim at Start is made Z + every/2 - skew in true time (the
		// server's clock): D+2 (Z-3) is within a window of 4s - skew,
		// D+1 past it, by half a period.
		{"all-in-window", scheduler.MisfireRunAll(4*time.Second-skew, 100), 1},
	}
}

// Scenario 9: every instance is down for five periods, then one starts,
// half a period after Z, the last firing before its Start (D the last
// firing that ran, so D+1..Z fell while no instance was up). With a
// misfire threshold of 3.4s, Z-2, Z-1 and Z can still start within it:
// they run, late, whatever the policy. D+1 and D+2 are misfires, and what
// runs of them is what each job's misfire policy promises, each once; each
// of the others is recorded as not run (ReasonMisfired):
//
//   - MisfireSkip: none runs.
//   - MisfireRunLatest: D+2 runs.
//   - MisfireRunAll(hour, 3): both run, oldest first.
//   - MisfireRunAll(window, 100), the window half a period past D+2's
//     lateness: D+2 runs.
//
// The new instance starts its scheduler at a set instant (StartAt), and
// its Start claims Z. Clocks: all right, or the instance that stops 400 ms
// ahead and the one that starts 400 ms behind.
func TestMisfires(t *testing.T) {
	for _, skews := range [][2]time.Duration{{0, 0}, {400 * time.Millisecond, -400 * time.Millisecond}} {
		name := "no skew"
		if skews != [2]time.Duration{} {
			name = fmt.Sprintf("skews %v then %v", skews[0], skews[1])
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			misfires(t, skews)
		})
	}
}

// misfires runs TestMisfires' scenario: the instance before the outage
// has skews[0], the one after skews[1].
func misfires(t *testing.T, skews [2]time.Duration) {
	cases := misfireCases(skews[1])
	c := newCluster(t, testTTL)
	c.base.NoRunner = true
	c.base.MisfireThreshold = misfireThreshold
	c.base.JobMisfirePolicy = map[string]scheduler.MisfirePolicy{}
	for _, cs := range cases {
		c.base.Jobs = append(c.base.Jobs, cs.job)
		c.base.JobMisfirePolicy[cs.job] = cs.policy
	}
	first := c.spawn(func(cfg *instanceConfig) { cfg.Skew = skews[0] })
	c.awaitUp(0, first.Name())
	c.await(0, 2*len(cases), hang, "two runs of each job", cluster.IsKind(cluster.EvRun))
	// Its clock reads D plus half a period or more: it claimed D, and not
	// D+1 (unless its stop took half a period on a loaded machine: D is
	// the last firing it ran).
	untilMidPeriod(0)
	c.terminate(first, instanceStopTimeout)
	var d time.Time
	for _, e := range cluster.Filter(c.Events(), cluster.IsKindBy(cluster.EvRun, first.Name())) {
		if !e.Triggered && e.Firing.After(d) {
			d = e.Firing
		}
	}
	z := d.Add(5 * every)
	startAt := z.Add(every / 2)

	// The new instance starts at once, and waits for startAt to start its
	// scheduler: the periods until then leave it time to start however
	// loaded the machine.
	from := c.Mark()
	second := c.spawn(func(cfg *instanceConfig) { cfg.Skew, cfg.StartAt = skews[1], startAt })
	ready := c.awaitUp(from, second.Name())
	if late := ready.T.Sub(startAt); late > every/4 {
		t.Fatalf("%s started its scheduler %v after %s: which firings fell before its Start is not known", second.Name(), late, startAt.Format("15:04:05.000"))
	}
	c.await(from, len(cases), hang, "the runs of Z+2", func(e cluster.Event) bool {
		return e.Kind == cluster.EvRun && e.Firing.Equal(z.Add(2*every))
	})
	c.terminate(second, instanceStopTimeout) // its history is written
	t.Logf("D %s, Z %s, Start at %s (skews %v, %v)", d.Local().Format("15:04:05"), z.Local().Format("15:04:05"),
		startAt.Local().Format("15:04:05.000"), skews[0], skews[1])

	ran := c.firings()
	evs := c.Events()
	for _, cs := range cases {
		// What ran, from D on: D, the newest cs.runs of D+1 and D+2, Z-2..Z,
		// Z+1, Z+2, once.
		var wrong []string
		for f := d; !f.After(z.Add(2 * every)); f = f.Add(every) {
			n, want := ran[cluster.NewFiring(cs.job, f)], 0
			if f.Equal(d) || f.After(z.Add(-time.Duration(3+cs.runs)*every)) {
				want = 1
			}
			if n != want {
				wrong = append(wrong, fmt.Sprintf("%s ran %d times, want %d", f.Local().Format("15:04:05"), n, want))
			}
		}
		var want []string
		for k := 1; k <= 2-cs.runs; k++ {
			want = append(want, runText(scheduler.Run{Job: cs.job, Keeper: second.Name(), Scheduled: d.Add(time.Duration(k) * every),
				Outcome: scheduler.OutcomeSkipped, Reason: scheduler.ReasonMisfired}))
		}
		var skipped []string
		var lines []string
		for _, r := range c.history(cs.job) {
			lines = append(lines, runText(r))
			if r.Outcome == scheduler.OutcomeSkipped {
				skipped = append(skipped, runText(r))
			}
		}
		t.Logf("%s (%+v): history:\n  %s", cs.job, cs.policy, strings.Join(lines, "\n  "))
		if len(wrong) > 0 {
			t.Errorf("%s: firings from D to Z+2: %s", cs.job, strings.Join(wrong, "; "))
		}
		if !slices.Equal(skipped, want) {
			t.Errorf("%s: records of firings not run:\n  %s\nwant:\n  %s", cs.job, strings.Join(skipped, "\n  "), strings.Join(want, "\n  "))
		}
		// The instance that recorded them reported them.
		if ev := cluster.Filter(evs, func(e cluster.Event) bool {
			return e.Kind == cluster.EvSkipped && e.Instance == second.Name() && e.Job == cs.job &&
				strings.HasPrefix(e.Msg, scheduler.ReasonMisfired)
		}); len(ev) != len(want) {
			t.Errorf("%s: %s reported %d FiringSkipped events of misfires, want %d", cs.job, second.Name(), len(ev), len(want))
		}
		// Start claimed Z.
		claims := cluster.Filter(evs, func(e cluster.Event) bool {
			return e.Kind == cluster.EvClaimed && e.Instance == second.Name() && e.Job == cs.job
		})
		if len(claims) == 0 || !claims[0].Firing.Equal(z) {
			t.Errorf("%s: %s claimed %v; want its first claim to be of %s", cs.job, second.Name(), claims, z.Local().Format("15:04:05"))
		}
	}
	c.checkExclusion()
}
