package scheduler_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/mongolock/mongolock/internal/mongotest"
)

func TestMain(m *testing.M) {
	code := mongotest.Main(m)
	if code == 0 {
		// Every Scheduler was stopped and every client disconnected: nothing
		// of theirs may be left running.
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
