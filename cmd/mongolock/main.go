// Command mongolock is the operator's tool for mongolock: it applies the
// migrations at deploy and looks inside the lock and job collections.
//
//	mongolock [global flags] migrate up|status|plan
//	mongolock [global flags] locks [list] [--json]
//	mongolock [global flags] locks show ID [--json]
//	mongolock [global flags] locks release ID --keeper K
//	mongolock [global flags] locks release ID --force [--yes]
//	mongolock [global flags] jobs [JOB...] [--json] [--history N]
//	mongolock [global flags] demo [--duration D] [--instances N] [--keep]
//	mongolock [global flags] demo-instance [--name N] [--for D]
//	mongolock dev [--dir D] [--port P]
//
// It is package cli with the embedded server (package devserver) for dev
// and for the demo without a server: see package cli for the commands,
// flags and exit codes, and for building the same command into your own
// program with your migrations.
package main

import (
	"context"
	"os"

	"github.com/mongolock/mongolock/cli"
	"github.com/mongolock/mongolock/devserver"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], cli.WithDevServer(startDevServer)))
}

func startDevServer(ctx context.Context, c cli.DevServerConfig) (cli.DevServer, error) {
	return devserver.Start(ctx, c.Dir, c.Logger, devserver.WithAddr(c.Addr))
}
