//go:build unix

package cluster_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/internal/cluster"
)

// start starts the test binary as an instance in mode, and shuts it down at
// the end of the test.
func start(t *testing.T, c *cluster.Cluster, name, mode string, byStdin bool) *cluster.Proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	if byStdin {
		args = []string{"stdin"}
	}
	p, err := c.Start(cluster.Spec{Name: name, Path: exe, Args: args, Env: append(os.Environ(), envChild+"="+mode), StopByStdin: byStdin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Kill()
		c.Wait()
	})
	return p
}

func await(t *testing.T, c *cluster.Cluster, from int, match func(cluster.Event) bool) cluster.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := c.Await(ctx, from, 1, match)
	if err != nil {
		t.Fatalf("%v; events:\n%v", err, c.Events())
	}
	return got[0]
}

// TestStartRecords: every line of the instance is recorded under its name,
// as an event if it is one and as a log line if not; Leader follows its
// term; Stop (SIGTERM) stops it, and its exit is recorded.
func TestStartRecords(t *testing.T) {
	t.Parallel()
	c := cluster.New(clockwork.NewRealClock())
	p := start(t, c, "a", modeLead, false)
	if st := await(t, c, 0, cluster.IsKind(cluster.EvStart)); st.Instance != "a" || st.PID != p.PID() || st.Received.IsZero() {
		t.Errorf("start event %+v; want instance a, pid %d", st, p.PID())
	}
	await(t, c, 0, cluster.IsKind(cluster.EvWork))
	if p.Name() != "a" || !p.Up() || c.Leader() != p || c.Proc("a") != p || !slices.Equal(c.Procs(), []*cluster.Proc{p}) {
		t.Errorf("name %q, up %v, leader %v, procs %v", p.Name(), p.Up(), c.Leader(), c.Procs())
	}
	var logs []string
	for _, e := range cluster.Filter(c.Events(), cluster.IsKind(cluster.EvLog)) {
		logs = append(logs, e.Instance+": "+e.Msg)
	}
	slices.Sort(logs)
	if want := []string{"a: a log line", "a: not an event"}; !slices.Equal(logs, want) {
		t.Errorf("log lines %q, want %q", logs, want)
	}

	if err := p.Shutdown(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if p.Up() || c.Leader() != nil {
		t.Errorf("after Shutdown: up %v, leader %v", p.Up(), c.Leader())
	}
	evs := c.Events()
	last := evs[len(evs)-1]
	if at, err := p.Exit(); last.Kind != cluster.EvExited || last.Instance != "a" || last.Msg != "" || !last.T.Equal(at) || err != nil {
		t.Errorf("last event %v; exit %v, %v", last, at, err)
	}
	terms := cluster.LeaderTerms(evs, time.Now())
	if len(terms) != 1 || terms[0].Open || terms[0].Fence != 7 || !terms[0].End.Equal(cluster.Filter(evs, cluster.IsKind(cluster.EvUnlead))[0].T) {
		t.Errorf("terms %v", terms)
	}
	if err := p.Stop(); err != nil {
		t.Errorf("Stop after the exit: %v", err)
	}
}

// TestStopByStdin: Stop closes the instance's stdin.
func TestStopByStdin(t *testing.T) {
	t.Parallel()
	c := cluster.New(clockwork.NewRealClock())
	p := start(t, c, "a", modeLead, true)
	await(t, c, 0, cluster.IsKind(cluster.EvLead))
	if err := p.Shutdown(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if evs := cluster.Filter(c.Events(), cluster.IsKind(cluster.EvStopped, cluster.EvExited)); len(evs) != 2 {
		t.Errorf("stopped and exited: %v", evs)
	}
}

// TestKill: a killed instance's term ends when it exited, and its exit,
// expected, does not fail Shutdown.
func TestKill(t *testing.T) {
	t.Parallel()
	c := cluster.New(clockwork.NewRealClock())
	p := start(t, c, "a", modeLead, false)
	q := start(t, c, "b", modeLead, false)
	await(t, c, 0, cluster.IsKindBy(cluster.EvLead, "a"))
	await(t, c, 0, cluster.IsKindBy(cluster.EvLead, "b"))
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if err := p.Shutdown(time.Second); err != nil {
		t.Errorf("Shutdown after Kill: %v", err)
	}
	exit := await(t, c, 0, cluster.IsKindBy(cluster.EvExited, "a"))
	if exit.Msg != "signal: killed" {
		t.Errorf("exit %v", exit)
	}
	var a cluster.Span
	for _, s := range cluster.LeaderTerms(c.Events(), time.Now()) {
		if s.Instance == "a" {
			a = s
		}
	}
	if a.Open || !a.End.Equal(exit.T) {
		t.Errorf("a's term %v; want it to end at %v", a, exit.T)
	}
	if err := q.Shutdown(10 * time.Second); err != nil {
		t.Error(err)
	}
}

// TestPauseResume: a paused instance reports nothing until it resumes;
// Stop resumes it first.
func TestPauseResume(t *testing.T) {
	t.Parallel()
	c := cluster.New(clockwork.NewRealClock())
	p := start(t, c, "a", modeLead, false)
	await(t, c, 0, cluster.IsKind(cluster.EvWork))
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * tickEvery) // lines written before the pause arrive
	from := c.Mark()
	time.Sleep(20 * tickEvery) // a stretch of time the test observes
	if evs := c.Since(from); len(evs) > 0 {
		t.Errorf("a paused instance reported %v", evs)
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	await(t, c, from, cluster.IsKind(cluster.EvWork))

	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := p.Shutdown(10 * time.Second); err != nil {
		t.Errorf("Shutdown of a paused instance: %v", err)
	}
}

// TestSignal: Signal sends a signal the instance handles itself, and
// nothing once it exited.
func TestSignal(t *testing.T) {
	t.Parallel()
	c := cluster.New(clockwork.NewRealClock())
	p := start(t, c, "a", modeLead, false)
	await(t, c, 0, cluster.IsKind(cluster.EvWork))
	from := c.Mark()
	if err := p.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	await(t, c, from, func(e cluster.Event) bool { return e.Kind == cluster.EvLog && e.Msg == "usr1" })
	if err := p.Shutdown(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGUSR1); err != nil {
		t.Errorf("Signal after the exit: %v", err)
	}
}

// TestShutdownKills: an instance that does not stop in time is killed, and
// Shutdown says so.
func TestShutdownKills(t *testing.T) {
	t.Parallel()
	c := cluster.New(clockwork.NewRealClock())
	p := start(t, c, "a", modeStubborn, false)
	await(t, c, 0, cluster.IsKind(cluster.EvStart))
	err := p.Shutdown(200 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "instance a did not stop within 200ms") {
		t.Errorf("Shutdown: %v", err)
	}
	if _, err := p.Exit(); err == nil {
		t.Error("no exit error")
	}
}

// TestShutdownReportsAFailure: an instance that failed on its own fails
// Shutdown; Start refuses a second instance of the same name.
func TestShutdownReportsAFailure(t *testing.T) {
	t.Parallel()
	c := cluster.New(clockwork.NewRealClock())
	p := start(t, c, "a", modeFail, false)
	<-p.Done()
	if err := p.Shutdown(time.Second); err == nil || err.Error() != "instance a: exit status 3" {
		t.Errorf("Shutdown: %v", err)
	}
	if exit := await(t, c, 0, cluster.IsKind(cluster.EvExited)); exit.Msg != "exit status 3" {
		t.Errorf("exit %v", exit)
	}
	if _, err := c.Start(cluster.Spec{Name: "a", Path: "/nonexistent"}); err == nil {
		t.Error("a second instance a started")
	}
}
