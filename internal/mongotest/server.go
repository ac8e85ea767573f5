package mongotest

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"github.com/mongolock/mongolock/internal/embedded"
)

// startEmbedded starts the shared embedded FerretDB in a temporary directory.
func startEmbedded() (*embedded.Server, error) {
	// FerretDB logs every connection at Info and every failed command
	// (a duplicate key, an unsupported endSessions) at Warn, twice.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	return embedded.Start(context.Background(), "", log)
}

// embeddedOrSkip returns the embedded server or skips tb on MONGODB_URI.
func embeddedOrSkip(tb testing.TB, what string) *embedded.Server {
	tb.Helper()
	e := current(tb)
	if e.embedded == nil {
		tb.Skipf("mongotest: %s needs the embedded FerretDB; %s points at an external server", what, EnvURI)
	}
	return e.embedded
}

// StopServer stops the embedded server: every connection is closed and new
// ones are refused until RestartServer. It takes Exclusive first, so call it
// before any other mongotest helper in the test (or call Exclusive first), and
// do not call t.Parallel. If the test does not restart the server, its
// cleanup does. It skips tb when MONGODB_URI is set.
func StopServer(tb testing.TB) {
	tb.Helper()
	e := embeddedOrSkip(tb, "StopServer")
	Exclusive(tb)
	e.Stop()
	tb.Cleanup(func() {
		if err := e.Restart(); err != nil {
			tb.Errorf("mongotest: restart FerretDB after the test: %v", err)
		}
	})
}

// RestartServer starts the embedded server again on the same data and at the
// same address, so existing clients reconnect by themselves. It does nothing
// if the server is running and skips tb when MONGODB_URI is set.
func RestartServer(tb testing.TB) {
	tb.Helper()
	e := embeddedOrSkip(tb, "RestartServer")
	if err := e.Restart(); err != nil {
		tb.Fatalf("mongotest: restart FerretDB: %v", err)
	}
}
