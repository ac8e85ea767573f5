//go:build unix && !linux

package integration

import "os/exec"

// dieWithParent does nothing here: only Linux can tie a child's life to its
// parent's. An instance left behind by a crashed test must be killed by hand.
func dieWithParent(*exec.Cmd) {}
