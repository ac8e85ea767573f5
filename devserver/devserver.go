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
// `mongolock dev` runs one in the foreground, on a port that stays the same
// across restarts (WithAddr).
package devserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/mongolock/mongolock/internal/dirlock"
	"github.com/mongolock/mongolock/internal/embedded"
)

// Server is a running server. Its methods are safe for concurrent use.
type Server struct {
	e *embedded.Server
}

// DefaultAddr is where a server listens unless WithAddr says otherwise: a
// free loopback port, a new one at every start.
const DefaultAddr = embedded.AnyAddr

// ErrDirInUse is wrapped by the error of Start when another server, in
// this process or another, keeps its data in the directory. A server that
// died does not hold it: the lock is the operating system's (flock, on
// Linux, macOS and the BSDs; elsewhere directories are not locked).
var ErrDirInUse = dirlock.ErrLocked

// Option configures Start.
type Option func(*config) error

type config struct {
	addr string
}

// WithAddr makes the server listen on addr, host:port, such as
// "127.0.0.1:27027": an address that stays the same across restarts, so
// that clients keep their connection string. Default: DefaultAddr.
func WithAddr(addr string) Option {
	return func(c *config) error {
		if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
			return fmt.Errorf("devserver: WithAddr: %q is not host:port", addr)
		}
		c.addr = addr
		return nil
	}
}

// Start starts a server keeping its data in dir, which is created if
// needed and left in place; an empty dir means a temporary one, removed by
// Close. Only one server at a time may keep its data in a directory
// (ErrDirInUse). logger receives FerretDB's logs (nil discards them). ctx
// bounds the start only. An address in use is an error wrapping
// syscall.EADDRINUSE.
func Start(ctx context.Context, dir string, logger *slog.Logger, opts ...Option) (*Server, error) {
	cfg := config{addr: DefaultAddr}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("devserver: nil option")
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	e, err := embedded.StartAt(ctx, cfg.addr, dir, logger)
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
