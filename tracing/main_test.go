package tracing_test

import (
	"os"
	"testing"

	"github.com/mongolock/mongolock/internal/mongotest"
)

// TestMain runs the tests against the embedded test database, and then
// fails if any goroutine is left.
func TestMain(m *testing.M) { os.Exit(mongotest.Main(m)) }
