//go:build unix

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mongolock/mongolock/internal/cluster"
	"github.com/mongolock/mongolock/scheduler"
)

// catchUpCase is a job of TestCatchUp, with the policy it has and what it
// promises of the firings missed, D+1 to Z: the newest runs of them run,
// and the others are recorded as not run, for reason, in one record.
type catchUpCase struct {
	job    string
	policy scheduler.CatchUp
	runs   int
	reason string
	atZ    bool // the new instance's first claim is of Z, at its Start (else Z+1's)
}

// catchUpCases are the jobs of TestCatchUp when the new instance's clock is
// skewed by skew.
func catchUpCases(skew time.Duration) []catchUpCase {
	return []catchUpCase{
		{"skip", scheduler.CatchUpSkip(time.Hour), 0, scheduler.ReasonMissed, false},
		{"latest", scheduler.CatchUpLatest(time.Hour), 1, scheduler.ReasonMissed, true},
		{"all-max-3", scheduler.CatchUpAll(time.Hour, 3), 3, scheduler.ReasonMissed, true},
		// Start reads Z + every/2 + skew, and the plan follows at once: Z-1
		// is within the window, Z-2 past it, by 0.3 periods at least.
		{"all-in-window", scheduler.CatchUpAll(2200*time.Millisecond+skew, 100), 2, scheduler.ReasonWindow, true},
	}
}

// Scenario 9: every instance is down for five periods, then one starts.
// What runs of the firings missed meanwhile, D+1 to Z (D the last firing
// that ran, Z the last before the new instance's Start), is what each
// job's catch-up policy promises, each once, and the others are recorded
// as not run, in one record with its reason, count and last firing:
//
//   - CatchUpSkip: none runs; the first claim, of Z+1, records D+1..Z as
//     missed.
//   - CatchUpLatest: Start claims Z and runs it; D+1..Z-1 are missed.
//   - CatchUpAll(hour, 3): Z-2, Z-1, Z run, oldest first; D+1..Z-3 are
//     missed.
//   - CatchUpAll(window, 100), the window just over a period and a half at
//     the new instance's Start, by its clock: Z-1 and Z run; D+1..Z-2 are
//     past the window.
//
// The new instance starts its scheduler at a set instant (StartAt), half a
// period after Z, so that which firings fell before its Start is known.
// Clocks: all right, or the instance that stops 400 ms ahead and the one
// that starts 400 ms behind.
func TestCatchUp(t *testing.T) {
	for _, skews := range [][2]time.Duration{{0, 0}, {400 * time.Millisecond, -400 * time.Millisecond}} {
		name := "no skew"
		if skews != [2]time.Duration{} {
			name = fmt.Sprintf("skews %v then %v", skews[0], skews[1])
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			catchUp(t, skews)
		})
	}
}

// catchUp runs TestCatchUp's scenario: the instance before the outage has
// skews[0], the one after skews[1].
func catchUp(t *testing.T, skews [2]time.Duration) {
	cases := catchUpCases(skews[1])
	c := newCluster(t, testTTL)
	c.base.NoRunner = true
	c.base.JobCatchUp = map[string]scheduler.CatchUp{}
	for _, cs := range cases {
		c.base.Jobs = append(c.base.Jobs, cs.job)
		c.base.JobCatchUp[cs.job] = cs.policy
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
		// What ran, from D on: D, the newest runs of D+1..Z, Z+1, Z+2, once.
		var wrong []string
		for f := d; !f.After(z.Add(2 * every)); f = f.Add(every) {
			n, want := ran[cluster.NewFiring(cs.job, f)], 0
			if f.Equal(d) || f.After(z.Add(-time.Duration(cs.runs)*every)) {
				want = 1
			}
			if n != want {
				wrong = append(wrong, fmt.Sprintf("%s ran %d times, want %d", f.Local().Format("15:04:05"), n, want))
			}
		}
		missed := int(z.Sub(d)/every) - cs.runs
		wantRec := scheduler.Run{Job: cs.job, Keeper: second.Name(), Scheduled: d.Add(every), Through: d.Add(time.Duration(missed) * every),
			Count: missed, Outcome: scheduler.OutcomeSkipped, Reason: cs.reason}
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
		if len(skipped) != 1 || skipped[0] != runText(wantRec) {
			t.Errorf("%s: records of firings not run:\n  %s\nwant one:\n  %s", cs.job, strings.Join(skipped, "\n  "), runText(wantRec))
		}
		// The instance that recorded them reported them.
		if ev := cluster.Filter(evs, func(e cluster.Event) bool {
			return e.Kind == cluster.EvSkipped && e.Instance == second.Name() && e.Job == cs.job &&
				e.Firing.Equal(wantRec.Scheduled) && strings.HasPrefix(e.Msg, cs.reason)
		}); len(ev) != 1 {
			t.Errorf("%s: %s reported %d FiringSkipped events of %s (%s), want 1", cs.job, second.Name(), len(ev),
				wantRec.Scheduled.Local().Format("15:04:05"), cs.reason)
		}
		// Start claimed Z, or not.
		claims := cluster.Filter(evs, func(e cluster.Event) bool {
			return e.Kind == cluster.EvClaimed && e.Instance == second.Name() && e.Job == cs.job
		})
		if want := map[bool]time.Time{true: z, false: z.Add(every)}[cs.atZ]; len(claims) == 0 || !claims[0].Firing.Equal(want) {
			t.Errorf("%s: %s claimed %v; want its first claim to be of %s", cs.job, second.Name(), claims, want.Local().Format("15:04:05"))
		}
	}
	c.checkExclusion()
}
