//go:build unix

package integration

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/mongolock/mongolock/internal/mongotest"
)

var (
	longRun   = flag.Bool("integration.long", false, "run the longer variants of the scenarios")
	useDocker = flag.Bool("integration.docker", true, "start a MongoDB replica set with testcontainers when MONGODB_URI is unset and a Docker engine answers")
)

// TestMain runs an instance instead of the tests when the test binary was
// started as one (see instanceMain). Otherwise it runs the tests, stops the
// servers it started, and fails if a goroutine was left behind.
func TestMain(m *testing.M) {
	if raw, ok := os.LookupEnv(envInstance); ok {
		os.Exit(instanceMain(raw))
	}
	code := mongotest.Run(m)
	if err := closeBackend(); err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		if code == 0 {
			code = 1
		}
	}
	// The Docker client keeps connections and goroutines of its own.
	if code == 0 && !dockerUsed() {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}
