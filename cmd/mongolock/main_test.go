package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/mongolock/mongolock/cli"
)

// envRunMain makes the test binary behave as the mongolock command.
const envRunMain = "MONGOLOCK_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// runMain runs the test binary as the command.
func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), envRunMain+"=1")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// TestCommand: the command is package cli, with the embedded server for
// dev and the demo (cli's tests cover the commands themselves).
func TestCommand(t *testing.T) {
	t.Parallel()
	code, out, _ := runMain(t, "-h")
	if code != cli.ExitOK {
		t.Fatalf("-h: exit %d", code)
	}
	for _, w := range []string{"Usage: mongolock ", "migrate up", "locks release ID", "demo-instance", "dev [--dir D] [--port P]"} {
		if !strings.Contains(out, w) {
			t.Errorf("help lacks %q:\n%s", w, out)
		}
	}
	code, out, errOut := runMain(t, "frobnicate")
	if code != cli.ExitUsage || out != "" || strings.TrimSpace(errOut) != `mongolock: unknown command "frobnicate" (see mongolock -h)` {
		t.Errorf("unknown command: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
