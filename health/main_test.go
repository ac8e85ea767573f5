package health_test

import (
	"os"
	"testing"

	"github.com/mongolock/mongolock/internal/mongotest"
)

// TestMain runs the tests, stops the embedded server, and then fails if any
// goroutine is left.
func TestMain(m *testing.M) { os.Exit(mongotest.Main(m)) }
