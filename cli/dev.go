package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"github.com/mongolock/mongolock/internal/dirlock"
	"github.com/rs/zerolog"
)

// devLogLevel keeps FerretDB's logs of every connection (Info) and of every
// failed command (Warn: duplicate keys are how locks say "taken") out of
// dev's output, unless --log-level asks for them.
const devLogLevel = "error"

// DefaultDevPort is the port dev listens on, on 127.0.0.1, unless --port
// says otherwise: the same at every start, so that a connection string
// exported once keeps working. It is not MongoDB's 27017, so that dev
// neither collides with a local MongoDB nor passes for one.
const DefaultDevPort = 27027

// anyLoopbackAddr is a free loopback port: the demo's server, which must
// not collide with dev's.
const anyLoopbackAddr = "127.0.0.1:0"

// devGlobals are the global flags dev uses; dev -h lists only these, and
// refuses the others.
var devGlobals = []string{"log-level"}

// dev runs the program's server (WithDevServer) in the foreground until
// interrupted, keeping its data in --dir or in a temporary directory.
func (a *app) dev(ctx context.Context, args []string) error {
	if !a.explicit["log-level"] {
		a.g.logLevel = devLogLevel
	}
	for name := range a.explicit {
		if !slices.Contains(devGlobals, name) {
			return usagef("dev does not use --%s", name)
		}
	}
	fs := a.flagSetWith("dev", devGlobals...)
	dir := fs.String("dir", "", "keep the data in this directory, created if needed and kept at exit; "+
		"one server at a time per directory (default: a temporary one, removed at exit)")
	port := fs.Int("port", DefaultDevPort, "listen on this port of 127.0.0.1 (0: any free one, a new one at every start)")
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return usagef("dev takes no arguments, got %q", pos[0])
	case *port < 0 || *port > 65535:
		return usagef("--port %d: want a port from 0 to 65535", *port)
	}
	if *dir != "" {
		if *dir, err = filepath.Abs(*dir); err != nil {
			return err
		}
	}
	flog, err := a.slogger()
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(*port))
	srv, err := a.cfg.devServer(ctx, DevServerConfig{Dir: *dir, Addr: addr, Logger: flog})
	var locked *dirlock.LockedError
	switch {
	case errors.As(err, &locked):
		holder := ""
		if locked.Holder != "" {
			holder = " (" + locked.Holder + ")"
		}
		return fmt.Errorf("--dir %s is in use by another server%s: stop it, or give this one another --dir", locked.Dir, holder)
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("--port %d: %s is in use (by another %s dev, or a MongoDB server?): stop it, or pick another --port",
			*port, addr, a.name())
	case err != nil:
		return fmt.Errorf("start the server: %w", err)
	}
	kept := "kept at exit"
	if *dir == "" {
		kept = "temporary: removed at exit"
	}
	w := a.stdout
	fmt.Fprintf(w, "%s dev: a MongoDB-compatible server (FerretDB, embedded) for trying things out, not for production\n", a.name())
	fmt.Fprintf(w, "  uri:   %s\n", srv.URI())
	fmt.Fprintf(w, "  data:  %s (%s)\n", srv.Dir(), kept)
	fmt.Fprintf(w, "  use:   export %s='%s'\n", envURI, srv.URI())
	fmt.Fprintf(w, "         %s --db YOURDB migrate up   (your program's database: its indexes)\n", a.name())
	fmt.Fprintln(w, "Ctrl-C stops it.")

	<-ctx.Done()
	fmt.Fprintln(w, "stopping")
	if err := srv.Close(); err != nil {
		return err
	}
	if *dir == "" {
		fmt.Fprintf(w, "stopped; removed %s\n", srv.Dir())
	} else {
		fmt.Fprintf(w, "stopped; data kept in %s\n", srv.Dir())
	}
	return nil
}

// slogger is the logger handed to the server, which logs with slog: as the
// command's own logs, readable on a terminal and JSON otherwise.
func (a *app) slogger() (*slog.Logger, error) {
	level, err := zerolog.ParseLevel(a.g.logLevel)
	if err != nil || a.g.logLevel == "" {
		return nil, usagef("invalid --log-level %q", a.g.logLevel)
	}
	var sl slog.Level
	switch {
	case level == zerolog.Disabled:
		return slog.New(slog.DiscardHandler), nil
	case level <= zerolog.DebugLevel:
		sl = slog.LevelDebug
	case level == zerolog.InfoLevel:
		sl = slog.LevelInfo
	case level == zerolog.WarnLevel:
		sl = slog.LevelWarn
	default:
		sl = slog.LevelError
	}
	opts := &slog.HandlerOptions{Level: sl}
	if a.isTerminal(a.stderr) {
		return slog.New(slog.NewTextHandler(a.stderr, opts)), nil
	}
	return slog.New(slog.NewJSONHandler(a.stderr, opts)), nil
}
