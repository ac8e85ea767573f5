package cluster

import (
	"os"
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes the kernel send sig to the child when this
// process dies (a panic, a test timeout, a SIGKILL), so that no instance
// outlives its driver. Strictly, the kernel sends it when the thread that
// started the child ends, which the Go runtime does before the process ends
// only for goroutines that locked their thread.
func setParentDeathSignal(cmd *exec.Cmd, sig os.Signal) {
	if s, ok := sig.(syscall.Signal); ok {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: s}
	}
}
