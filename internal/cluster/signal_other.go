//go:build !unix

package cluster

import (
	"errors"
	"os"
	"os/exec"
)

// Pause needs Unix signals.
func (p *Proc) Pause() error { return errors.ErrUnsupported }

// Resume needs Unix signals.
func (p *Proc) Resume() error { return errors.ErrUnsupported }

// Signal needs Unix signals.
func (p *Proc) Signal(os.Signal) error { return errors.ErrUnsupported }

// terminate: without SIGTERM, an instance is stopped by closing its
// standard input (Spec.StopByStdin).
func (p *Proc) terminate() error { return errors.ErrUnsupported }

// killedBySIGKILL: the exit status of a killed process says nothing more.
func killedBySIGKILL(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee)
}
