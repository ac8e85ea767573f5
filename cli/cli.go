// Package cli is the mongolock command line, to build into your own
// program with your migrations and jobs registered, so that
// `myapp migrate up` is your deploy step:
//
//	func main() {
//		if len(os.Args) > 1 && os.Args[1] == "serve" {
//			serve() // the application itself
//			return
//		}
//		// myapp migrate up, myapp migrate status, myapp locks list, myapp jobs, ...
//		os.Exit(cli.Main(os.Args[1:], cli.WithName("myapp"),
//			cli.WithMigrations(app.Migrations()...),
//			cli.WithJobs(cli.Job{Name: "nightly-report", Spec: "0 3 * * *"})))
//	}
//
// The commands, flags, exit codes and output are those of the mongolock
// command (cmd/mongolock), which is this package with no migrations or
// jobs registered, and WithDevServer:
//
//	NAME [global flags] migrate up|status|plan
//	NAME [global flags] locks [list] [--json]
//	NAME [global flags] locks show ID [--json]
//	NAME [global flags] locks release ID --keeper K
//	NAME [global flags] locks release ID --force [--yes]
//	NAME [global flags] jobs [JOB...] [--json] [--history N] [--tz ZONE]
//	NAME [global flags] jobs pause JOB [--note TEXT] [--until TIME]
//	NAME [global flags] jobs resume|trigger|remove JOB
//	NAME [global flags] demo [--duration D] [--instances N] [--keep]
//	NAME [global flags] demo-instance [--name N] [--for D]
//	NAME dev [--dir D] [--port P]     (with WithDevServer)
//
// A command that names a collection lists it when given no subcommand
// (locks, jobs); migrate needs its verb.
//
// migrate applies mongolock's built-in migrations and those of
// WithMigrations, in version order, once however many invocations run at
// the same time; status and plan list them all. jobs lists the scheduler's
// jobs as recorded in MongoDB, and those of WithJobs even before they ran,
// with their next firing and pause state; a JOB in neither is an error.
// jobs pause, resume, trigger and remove steer a job on every instance
// (scheduler.PauseJob and the others); they are recognised as the first
// argument after jobs that is not a flag, so a job called "pause" is listed
// with "jobs -- pause".
//
// The server comes from --uri or MONGODB_URI. Global flags may also follow
// the command. Output goes to stdout; logs go to stderr, human-readable on a
// terminal and JSON otherwise. Errors are one line on stderr, prefixed with
// the program's name. Credentials in the URI are never printed. Exit codes:
// 0 success, 1 failure, 2 bad usage (unknown command or flag, missing
// argument, bad URI, refused confirmation).
//
// demo runs instances of demo-instance as child processes (cron jobs and a
// leader task), kills the leader, and prints a summary; it exits 1 if any
// firing ran twice, or if an instance failed or nobody took over from a
// leader it stopped. Its instances are the program itself (os.Executable)
// run with the arguments "demo-instance ...": call Main with os.Args[1:]
// for the demo to work. Without --uri or MONGODB_URI it needs a server of
// its own, which only a program built with WithDevServer has; so does dev,
// which runs one in the foreground until interrupted, on 127.0.0.1 port
// DefaultDevPort unless --port says otherwise, one at a time per --dir.
//
// The embedded server (package devserver: FerretDB and SQLite) is not
// imported by this package: a program that does not pass WithDevServer does
// not compile it in.
package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes of Main and Run.
const (
	// ExitOK: the command succeeded (or help was asked for).
	ExitOK = 0
	// ExitFailure: the command failed.
	ExitFailure = 1
	// ExitUsage: bad usage: unknown command or flag, missing argument, bad
	// URI, refused confirmation.
	ExitUsage = 2
)

// Main runs the command line with args (without the program name, as
// os.Args[1:]) until it ends or the process receives SIGINT or SIGTERM, and
// returns the exit code. An invalid option is reported on stderr with
// ExitFailure.
func Main(args []string, opts ...Option) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, args, opts...)
}

// Run is Main with a context instead of signals: the command stops, as on
// Ctrl-C, when ctx ends.
func Run(ctx context.Context, args []string, opts ...Option) int {
	a, err := newApp(opts)
	if err != nil {
		a.fail(err)
		return ExitFailure
	}
	return a.main(ctx, args)
}
