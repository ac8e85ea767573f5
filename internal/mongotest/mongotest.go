// Package mongotest gives tests and benchmarks a real MongoDB wire server.
//
// If MONGODB_URI is set, every test uses that server (MongoDB 4.4 or later,
// standalone or replica set). Otherwise the first helper call starts an
// embedded FerretDB (SQLite backend, temporary directory) behind a proxy that
// runs one command at a time, because FerretDB alone does not give MongoDB's
// single-document atomicity (see package internal/embedded).
//
// The server is shared by the whole test binary; each test isolates itself by
// using its own database (NewDatabase), so tests may call t.Parallel. A package
// that uses mongotest should stop the server after its tests:
//
//	func TestMain(m *testing.M) { os.Exit(mongotest.Main(m)) }
//
// Without it the embedded server simply lives until the process exits.
//
// Outages of the whole server (StopServer, RestartServer) exist only for the
// embedded backend; they exclude every other test while they run (Exclusive).
// Faults of a single client (NewProxiedClient) and clients that see another
// deployment (NewRewrittenClient, package internal/wirefault) work on both
// backends.
//
// The shared server is package state on purpose: starting one per test would
// be far too slow. It is confined to this internal, test-only package.
package mongotest

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/mongolock/mongolock/internal/embedded"
)

// EnvURI names the environment variable that selects an external server.
const EnvURI = "MONGODB_URI"

// Backend names returned by Backend.
const (
	BackendMongoDB  = "mongodb"
	BackendFerretDB = "ferretdb"
)

// environment is the server shared by the test binary.
type environment struct {
	uri      string           // what clients connect to
	embedded *embedded.Server // nil when EnvURI is set
}

var (
	envOnce sync.Once
	env     *environment
	envErr  error
)

// setup starts or selects the server on first use and logs the choice once.
func setup() (*environment, error) {
	envOnce.Do(func() {
		if uri := os.Getenv(EnvURI); uri != "" {
			env = &environment{uri: uri}
			fmt.Fprintf(os.Stderr, "mongotest: backend=mongodb uri=%s\n", redact(uri))
			return
		}
		e, err := startEmbedded()
		if err != nil {
			envErr = fmt.Errorf("mongotest: start embedded FerretDB: %w", err)
			return
		}
		env = &environment{uri: e.URI(), embedded: e}
		fmt.Fprintf(os.Stderr, "mongotest: backend=ferretdb-embedded uri=%s dir=%s\n", env.uri, e.Dir())
	})
	return env, envErr
}

// current returns the shared server or fails tb.
func current(tb testing.TB) *environment {
	tb.Helper()
	e, err := setup()
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

// Main runs the tests, stops the embedded server, and then fails the run if
// any goroutine is left (go.uber.org/goleak): every package here promises to
// stop what it starts. Use it in TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(mongotest.Main(m)) }
func Main(m *testing.M) int {
	code := Run(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	return code
}

// Run is Main without the goroutine check, for packages that must clean up
// more (a Docker client, say) before checking.
func Run(m *testing.M) int {
	code := m.Run()
	// Tests are over: Do only orders this read after a setup that ran.
	envOnce.Do(func() {})
	if env != nil && env.embedded != nil {
		if err := env.embedded.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "mongotest: stop embedded FerretDB: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// URI returns the connection string of the shared server, starting it if
// needed. It panics if the embedded server cannot start.
func URI() string {
	e, err := setup()
	if err != nil {
		panic(err)
	}
	return e.uri
}

// Backend reports which server the tests use: BackendMongoDB when MONGODB_URI
// is set, BackendFerretDB otherwise. It does not start anything.
func Backend() string {
	if os.Getenv(EnvURI) != "" {
		return BackendMongoDB
	}
	return BackendFerretDB
}

// redact hides the userinfo of a connection string. It cuts at the last '@',
// so an '@' in an option hides too much rather than too little.
func redact(uri string) string {
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok {
		return "<redacted>"
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		rest = "xxxxx@" + rest[at+1:]
	}
	return scheme + "://" + rest
}
