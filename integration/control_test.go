//go:build unix

package integration

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mongolock/mongolock/cli"
	"github.com/mongolock/mongolock/internal/cluster"
	"github.com/mongolock/mongolock/scheduler"
)

// Scenario 10: an operator pauses a job from the command line (`mongolock
// jobs pause`, the cli package in this process) while three instances run
// it and another job. From the next period on no instance starts it (a
// firing claimed before the pause may still start); every instance is
// restarted, and it stays paused; every firing meanwhile is recorded as not
// run, "paused"; the other job runs throughout. `jobs resume`: it runs
// again, every firing once. Then two operators trigger it at once (`jobs
// trigger` in two goroutines) while no instance can claim a trigger (all
// stopped by SIGSTOP for the moment): one request is made, the other finds
// it waiting, and the job runs once, triggered.
func TestPauseFromCLI(t *testing.T) { withSkews(t, pauseFromCLI) }

func pauseFromCLI(t *testing.T, skews []time.Duration) {
	c := newCluster(t, testTTL, "paused", "other")
	c.skews = skews
	c.base.NoRunner = true
	procs := c.spawnN(3)
	c.await(0, 2, hang, "runs of the job", isRunOf("paused"))

	out := c.jobsCLI(t, "pause", "paused", "--note", "integration test")
	pausedAt := wallNow()
	if !strings.Contains(out, `paused "paused" on every instance until resumed`) {
		t.Errorf("jobs pause said %q", out)
	}
	sleep(3 * every)

	for _, p := range procs {
		c.terminate(p, instanceStopTimeout)
	}
	restarted := c.Mark()
	c.spawnN(3)
	sleep(3 * every)
	// The other job runs on: twice at least since the restart.
	c.await(restarted, 2, hang, "runs of the other job after the restart", isRunOf("other"))

	// The job is resumed at some instant while the command runs: firings
	// before it began fell during the pause, those after it returned
	// after it (a firing claimed just after the resume, within the
	// command, may fall on either side).
	from := c.Mark()
	resuming := wallNow()
	out = c.jobsCLI(t, "resume", "paused")
	resumedAt := wallNow()
	if !strings.Contains(out, `resumed "paused" on every instance`) {
		t.Errorf("jobs resume said %q", out)
	}
	again := c.awaitOne(from, hang, "a run after the resume", isRunOf("paused"))
	sleep(2 * every)
	end := wallNow()

	// While paused: no run of a firing after the next period, on any
	// instance (a claim reads the pause: a firing claimed before it may
	// start, those after not).
	for _, e := range cluster.Filter(c.Events(), isRunOf("paused")) {
		if e.Firing.After(pausedAt.Add(every)) && e.Firing.Before(resuming) {
			t.Errorf("paused at %s, resumed from %s: %v", pausedAt.Format("15:04:05.000"), resuming.Format("15:04:05.000"), e)
		}
	}
	// Every firing of the pause is recorded as not run, "paused".
	hist := c.history("paused")
	var notRecorded []string
	for _, f := range cluster.Scheduled(pausedAt.Add(every), resuming.Add(-every), every) {
		if !slices.ContainsFunc(hist, func(r scheduler.Run) bool {
			return r.Outcome == scheduler.OutcomeSkipped && r.Reason == scheduler.ReasonPaused && f.Equal(r.Scheduled)
		}) {
			notRecorded = append(notRecorded, f.Local().Format("15:04:05"))
		}
	}
	if len(notRecorded) > 0 {
		t.Errorf("firings of the pause not recorded as paused: %s", strings.Join(notRecorded, ", "))
	}
	t.Logf("paused at %s, resumed at %s; ran again from %s (%s)", pausedAt.Format("15:04:05.000"), resumedAt.Format("15:04:05.000"),
		again.Firing.Local().Format("15:04:05"), again.Instance)
	// Every firing after the resume runs, once: from the first that no
	// clock reached before it.
	var ahead time.Duration
	for _, s := range skews {
		ahead = max(ahead, s)
	}
	runsFrom := resumedAt.Add(ahead + 100*time.Millisecond)
	c.awaitFirings([]string{"paused"}, runsFrom, end, hang)
	c.checkFiringsOf([]string{"paused"}, runsFrom, end)

	// Two triggers at once, while no instance can claim either.
	triggered, triggeredAt := c.Mark(), wallNow()
	up := c.upProcs()
	for _, p := range up {
		must(t, p.Pause())
	}
	outs := make([]string, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Go(func() { outs[i], errs[i] = c.runCLI("jobs", "trigger", "paused") })
	}
	wg.Wait()
	for _, p := range up {
		must(t, p.Resume())
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("jobs trigger %d: %v", i, err)
		}
	}
	made := 0
	for _, o := range outs {
		switch {
		case strings.Contains(o, `triggered "paused"`):
			made++
		case !strings.Contains(o, `"paused" already has a trigger waiting; it runs once`):
			t.Errorf("jobs trigger said %q", o)
		}
	}
	if made != 1 {
		t.Errorf("jobs trigger, twice at once: %d requests made (%q), want 1", made, outs)
	}
	run := c.awaitOne(triggered, hang, "the triggered run", func(e cluster.Event) bool {
		return e.Kind == cluster.EvRun && e.Job == "paused" && e.Triggered
	})
	sleep(3 * pollInterval) // a second run would come by now
	runs := cluster.Filter(c.Since(triggered), func(e cluster.Event) bool { return e.Kind == cluster.EvRun && e.Triggered })
	var inHistory []string
	for _, r := range c.history("paused") {
		if r.Triggered {
			inHistory = append(inHistory, runText(r))
		}
	}
	t.Logf("two triggers at once: %q; run by %s %v after", outs, run.Instance, run.T.Sub(triggeredAt).Round(time.Millisecond))
	if len(runs) != 1 || len(inHistory) != 1 || len(c.triggeredRuns("paused")) != 1 {
		t.Errorf("two triggers at once: %d triggered runs reported (%v), %d in the history (%s), %d in the database; want 1",
			len(runs), runs, len(inHistory), strings.Join(inHistory, "; "), len(c.triggeredRuns("paused")))
	}
	c.checkExclusion()
}

// isRunOf matches the runs of job's firings.
func isRunOf(job string) func(cluster.Event) bool {
	return func(e cluster.Event) bool { return e.Kind == cluster.EvRun && e.Job == job && !e.Triggered }
}

// jobsCLI runs `mongolock jobs ARGS...` on the test's database and returns
// what it printed; it fails the test if the command fails.
func (c *testCluster) jobsCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.runCLI(append([]string{"jobs"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runCLI runs the command line, in this process, on the test's database,
// and returns its standard output, or an error with its standard error if
// it failed. It may run in any goroutine.
func (c *testCluster) runCLI(args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	full := append([]string{"--uri", c.be.URI, "--db", c.db.Name()}, args...)
	if code := cli.Run(ctx, full, cli.WithStdio(strings.NewReader(""), &stdout, &stderr)); code != cli.ExitOK {
		return stdout.String(), fmt.Errorf("%s: exit %d: %s", strings.Join(args, " "), code, stderr.String())
	}
	return stdout.String(), nil
}

// upProcs returns the instances that are up.
func (c *testCluster) upProcs() []*cluster.Proc {
	var up []*cluster.Proc
	for _, p := range c.Procs() {
		if p.Up() {
			up = append(up, p)
		}
	}
	return up
}
