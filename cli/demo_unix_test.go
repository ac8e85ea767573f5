//go:build unix

package cli

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/mongotest"
)

// alive reports whether a process runs (zombies do not).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return runtime.GOOS != "linux"
	}
	// pid (comm) state ...: comm may hold spaces, the state follows the last ')'.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestDemoInstancesDieWithTheDemo kills the demo itself with SIGKILL: its
// instances must not outlive it.
func TestDemoInstancesDieWithTheDemo(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	cmd, _, lines := startMain(t, "demo", "--db", db.Name(), "--duration", "60s", "--ttl", "2s")
	started := regexp.MustCompile(`started \(pid (\d+),`)
	var pids []int
	for range 3 {
		pid, _ := strconv.Atoi(nextLine(t, lines, started, 30*time.Second)[1])
		pids = append(pids, pid)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("instance pid %d outlived the demo", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestDemoInterrupted is Ctrl-C on the demo: it stops its instances, prints
// what happened so far, drops its database and exits 1.
func TestDemoInterrupted(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	cmd, _, lines := startMain(t, "demo", "--db", db.Name(), "--duration", "60s", "--ttl", "2s")
	var pids []int
	for range 3 {
		pid, _ := strconv.Atoi(nextLine(t, lines, regexp.MustCompile(`started \(pid (\d+),`), 30*time.Second)[1])
		pids = append(pids, pid)
	}
	nextLine(t, lines, regexp.MustCompile(`LEADS now`), 30*time.Second)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	nextLine(t, lines, regexp.MustCompile(`interrupted: stopping every instance`), 10*time.Second)
	nextLine(t, lines, regexp.MustCompile(`^  firings run twice:\s+0$`), 20*time.Second)
	for range lines {
	}
	var exit *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &exit) || exit.ExitCode() != ExitFailure {
		t.Fatalf("demo exited with %v, want exit code %d", err, ExitFailure)
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("instance pid %d outlived the demo", pid)
		}
	}
	names, err := db.ListCollectionNames(context.Background(), bson.D{})
	if err != nil || len(names) != 0 {
		t.Errorf("the demo's database after Ctrl-C: %v, %v; want it dropped", names, err)
	}
}

// TestDemoSignals: SIGUSR1 kills the leader at once, whatever the plan;
// SIGUSR2 ends the demo and counts, as its end does.
func TestDemoSignals(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	cmd, _, lines := startMain(t, "demo", "--db", db.Name(), "--duration", "10m", "--kill-after", "0", "--stop-after", "0", "--ttl", "2s")
	pid := strconv.Itoa(cmd.Process.Pid)
	nextLine(t, lines, regexp.MustCompile(`^  signals:   kill -USR1 `+pid+` SIGKILLs the leader now; kill -USR2 `+pid+` ends the demo now and counts$`), 30*time.Second)
	leader := nextLine(t, lines, regexp.MustCompile(`(app\d)\s+LEADS now`), 30*time.Second)[1]
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	nextLine(t, lines, regexp.MustCompile(leader+`\s+killed with SIGKILL \(it was the leader\)`), 10*time.Second)
	nextLine(t, lines, regexp.MustCompile(`LEADS now.*failover \d+ ms after the SIGKILL of `+leader), 30*time.Second)
	if err := cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	nextLine(t, lines, regexp.MustCompile(`SIGUSR2: stopping every instance now`), 10*time.Second)
	nextLine(t, lines, regexp.MustCompile(`SIGKILL `+leader+` \(leader\)\s+-> app\d led`), 30*time.Second)
	nextLine(t, lines, regexp.MustCompile(`^OK: no firing ran twice`), 30*time.Second)
	for range lines {
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("demo ended with %v, want exit 0", err)
	}
}
