package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/lock"
)

// Defaults of the global flags.
const (
	envURI         = "MONGODB_URI"
	defaultDB      = "mongolock"
	defaultTimeout = 5 * time.Second
)

// usageError is bad input from the operator: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// app is one invocation. Everything it touches outside the process is
// injected, so tests run it in-process.
type app struct {
	cfg            config // the program's: its name, migrations, jobs, server
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	isTerminal     func(any) bool

	g        globals
	explicit map[string]bool        // global flags given before the command
	red      redactor               // set once the URI is known
	watch    *lock.TopologyWatch    // of the client connect made
	client   *options.ClientOptions // the options connect used

	// The demo re-runs this program as its instances: exe finds it (default
	// os.Executable) and childEnv is added to their environment. Tests run
	// the test binary as the program this way.
	exe      func() (string, error)
	childEnv []string
}

// globals are the flags every command accepts, before or after its name.
type globals struct {
	uri        string
	db         string
	collection string
	ttl        time.Duration
	timeout    time.Duration
	logLevel   string
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.uri, "uri", g.uri, "MongoDB connection string (default: $"+envURI+")")
	fs.StringVar(&g.db, "db", g.db, "database")
	fs.StringVar(&g.collection, "collection", g.collection, "lock collection")
	fs.DurationVar(&g.ttl, "ttl", g.ttl, "lease TTL of the locks this command takes (migrate's migrations lock, the demo's instances), "+
		"and the TTL locks assumes for a lease stored without one; the lock collection's indexes do not depend on it")
	fs.DurationVar(&g.timeout, "timeout", g.timeout, "how long to look for a reachable server")
	fs.StringVar(&g.logLevel, "log-level", g.logLevel, "log level: debug, info, warn, error")
}

// command is one entry of the command table. A command has run,
// subcommands, or both: then run gets every argument and decides (jobs
// NAME, jobs pause NAME: subcommand).
type command struct {
	name    string
	args    string
	summary string
	run     func(a *app, ctx context.Context, args []string) error
	sub     []command
	// help is printed after the flags of the command's -h, and by
	// "COMMAND help" for a command with subcommands.
	help string
}

// commands is the command table. Adding a command, such as the demo, is
// adding an entry.
func (a *app) commands() []command {
	migrateSummary := "apply mongolock's migrations: the deploy step"
	if len(a.cfg.migrations) > 0 {
		migrateSummary = "apply mongolock's migrations and the program's: the deploy step"
	}
	demoSummary := "watch three instances share cron jobs and fail over"
	if a.cfg.devServer != nil {
		demoSummary += " (no set-up needed)"
	}
	cmds := []command{
		{name: "migrate", summary: migrateSummary, sub: []command{
			{name: "up", args: "[--wait D] [flags]", summary: "apply pending migrations, waiting for another migrator", run: (*app).migrateUp},
			{name: "status", args: "[--json] [flags]", summary: "applied, pending, failed and changed migrations", run: (*app).migrateStatus},
			{name: "plan", args: "[flags]", summary: "what up would do, without doing it", run: (*app).migratePlan},
		}},
		{name: "locks", args: "[--json] [flags]", summary: "every held lock, as locks list", run: (*app).locks, help: locksHelp, sub: []command{
			{name: "list", args: "[--json]", summary: "every held lock, expired ones included (not released ones)", run: (*app).locksList},
			{name: "show", args: "ID [--json]", summary: "one lock", run: (*app).locksShow},
			{name: "release", args: "ID (--keeper K | --force [--yes])", summary: "release a lock as its keeper, or force it", run: (*app).locksRelease},
		}},
		{name: "jobs", args: "[JOB...] [--json] [--history N] [--tz ZONE] [flags]", summary: "the scheduler's jobs: next firing, pause state, last runs",
			run: (*app).jobs, sub: jobVerbs(), help: jobsHelp},
		{name: "demo", args: "[--duration D] [--instances N] [flags]", summary: demoSummary, run: (*app).demo},
		{name: "demo-instance", args: "[--name N] [--for D] [flags]", summary: "one instance of the demo, as docker-compose runs it", run: (*app).demoInstance},
		{name: "ui", args: "[--listen ADDR] [flags]", summary: "serve the dashboard: instances, leaders, locks, jobs and every firing, live", run: (*app).ui, help: uiHelp},
	}
	if a.cfg.devServer != nil {
		cmds = append(cmds, command{name: "dev", args: "[--dir D] [--port P]", summary: "run a local server (embedded FerretDB) until Ctrl-C, for trying things out", run: (*app).dev})
	}
	return cmds
}

// newApp returns the invocation of a program built with opts. On error the
// app is still good for reporting it.
func newApp(opts []Option) (*app, error) {
	cfg := config{name: DefaultName, stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}
	var err error
	for _, o := range opts {
		if o == nil {
			err = invalidOption("nil option")
			break
		}
		if err = o(&cfg); err != nil {
			break
		}
	}
	seen := make(map[string]bool)
	for _, j := range cfg.jobs {
		if seen[j.Name] && err == nil {
			err = invalidOption("WithJobs: job %q registered twice", j.Name)
		}
		seen[j.Name] = true
	}
	a := &app{
		cfg:        cfg,
		stdin:      cfg.stdin,
		stdout:     cfg.stdout,
		stderr:     cfg.stderr,
		getenv:     os.Getenv,
		isTerminal: isTerminal,
		exe:        os.Executable,
	}
	return a, err
}

// name is the program's name in messages.
func (a *app) name() string {
	if a.cfg.name == "" {
		return DefaultName
	}
	return a.cfg.name
}

// fail prints err as the program's one error line.
func (a *app) fail(err error) {
	fmt.Fprintf(a.stderr, "%s: %s\n", a.name(), a.red.oneLine(err.Error()))
}

func (a *app) main(ctx context.Context, args []string) int {
	db := a.cfg.db
	if db == "" {
		db = defaultDB
	}
	a.g = globals{db: db, collection: lock.DefaultCollection, ttl: lock.DefaultTTL, timeout: defaultTimeout, logLevel: "info"}
	err := a.dispatch(ctx, args)
	if a.red.raw == "" {
		uri := a.g.uri
		if uri == "" {
			uri = a.getenv(envURI)
		}
		a.red = newRedactor(uri)
	}
	var ue usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, &ue):
		fmt.Fprintf(a.stderr, "%s: %s (see %s -h)\n", a.name(), a.red.oneLine(err.Error()), a.name())
		return ExitUsage
	default:
		a.fail(err)
		return ExitFailure
	}
}

func (a *app) dispatch(ctx context.Context, args []string) error {
	fs := a.flagSet(a.name())
	if err := fs.Parse(args); err != nil {
		return a.flagErr(err, nil)
	}
	a.explicit = make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { a.explicit[f.Name] = true })
	args = fs.Args()
	table := a.commands()
	if len(args) == 0 {
		return usagef("no command: want one of %s", names(table))
	}
	if args[0] == "help" {
		a.usage(a.stdout, nil)
		return nil
	}
	cmd, ok := find(table, args[0])
	if !ok {
		return usagef("unknown command %q", args[0])
	}
	args = args[1:]
	if cmd.sub != nil && cmd.run == nil {
		if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			if len(args) == 0 {
				return usagef("%s needs a subcommand: %s", cmd.name, names(cmd.sub))
			}
			a.usage(a.stdout, &cmd)
			return nil
		}
		sub, ok := find(cmd.sub, args[0])
		if !ok {
			return usagef("unknown command %q %q: want one of %s", cmd.name, args[0], names(cmd.sub))
		}
		return sub.run(a, ctx, args[1:])
	}
	return cmd.run(a, ctx, args)
}

// command returns the command called path ("jobs", "jobs pause").
func (a *app) command(path string) (command, bool) {
	name, subName, isSub := strings.Cut(path, " ")
	c, ok := find(a.commands(), name)
	if !ok || !isSub {
		return c, ok
	}
	return find(c.sub, subName)
}

func find(cmds []command, name string) (command, bool) {
	for _, c := range cmds {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func names(cmds []command) string {
	var out []string
	for _, c := range cmds {
		out = append(out, c.name)
	}
	return strings.Join(out, ", ")
}

func (a *app) usage(w io.Writer, only *command) {
	fmt.Fprintf(w, "Usage: %s [global flags] COMMAND [flags]\n", a.name())
	fmt.Fprintln(w, "\nCommands:")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, c := range a.commands() {
		if only != nil && c.name != only.name {
			continue
		}
		if c.run != nil {
			fmt.Fprintf(tw, "  %s %s\t%s\n", c.name, c.args, c.summary)
		}
		for _, s := range c.sub {
			fmt.Fprintf(tw, "  %s %s %s\t%s\n", c.name, s.name, s.args, s.summary)
		}
	}
	_ = tw.Flush()
	if only != nil && only.help != "" {
		fmt.Fprintf(w, "\n%s", only.help)
	}
	fmt.Fprintf(w, "\n%s COMMAND -h lists the flags of a command.\n", a.name())
	fmt.Fprintln(w, "\nGlobal flags (before or after the command):")
	fs := flag.NewFlagSet(a.name(), flag.ContinueOnError)
	g := a.g
	g.register(fs)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// flagSet returns a flag set with the global flags; it prints nothing.
func (a *app) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	a.g.register(fs)
	return fs
}

// flagSetWith returns a flag set with only the global flags named, for a
// command that uses no others; it prints nothing.
func (a *app) flagSetWith(name string, globals ...string) *flag.FlagSet {
	all := a.flagSet(name)
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, g := range globals {
		if f := all.Lookup(g); f != nil {
			fs.Var(f.Value, f.Name, f.Usage)
		}
	}
	return fs
}

// flagErr turns a flag package error into a usage error; -h prints help.
func (a *app) flagErr(err error, fs *flag.FlagSet) error {
	if errors.Is(err, flag.ErrHelp) {
		if fs == nil {
			a.usage(a.stdout, nil)
		} else {
			fmt.Fprintf(a.stdout, "Usage of %s %s:\n", a.name(), fs.Name())
			fs.SetOutput(a.stdout)
			fs.PrintDefaults()
			if c, ok := a.command(fs.Name()); ok && c.help != "" {
				fmt.Fprintf(a.stdout, "\n%s", c.help)
			}
		}
		return err
	}
	return usageError{err.Error()}
}

// subcommand finds the subcommand of cmd, if any, that args name by their
// first argument that is not a flag (fs has the flags of cmd's own run),
// unless "--" comes before it, and returns it with the other arguments.
// "help" there is the subcommand that prints cmd's usage. A bad flag is
// left for parse to report.
func (a *app) subcommand(cmd command, fs *flag.FlagSet, args []string) (command, []string, bool) {
	if err := fs.Parse(args); err != nil {
		return command{}, nil, false
	}
	rest := fs.Args()
	n := len(args) - len(rest)
	if len(rest) == 0 || n > 0 && args[n-1] == "--" {
		return command{}, nil, false
	}
	sub, ok := find(cmd.sub, rest[0])
	if !ok && rest[0] == "help" {
		sub, ok = command{name: "help", run: func(a *app, _ context.Context, _ []string) error {
			a.usage(a.stdout, &cmd)
			return nil
		}}, true
	}
	if !ok {
		return command{}, nil, false
	}
	return sub, append(args[:n:n], rest[1:]...), true
}

// parse parses flags anywhere among args and returns the other arguments.
func (a *app) parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, a.flagErr(err, fs)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// "--" ends the flags.
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// logger returns the logger: console output on a terminal, JSON otherwise.
func (a *app) logger() (zerolog.Logger, error) {
	level, err := zerolog.ParseLevel(a.g.logLevel)
	if err != nil || a.g.logLevel == "" {
		return zerolog.Nop(), usagef("invalid --log-level %q", a.g.logLevel)
	}
	var w io.Writer = a.stderr
	if a.isTerminal(a.stderr) {
		w = zerolog.ConsoleWriter{Out: a.stderr, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger(), nil
}

// connect returns the database, checking that the server answers within
// the timeout. disconnect must be called.
func (a *app) connect(ctx context.Context) (db *mongo.Database, disconnect func(), err error) {
	uri := a.g.uri
	if uri == "" {
		uri = a.getenv(envURI)
	}
	if uri == "" {
		return nil, nil, usagef("no server: set --uri or %s", envURI)
	}
	a.red = newRedactor(uri)
	if err := a.checkGlobals(); err != nil {
		return nil, nil, err
	}
	a.watch = lock.NewTopologyWatch()
	opts := options.Client().ApplyURI(uri).
		SetServerMonitor(a.watch.ServerMonitor(nil)).
		SetAppName(a.name() + "-cli").
		SetServerSelectionTimeout(a.g.timeout).
		SetConnectTimeout(a.g.timeout)
	if err := opts.Validate(); err != nil {
		return nil, nil, usagef("invalid URI %s: %s", a.red.uri(), a.red.uriError(err))
	}
	a.client = opts
	client, err := mongo.Connect(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", a.red.uri(), err)
	}
	disconnect = func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.g.timeout)
		defer cancel()
		_ = client.Disconnect(dctx)
	}
	pctx, cancel := context.WithTimeout(ctx, a.g.timeout)
	defer cancel()
	if err := client.Ping(pctx, nil); err != nil {
		disconnect()
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, fmt.Errorf("cannot reach %s within %v: %w", a.red.uri(), a.g.timeout, err)
	}
	a.nameDatabase()
	return client.Database(a.g.db), disconnect, nil
}

// nameDatabase logs, once connected, the database the command acts on:
// at info, or at warning if it is the library's fallback, given neither
// by --db nor by the program (WithDatabase).
func (a *app) nameDatabase() {
	log, err := a.logger()
	if err != nil {
		return // the command reports the bad --log-level
	}
	if a.cfg.db == "" && a.g.db == defaultDB && !a.explicit["db"] {
		log.Warn().Str("db", a.g.db).Str("uri", a.red.uri()).Msg("connected to the default database: no --db given")
		return
	}
	log.Info().Str("db", a.g.db).Str("uri", a.red.uri()).Msg("connected")
}

// connectKeepAlive returns the database of connect on a client of its
// own, with a pool of two connections, for a Session's keep-alive
// (lock.WithKeepAliveDatabase): its renewals never wait for a connection
// behind the instance's other commands. Called after connect; disconnect
// must be called.
func (a *app) connectKeepAlive() (db *mongo.Database, disconnect func(), err error) {
	opts := *a.client
	opts.SetMaxPoolSize(2).SetAppName(a.name() + "-keepalive")
	client, err := mongo.Connect(&opts)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", a.red.uri(), err)
	}
	return client.Database(a.g.db), func() {
		ctx, cancel := context.WithTimeout(context.Background(), a.g.timeout)
		defer cancel()
		_ = client.Disconnect(ctx)
	}, nil
}

// locker is a lock.Locker on the lock collection; keepAlive, if not nil,
// is the database of connectKeepAlive. more are options of the command's.
func (a *app) locker(db, keepAlive *mongo.Database, log zerolog.Logger, more ...lock.Option) (*lock.Locker, error) {
	opts := append([]lock.Option{lock.WithCollection(a.g.collection), lock.WithTTL(a.g.ttl), lock.WithLogger(log),
		lock.WithTopologyWatch(a.watch)}, more...)
	if keepAlive != nil {
		opts = append(opts, lock.WithKeepAliveDatabase(keepAlive))
	}
	l, err := lock.New(db, opts...)
	if err != nil {
		return nil, usagef("%v", err)
	}
	return l, nil
}

func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// Formatting shared by the commands.

const timeFormat = "2006-01-02T15:04:05.000Z07:00"

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(timeFormat)
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Millisecond).String()
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 2, 4, 2, ' ', 0) }
