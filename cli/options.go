package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/mongolock/mongolock/migrations"
)

// DefaultName is the program's name in help and error messages.
const DefaultName = "mongolock"

// ErrInvalidOption reports an option given a bad argument.
var ErrInvalidOption = errors.New("cli: invalid option")

// Option configures Main and Run.
type Option func(*config) error

type config struct {
	name       string
	db         string // the default of --db; empty: defaultDB
	migrations []migrations.Migration
	jobs       []Job
	stdin      io.Reader
	stdout     io.Writer
	stderr     io.Writer
	devServer  StartDevServer
}

func invalidOption(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidOption, fmt.Sprintf(format, args...))
}

// WithName sets the program's name in help and error messages ("myapp:
// unknown command"). Default: DefaultName ("mongolock").
func WithName(name string) Option {
	return func(c *config) error {
		if strings.TrimSpace(name) == "" || strings.ContainsAny(name, "\r\n") {
			return invalidOption("WithName: %q is not a program name", name)
		}
		c.name = name
		return nil
	}
}

// WithDatabase sets the database the commands act on when --db is not
// given: your program's, so that `myapp migrate up` migrates it and not
// "mongolock". Every command that connects names the database it acted on
// (a log line on stderr). Default: "mongolock", named with a warning.
func WithDatabase(name string) Option {
	return func(c *config) error {
		if !validDatabaseName(name) {
			return invalidOption("WithDatabase: %q is not a database name", name)
		}
		c.db = name
		return nil
	}
}

// validDatabaseName reports whether MongoDB accepts name as a database's.
func validDatabaseName(name string) bool {
	return name != "" && len(name) < 64 && !strings.ContainsAny(name, "/\\. \"$*<>:|?\x00")
}

// WithMigrations registers your migrations beside mongolock's built-in ones,
// as migrations.WithMigrations does: migrate up applies them, status and
// plan list them. It may be given several times. Default: none. A migration
// that migrations.New refuses fails every migrate command (exit 1).
func WithMigrations(ms ...migrations.Migration) Option {
	return func(c *config) error {
		c.migrations = append(c.migrations, ms...)
		return nil
	}
}

// Job is a scheduler job as your program registers it (scheduler.AddJob):
// its name and spec.
type Job struct {
	Name string
	Spec string
}

// WithJobs registers your scheduler's jobs, so that the jobs command lists
// them even before any instance ran them, and shows the spec registered
// beside the one last claimed with. It may be given several times; names
// must be unique and not empty. Default: none (jobs lists what MongoDB
// holds).
func WithJobs(jobs ...Job) Option {
	return func(c *config) error {
		for _, j := range jobs {
			if j.Name == "" || j.Spec == "" {
				return invalidOption("WithJobs: job %q with spec %q: name and spec must not be empty", j.Name, j.Spec)
			}
		}
		c.jobs = append(c.jobs, jobs...)
		return nil
	}
}

// WithStdio sets the command's standard input, output and error; a nil one
// keeps the process's. For tests. Default: os.Stdin, os.Stdout, os.Stderr.
func WithStdio(stdin io.Reader, stdout, stderr io.Writer) Option {
	return func(c *config) error {
		if stdin != nil {
			c.stdin = stdin
		}
		if stdout != nil {
			c.stdout = stdout
		}
		if stderr != nil {
			c.stderr = stderr
		}
		return nil
	}
}

// DevServer is a MongoDB-compatible server the program runs itself, as
// package devserver's *Server.
type DevServer interface {
	// URI is the connection string.
	URI() string
	// Dir is the directory holding the data.
	Dir() string
	// Close stops the server and, if Start made the directory, removes it.
	Close() error
}

// DevServerConfig is what the dev command and the demo ask of the
// program's server.
type DevServerConfig struct {
	// Dir is where the server keeps its data, created if needed and left
	// in place; empty means a temporary directory, removed by Close.
	Dir string
	// Addr is the host:port the server listens on. Port 0 means any free
	// one (the demo's); dev's is DefaultDevPort on 127.0.0.1 unless --port
	// says otherwise.
	Addr string
	// Logger receives the server's logs.
	Logger *slog.Logger
}

// StartDevServer starts a DevServer as cfg says. ctx bounds the start
// only. A server that keeps its data in a directory another one uses
// should refuse to start, as package devserver's does (devserver.ErrDirInUse).
type StartDevServer func(ctx context.Context, cfg DevServerConfig) (DevServer, error)

// WithDevServer gives the program a server of its own: the dev command,
// which runs one in the foreground, and the demo without --uri. Pass
// package devserver's:
//
//	cli.WithDevServer(func(ctx context.Context, c cli.DevServerConfig) (cli.DevServer, error) {
//		return devserver.Start(ctx, c.Dir, c.Logger, devserver.WithAddr(c.Addr))
//	})
//
// It compiles FerretDB and SQLite into the program (about 25 MB), which is
// why this package does not import devserver itself. Default: none; the
// program has no dev command and its demo needs --uri.
func WithDevServer(start StartDevServer) Option {
	return func(c *config) error {
		if start == nil {
			return invalidOption("WithDevServer: nil function")
		}
		c.devServer = start
		return nil
	}
}
