package cluster_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mongolock/mongolock/internal/cluster"
)

// envChild, when set, makes the test binary run as an instance (childMain)
// in the mode it names.
const envChild = "MONGOLOCK_CLUSTER_TEST_CHILD"

// Modes of the child.
const (
	// modeLead reports start and a leader term, writes a line that is not
	// an event on each stream, then a tick every tickEvery until SIGTERM,
	// or until its stdin closes with the argument "stdin"; then it ends
	// its term and exits 0. On SIGUSR1 it logs "usr1".
	modeLead = "lead"
	// modeStubborn ignores SIGTERM.
	modeStubborn = "stubborn"
	// modeFail exits 3 at once.
	modeFail = "fail"
)

const tickEvery = 10 * time.Millisecond

func TestMain(m *testing.M) {
	if mode, ok := os.LookupEnv(envChild); ok {
		os.Exit(childMain(mode, os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}

func childMain(mode string, args []string) int {
	enc := cluster.NewEncoder(os.Stdout)
	emit := func(e cluster.Event) {
		e.Instance, e.T = "whatever-it-calls-itself", time.Now()
		_ = enc.Encode(e)
	}
	switch mode {
	case modeFail:
		fmt.Fprintln(os.Stderr, "failing")
		return 3
	case modeStubborn:
		signal.Ignore(syscall.SIGTERM)
		emit(cluster.Event{Kind: cluster.EvStart, PID: os.Getpid()})
		time.Sleep(time.Hour)
		return 0
	}
	stop := make(chan struct{})
	if len(args) > 0 && args[0] == "stdin" {
		go func() {
			_, _ = io.Copy(io.Discard, bufio.NewReader(os.Stdin))
			close(stop)
		}()
	} else {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		go func() {
			<-sig
			close(stop)
		}()
	}
	logUSR1()
	emit(cluster.Event{Kind: cluster.EvStart, PID: os.Getpid()})
	fmt.Println("not an event")
	fmt.Fprintln(os.Stderr, "a log line")
	emit(cluster.Event{Kind: cluster.EvLead, Fence: 7})
	tick := time.NewTicker(tickEvery)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			emit(cluster.Event{Kind: cluster.EvUnlead, Fence: 7, Msg: "stopping"})
			emit(cluster.Event{Kind: cluster.EvStopped})
			return 0
		case <-tick.C:
			emit(cluster.Event{Kind: cluster.EvWork, Fence: 7, Checked: time.Now(), Accepted: true})
		}
	}
}
