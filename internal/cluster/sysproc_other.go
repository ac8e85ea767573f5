//go:build !linux

package cluster

import (
	"os"
	"os/exec"
)

// setParentDeathSignal does nothing here: only Linux can tie a child's life
// to its parent's. An instance with Spec.StopByStdin still stops when its
// driver dies; another must be killed by hand.
func setParentDeathSignal(*exec.Cmd, os.Signal) {}
