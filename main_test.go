package mongolock_test

import (
	"os"
	"testing"

	"github.com/mongolock/mongolock/internal/mongotest"
)

// TestMain points the example at the test server (the embedded FerretDB
// unless MONGODB_URI is set), since it connects to MONGODB_URI as the
// README's program does.
func TestMain(m *testing.M) {
	if os.Getenv(mongotest.EnvURI) == "" {
		os.Setenv(mongotest.EnvURI, mongotest.URI())
	}
	os.Exit(mongotest.Main(m))
}
