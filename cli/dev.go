package cli

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/rs/zerolog"
)

// devLogLevel keeps FerretDB's logs of every connection (Info) and of every
// failed command (Warn: duplicate keys are how locks say "taken") out of
// dev's output, unless --log-level asks for them.
const devLogLevel = "error"

// dev runs the program's server (WithDevServer) in the foreground until
// interrupted, keeping its data in --dir or in a temporary directory.
func (a *app) dev(ctx context.Context, args []string) error {
	if !a.explicit["log-level"] {
		a.g.logLevel = devLogLevel
	}
	fs := a.flagSet("dev")
	dir := fs.String("dir", "", "keep the data in this directory, created if needed and kept at exit (default: a temporary one, removed at exit)")
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("dev takes no arguments, got %q", pos[0])
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
	srv, err := a.cfg.devServer(ctx, *dir, flog)
	if err != nil {
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
	fmt.Fprintf(w, "         %s migrate up\n", a.name())
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
