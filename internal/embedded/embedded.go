// Package embedded runs a FerretDB server (MongoDB wire protocol on SQLite)
// inside the process, for the tests and for `mongolock demo`: a MongoDB-like
// server with no set-up.
//
// FerretDB 1.24 does not make single-document writes atomic: findAndModify,
// update and delete read the matching documents and then write them back by
// _id in a separate statement, so two findAndModify calls racing for one lock
// document can both win. The lock protocol relies on MongoDB's document-level
// atomicity, so clients do not talk to FerretDB directly: they talk to a wire
// proxy that lets one command at a time reach it (see serializer.go). That is
// stronger than MongoDB's guarantee and slow under contention, which tests and
// the demo can afford.
//
// What it promises: one address (URI) for the life of the Server, across Stop
// and Restart, so existing clients reconnect by themselves; data kept across
// Stop and Restart; one Server at a time on a data directory; every goroutine
// gone after Close. What it does not: speed,
// durability beyond SQLite's, or the MongoDB features FerretDB 1.24 lacks (TTL
// indexes, $expr, aggregation pipelines, change streams, transactions).
package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"sync"

	"github.com/FerretDB/FerretDB/ferretdb"

	"github.com/mongolock/mongolock/internal/dirlock"
)

// ErrClosed reports a call on a closed Server.
var ErrClosed = errors.New("embedded: server closed")

// ferretNew serializes ferretdb.New, which writes a package variable of
// FerretDB's (version.Get().Package): Servers started at the same time in one
// process would race on it.
var ferretNew sync.Mutex

// Server is FerretDB behind the serializing proxy. Its methods are safe for
// concurrent use.
type Server struct {
	dir     string
	tempDir bool // dir was made by Start and is removed by Close
	dirLock *dirlock.Lock
	log     *slog.Logger
	proxy   *serializer

	mu     sync.Mutex
	closed bool
	cancel context.CancelFunc // nil while stopped
	done   chan struct{}      // closed when FerretDB's Run returns
}

// AnyAddr is the address of a Server on a free loopback port.
const AnyAddr = "127.0.0.1:0"

// Start is StartAt on a free loopback port (AnyAddr).
func Start(ctx context.Context, dir string, logger *slog.Logger) (*Server, error) {
	return StartAt(ctx, AnyAddr, dir, logger)
}

// StartAt starts FerretDB with its SQLite databases in dir and the proxy
// listening on addr (host:port). An empty dir means a fresh temporary
// directory, which Close removes; a given dir is left in place. Only one
// Server at a time may use a directory: it holds an OS file lock on it
// (dirlock) until Close, which the kernel releases if the process dies; a
// second one fails with an error wrapping dirlock.ErrLocked that names the
// holder. An address in use fails with an error wrapping
// syscall.EADDRINUSE. logger receives FerretDB's logs (it logs every
// connection at Info and every failed command at Warn); nil discards them.
// ctx bounds the start only: the server runs until Close.
func StartAt(ctx context.Context, addr, dir string, logger *slog.Logger) (*Server, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("embedded: start: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{dir: dir, log: logger}
	if dir == "" {
		d, err := os.MkdirTemp("", "mongolock-ferretdb-")
		if err != nil {
			return nil, fmt.Errorf("embedded: %w", err)
		}
		s.dir, s.tempDir = d, true
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	var err error
	if s.dirLock, err = dirlock.Acquire(s.dir); err != nil {
		s.removeDir()
		return nil, fmt.Errorf("embedded: %w", err)
	}
	backend, err := s.startFerret()
	if err != nil {
		s.releaseDir()
		return nil, fmt.Errorf("embedded: start FerretDB: %w", err)
	}
	if s.proxy, err = newSerializer(addr, backend, ReplyTimeout, s.log); err != nil {
		s.stopFerret()
		s.releaseDir()
		return nil, fmt.Errorf("embedded: start proxy: %w", err)
	}
	// For the error of the next server on the directory.
	_ = s.dirLock.Describe(s.URI())
	if err := ctx.Err(); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("embedded: start: %w", err)
	}
	return s, nil
}

// URI is the connection string clients use. It does not change across Stop
// and Restart.
func (s *Server) URI() string { return "mongodb://" + s.proxy.addr() + "/" }

// Addr is the proxy's host:port.
func (s *Server) Addr() string { return s.proxy.addr() }

// Dir is the directory holding the SQLite databases.
func (s *Server) Dir() string { return s.dir }

// startFerret runs FerretDB on a fresh port and returns that address. The
// caller holds s.mu or has not shared s yet.
func (s *Server) startFerret() (string, error) {
	ferretNew.Lock()
	f, err := ferretdb.New(&ferretdb.Config{
		Listener: ferretdb.ListenerConfig{TCP: "127.0.0.1:0"},
		Logger:   s.log,
		Handler:  "sqlite",
		// WAL (FerretDB's default) with synchronous=normal: commits
		// survive the process, not the machine, and skip an fsync each.
		SQLiteURL: "file:" + s.dir + "/?_pragma=synchronous(normal)",
	})
	ferretNew.Unlock()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.Run(ctx) // always nil
	}()
	u, err := url.Parse(f.MongoDBURI())
	if err != nil {
		cancel()
		<-done
		return "", err
	}
	s.cancel, s.done = cancel, done
	return u.Host, nil
}

// stopFerret cancels FerretDB and waits for it to close its connections and
// its SQLite databases. The caller holds s.mu.
func (s *Server) stopFerret() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	<-s.done
	s.cancel, s.done = nil, nil
}

func (s *Server) removeDir() {
	if s.tempDir {
		_ = os.RemoveAll(s.dir)
	}
}

// releaseDir lets the directory go and removes it if Start made it.
func (s *Server) releaseDir() {
	_ = s.dirLock.Release()
	s.removeDir()
}

// Stop simulates an outage: it closes every client connection and FerretDB,
// and refuses new connections until Restart. Data stays. Stopping a stopped
// or closed server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.proxy.pause()
	s.stopFerret()
}

// Restart starts FerretDB again on the same data and lets clients in again,
// at the same address. It does nothing if the server is running and returns
// ErrClosed after Close.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrClosed
	case s.cancel != nil:
		return nil
	}
	backend, err := s.startFerret()
	if err != nil {
		return fmt.Errorf("embedded: restart FerretDB: %w", err)
	}
	s.proxy.resume(backend)
	return nil
}

// Close stops everything, waits for every goroutine and removes the data
// directory if Start made it. Closing twice does nothing.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.proxy.close()
	s.stopFerret()
	if err := s.dirLock.Release(); err != nil {
		return fmt.Errorf("embedded: unlock %s: %w", s.dir, err)
	}
	if s.tempDir {
		if err := os.RemoveAll(s.dir); err != nil {
			return fmt.Errorf("embedded: remove %s: %w", s.dir, err)
		}
	}
	return nil
}
