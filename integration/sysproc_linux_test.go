//go:build linux

package integration

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the instance if the test process dies
// (a panic, a timeout), so that no instance outlives its test.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
