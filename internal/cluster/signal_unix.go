//go:build unix

package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// Pause stops the process (SIGSTOP): it does nothing, not even read its
// clock, until Resume. A paused instance's leases expire; what it does when
// it resumes is what a scenario checks.
func (p *Proc) Pause() error { return p.signal(syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (p *Proc) Resume() error { return p.signal(syscall.SIGCONT) }

func (p *Proc) terminate() error { return p.signal(syscall.SIGTERM) }

// Signal sends sig, unless the process exited already: for the signals an
// instance handles itself, to steer it.
func (p *Proc) Signal(sig os.Signal) error { return p.signal(sig) }

// signal sends sig, unless the process exited already.
func (p *Proc) signal(sig os.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%v to %s: %w", sig, p.name, err)
	}
	return nil
}

// killedBySIGKILL reports whether err is an exit by SIGKILL.
func killedBySIGKILL(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}
