package cli

import "syscall"

// demoSysProcAttr makes the kernel send SIGTERM to an instance when the demo
// dies, however it dies; the instance then stops as on Ctrl-C, releasing what
// it holds. os/exec ties the signal to the thread that started the child,
// which the Go runtime only ends for goroutines that locked their thread, so
// the instances also stop when their stdin closes (--watch-stdin).
func demoSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
