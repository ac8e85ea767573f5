//go:build unix

package cli

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// demoSignals are the demo's signals, for whoever watches it (its dashboard,
// a test): SIGUSR1 kills the leader now, SIGUSR2 ends the demo now and
// counts, as at the end of --duration. stop stops listening.
func demoSignals() (kill, end <-chan os.Signal, stop func()) {
	k, e := make(chan os.Signal, 1), make(chan os.Signal, 1)
	signal.Notify(k, syscall.SIGUSR1)
	signal.Notify(e, syscall.SIGUSR2)
	return k, e, func() {
		signal.Stop(k)
		signal.Stop(e)
	}
}

// demoSignalHint tells them, for the demo of pid.
func demoSignalHint(pid int) string {
	return fmt.Sprintf("kill -USR1 %[1]d SIGKILLs the leader now; kill -USR2 %[1]d ends the demo now and counts", pid)
}
