// Package devserver runs a MongoDB-compatible server inside your process,
// for your integration tests and for trying mongolock out: FerretDB 1.24
// on SQLite, behind a proxy that lets one command at a time reach it, so
// that the single-document atomicity mongolock relies on holds (FerretDB
// 1.x alone does not give it). It needs no installation and no Docker.
//
//	func TestNightlyReport(t *testing.T) {
//		uri := devserver.ForTest(t) // stopped at the end of the test
//		client, _ := mongo.Connect(options.Client().ApplyURI(uri))
//		...
//	}
//
// It is slow under contention (a few hundred simple commands a second),
// has no TTL indexes, change streams or transactions, and is not for
// production. Importing it compiles FerretDB and SQLite into the program;
// the lock, runner, scheduler and migrations packages do not import it.
// `mongolock dev` runs one in the foreground.
package devserver

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/mongolock/mongolock/internal/embedded"
)

// Server is a running server. Its methods are safe for concurrent use.
type Server struct {
	e *embedded.Server
}

// Start starts a server keeping its data in dir, which is created if
// needed and left in place; an empty dir means a temporary one, removed by
// Close. logger receives FerretDB's logs (nil discards them). ctx bounds
// the start only.
func Start(ctx context.Context, dir string, logger *slog.Logger) (*Server, error) {
	e, err := embedded.Start(ctx, dir, logger)
	if err != nil {
		return nil, err
	}
	return &Server{e: e}, nil
}

// URI is the connection string: the same for the server's whole life.
func (s *Server) URI() string { return s.e.URI() }

// Dir is the directory holding the data.
func (s *Server) Dir() string { return s.e.Dir() }

// Close stops the server and waits for everything it started.
func (s *Server) Close() error { return s.e.Close() }

// startTimeout bounds ForTest's start.
const startTimeout = time.Minute

// ForTest starts a server with a temporary directory for tb, stopped at
// its cleanup, and returns its URI. It fails tb if the server cannot
// start.
func ForTest(tb testing.TB) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	s, err := Start(ctx, "", nil)
	if err != nil {
		tb.Fatalf("devserver: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("devserver: %v", err)
		}
	})
	return s.URI()
}
