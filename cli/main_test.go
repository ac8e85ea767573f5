package cli

import (
	"context"
	"os"
	"testing"

	"github.com/mongolock/mongolock/devserver"
	"github.com/mongolock/mongolock/internal/mongotest"
)

// envRunMain makes the test binary behave as the mongolock command, so that
// the demo's tests can run it as their instances (and as the demo itself),
// and the dev tests as the dev command.
const envRunMain = "MONGOLOCK_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		os.Exit(Main(os.Args[1:], WithDevServer(startDevServer)))
	}
	os.Exit(mongotest.Main(m))
}

// startDevServer is devserver.Start, as cmd/mongolock passes it.
func startDevServer(ctx context.Context, c DevServerConfig) (DevServer, error) {
	return devserver.Start(ctx, c.Dir, c.Logger, devserver.WithAddr(c.Addr))
}

// testConfig is the configuration of the mongolock command.
func testConfig() config { return config{name: DefaultName, devServer: startDevServer} }

// testApp is an invocation of the mongolock command.
func testApp() *app { return &app{cfg: testConfig()} }
