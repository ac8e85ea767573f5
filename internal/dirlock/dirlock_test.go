package dirlock_test

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/mongolock/mongolock/internal/dirlock"
)

func TestAcquire(t *testing.T) {
	dir := t.TempDir()
	l, err := dirlock.Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Describe("mongodb://127.0.0.1:27027/"); err != nil {
		t.Fatal(err)
	}
	// A second holder, even in this process, is refused, told who holds it.
	_, err = dirlock.Acquire(dir)
	var le *dirlock.LockedError
	if !errors.As(err, &le) || !errors.Is(err, dirlock.ErrLocked) || le.Dir != dir ||
		le.Holder != "pid "+strconv.Itoa(os.Getpid())+", mongodb://127.0.0.1:27027/" {
		t.Fatalf("second Acquire: %v (%+v)", err, le)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Errorf("second Release: %v", err)
	}
	l2, err := dirlock.Acquire(dir)
	if err != nil {
		t.Fatalf("after Release: %v", err)
	}
	_ = l2.Release()
	if _, err := dirlock.Acquire(dir + "/missing"); err == nil || errors.Is(err, dirlock.ErrLocked) {
		t.Errorf("missing directory: %v", err)
	}
}

// holderEnv makes the test binary a process that holds a directory's lock
// until killed.
const holderEnv = "DIRLOCK_TEST_HOLD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(holderEnv); dir != "" {
		l, err := dirlock.Acquire(dir)
		if err != nil {
			os.Stdout.WriteString("error: " + err.Error() + "\n")
			os.Exit(1)
		}
		_ = l.Describe("child")
		os.Stdout.WriteString("locked\n")
		select {} // until killed
	}
	os.Exit(m.Run())
}

// TestKilledHolder: the lock of a process that was killed is free at once.
func TestKilledHolder(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no flock")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "locked\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child: %q %v", line, err)
	}
	if _, err := dirlock.Acquire(dir); !errors.Is(err, dirlock.ErrLocked) || !strings.Contains(err.Error(), "child") {
		t.Errorf("while the child holds it: %v", err)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no clean-up
		t.Fatal(err)
	}
	_ = cmd.Wait()
	l, err := dirlock.Acquire(dir)
	if err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
	_ = l.Release()
}
