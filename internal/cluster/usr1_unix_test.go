//go:build unix

package cluster_test

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// logUSR1 makes the child log "usr1" on each SIGUSR1.
func logUSR1() {
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			fmt.Println("usr1")
		}
	}()
}
