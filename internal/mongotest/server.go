package mongotest

import (
	"context"
	"log/slog"
	"net/url"
	"os"
	"sync"
	"testing"

	"github.com/FerretDB/FerretDB/ferretdb"
)

// embedded is an in-process FerretDB behind a serializer. FerretDB can be
// stopped and started again on the same SQLite directory; the serializer, and
// so the address clients use, stays.
type embedded struct {
	dir   string
	log   *slog.Logger
	proxy *serializer

	mu     sync.Mutex
	cancel context.CancelFunc // nil while stopped
	done   chan struct{}      // closed when Run returns
}

func startEmbedded() (*embedded, error) {
	dir, err := os.MkdirTemp("", "mongotest-ferretdb-")
	if err != nil {
		return nil, err
	}
	e := &embedded{
		dir: dir,
		// FerretDB logs every connection at Info and every failed command
		// (a duplicate key, an unsupported endSessions) at Warn, twice.
		log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	}
	backend, err := e.startFerret()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if e.proxy, err = newSerializer(backend); err != nil {
		e.stopFerret()
		os.RemoveAll(dir)
		return nil, err
	}
	return e, nil
}

func (e *embedded) uri() string { return "mongodb://" + e.proxy.addr() + "/" }

// startFerret runs FerretDB on a fresh port and returns that address.
// The caller holds e.mu or has not shared e yet.
func (e *embedded) startFerret() (string, error) {
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: "127.0.0.1:0"},
		Logger:    e.log,
		Handler:   "sqlite",
		SQLiteURL: "file:" + e.dir + "/",
	})
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
	e.cancel, e.done = cancel, done
	return u.Host, nil
}

// stopFerret cancels FerretDB and waits for it to close its connections and
// its SQLite databases.
func (e *embedded) stopFerret() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	<-e.done
	e.cancel, e.done = nil, nil
}

// stop closes every client connection, then FerretDB.
func (e *embedded) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.proxy.pause()
	e.stopFerret()
}

// restart starts FerretDB on the same data and lets clients in again.
func (e *embedded) restart() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cancel != nil {
		return nil
	}
	backend, err := e.startFerret()
	if err != nil {
		return err
	}
	e.proxy.resume(backend)
	return nil
}

// close stops everything and removes the data.
func (e *embedded) close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.proxy.close()
	e.stopFerret()
	return os.RemoveAll(e.dir)
}

// embeddedOrSkip returns the embedded server or skips tb on MONGODB_URI.
func embeddedOrSkip(tb testing.TB, what string) *embedded {
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
	e.stop()
	tb.Cleanup(func() {
		if err := e.restart(); err != nil {
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
	if err := e.restart(); err != nil {
		tb.Fatalf("mongotest: restart FerretDB: %v", err)
	}
}
