package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/scheduler"
	"github.com/mongolock/mongolock/ui"
)

// Defaults of the ui command.
const (
	defaultUIListen = "127.0.0.1:8080"
	// uiShutdown bounds the wait for open requests at the end.
	uiShutdown = 5 * time.Second
)

// uiHelp is printed after the flags of `ui -h`.
const uiHelp = `ui serves the dashboard (package ui) until Ctrl-C: the cluster's instances,
leaders, locks, jobs and every firing, read from MongoDB alone, updated live.
It is read-only: pause, resume, trigger, remove and force-release are offered
only by a program that builds the dashboard with ui.WithActions and its own
authorisation. It listens on loopback unless --listen says otherwise; put it
behind your authenticating proxy before exposing it.
`

// uiFlags are the ui command's own flags.
type uiFlags struct {
	listen                            string
	jobs, runs, terms, migrationsColl string
	retention, termRetention, refresh time.Duration
	tz                                string
}

func (f *uiFlags) register(a *app, name string) *flag.FlagSet {
	fs := a.flagSet(name)
	fs.StringVar(&f.listen, "listen", defaultUIListen, "address to serve the dashboard on (host:port; port 0 picks one)")
	fs.StringVar(&f.jobs, "jobs-collection", scheduler.DefaultJobsCollection, "the scheduler's jobs collection")
	fs.StringVar(&f.runs, "runs-collection", scheduler.DefaultRunsCollection, "the scheduler's run history collection")
	fs.StringVar(&f.terms, "terms-collection", runner.DefaultTermsCollection, "the term log of elections (runner.TermLog)")
	fs.StringVar(&f.migrationsColl, "migrations-collection", migrations.DefaultCollection, "collection of migration records")
	fs.DurationVar(&f.retention, "history-retention", scheduler.DefaultHistoryRetention, "the scheduler's history retention, as migrate up was given it")
	fs.DurationVar(&f.termRetention, "term-retention", runner.DefaultTermRetention, "the term log's retention, as migrate up was given it")
	fs.DurationVar(&f.refresh, "refresh", ui.DefaultRefresh, "how often pages update (and the database is read, whatever the number of viewers)")
	fs.StringVar(&f.tz, "tz", "UTC", "time zone of specs without CRON_TZ=: the scheduler's WithLocation")
	return fs
}

func (a *app) ui(ctx context.Context, args []string) error {
	var f uiFlags
	fs := f.register(a, "ui")
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("ui takes no arguments, got %q", pos[0])
	}
	log, err := a.logger()
	if err != nil {
		return err
	}
	db, disconnect, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer disconnect()
	h, err := a.dashboard(db, f, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return usagef("--listen %q: %v", f.listen, err)
	}
	fmt.Fprintf(a.stdout, "dashboard of %s on %s: http://%s/ (read-only; Ctrl-C stops it)\n", db.Name(), a.red.uri(), ln.Addr())
	return serveUntil(ctx, ln, newHTTPServer(h), log)
}

// dashboard builds the dashboard of db with the program's migrations and
// jobs, on the collections of f.
func (a *app) dashboard(db *mongo.Database, f uiFlags, log zerolog.Logger) (*ui.Handler, error) {
	loc, err := time.LoadLocation(f.tz)
	if err != nil || f.tz == "" {
		return nil, usagef("--tz %q: not a time zone", f.tz)
	}
	m, err := migrations.New(db,
		migrations.WithCollection(f.migrationsColl),
		migrations.WithLockCollection(a.g.collection),
		migrations.WithLockTTL(a.g.ttl),
		migrations.WithSchedulerHistory(f.runs, f.retention),
		migrations.WithTermLog(f.terms, f.termRetention),
		migrations.WithMigrations(a.cfg.migrations...),
	)
	switch {
	case errors.Is(err, migrations.ErrInvalidMigration):
		return nil, err
	case err != nil:
		return nil, usagef("%v", err)
	}
	specs := make(map[string]string, len(a.cfg.jobs))
	for _, j := range a.cfg.jobs {
		specs[j.Name] = j.Spec
	}
	h, err := ui.New(db, ui.WithLockCollection(a.g.collection), ui.WithJobsCollection(f.jobs), ui.WithRunsCollection(f.runs),
		ui.WithTermsCollection(f.terms), ui.WithMigrator(m), ui.WithJobs(specs), ui.WithRefresh(f.refresh),
		ui.WithLocation(loc), ui.WithTitle(a.name()), ui.WithLogger(log))
	switch {
	case errors.Is(err, ui.ErrInvalidOption):
		return nil, usagef("%v", err)
	case err != nil:
		return nil, err
	}
	return h, nil
}

// newHTTPServer is the HTTP server of h for the ui command and the demo,
// with the dashboard's timeouts (ui.DefaultServer...).
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h,
		ReadHeaderTimeout: ui.DefaultServerReadHeaderTimeout,
		ReadTimeout:       ui.DefaultServerReadTimeout,
		WriteTimeout:      ui.DefaultServerWriteTimeout,
		IdleTimeout:       ui.DefaultServerIdleTimeout,
	}
}

// serveUntil serves srv on ln until ctx ends, then lets open requests end
// within uiShutdown.
func serveUntil(ctx context.Context, ln net.Listener, srv *http.Server, log zerolog.Logger) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve the dashboard: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), uiShutdown)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn().Err(err).Msg("dashboard: shutdown")
	}
	<-errc
	return nil
}
