//go:build !linux

package cli

import "syscall"

// demoSysProcAttr: outside Linux there is no parent-death signal; the
// instances stop when their stdin closes (--watch-stdin), which happens when
// the demo exits or dies.
func demoSysProcAttr() *syscall.SysProcAttr { return nil }
