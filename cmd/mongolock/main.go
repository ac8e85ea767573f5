// Command mongolock is the operator's tool for mongolock: it applies the
// migrations at deploy and looks inside the lock and job collections.
//
//	mongolock [global flags] migrate up|status|plan
//	mongolock [global flags] locks list [--json]
//	mongolock [global flags] locks show ID [--json]
//	mongolock [global flags] locks release ID --keeper K
//	mongolock [global flags] locks release ID --force [--yes]
//	mongolock [global flags] jobs [JOB...] [--json] [--history N]
//	mongolock [global flags] demo [--duration D] [--instances N] [--keep]
//	mongolock [global flags] demo-instance [--name N] [--for D]
//
// demo needs no server: without --uri or MONGODB_URI it starts an embedded
// FerretDB. It runs instances of demo-instance as child processes (cron
// jobs and a leader task), kills the leader, and prints a summary; it
// exits 1 if any firing ran twice, or if an instance failed or nobody took
// over from a leader it stopped.
//
// The server comes from --uri or MONGODB_URI. Global flags may also follow
// the command. Output goes to stdout; logs go to stderr, human-readable on a
// terminal and JSON otherwise. Errors are one line on stderr. Exit codes:
// 0 success, 1 failure, 2 bad usage (unknown command or flag, missing
// argument, bad URI, refused confirmation).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
