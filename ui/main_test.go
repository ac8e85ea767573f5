package ui_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"

	"github.com/mongolock/mongolock/cli"
	"github.com/mongolock/mongolock/devserver"
)

// envRunMain makes the test binary behave as the mongolock command, so that
// the browser tests can run it as a cluster's instances.
const envRunMain = "MONGOLOCK_UI_TEST_RUN_MAIN"

func runMain() int {
	return cli.Main(osArgs(), cli.WithDevServer(func(ctx context.Context, c cli.DevServerConfig) (cli.DevServer, error) {
		return devserver.Start(ctx, c.Dir, c.Logger, devserver.WithAddr(c.Addr))
	}))
}

func readAll(resp *http.Response) ([]byte, error) { return io.ReadAll(resp.Body) }

func newJar() http.CookieJar {
	j, _ := cookiejar.New(nil)
	return j
}
