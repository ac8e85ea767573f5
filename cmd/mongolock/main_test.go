package main

import (
	"os"
	"testing"

	"github.com/mongolock/mongolock/internal/mongotest"
)

// envRunMain makes the test binary behave as the mongolock command, so that
// the demo's tests can run it as their instances (and as the demo itself).
const envRunMain = "MONGOLOCK_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		main()
	}
	os.Exit(mongotest.Main(m))
}
