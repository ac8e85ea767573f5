package wirefault_test

import (
	"os"
	"testing"

	"github.com/mongolock/mongolock/internal/mongotest"
)

// TestMain stops the embedded server and checks for leaked goroutines.
func TestMain(m *testing.M) { os.Exit(mongotest.Main(m)) }
