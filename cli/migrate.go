package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/mongolock/mongolock/internal/redact"
	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/scheduler"
)

// migrateFlags are the flags of the migrate subcommands.
type migrateFlags struct {
	collection string
	runs       string
	retention  time.Duration
	wait       time.Duration
	json       bool
}

func (a *app) migrateFlagSet(name string, withWait, withJSON bool) (*flag.FlagSet, *migrateFlags) {
	f := &migrateFlags{collection: migrations.DefaultCollection, wait: migrations.DefaultWait,
		runs: scheduler.DefaultRunsCollection, retention: scheduler.DefaultHistoryRetention}
	fs := a.flagSet("migrate " + name)
	fs.StringVar(&f.collection, "migrations-collection", f.collection, "collection of migration records")
	fs.StringVar(&f.runs, "runs-collection", f.runs, "the scheduler's run history collection")
	fs.DurationVar(&f.retention, "history-retention", f.retention, "how long the scheduler keeps run history (0: none)")
	if withWait {
		fs.DurationVar(&f.wait, "wait", f.wait, "how long to wait for another migrator")
	}
	if withJSON {
		fs.BoolVar(&f.json, "json", false, "print JSON")
	}
	return fs, f
}

// check refuses flag values the migrator would, naming the flag.
func (f *migrateFlags) check() error {
	if err := checkCollection("migrations-collection", f.collection); err != nil {
		return err
	}
	if err := checkCollection("runs-collection", f.runs); err != nil {
		return err
	}
	if err := checkRetention(f.retention); err != nil {
		return err
	}
	if f.wait < 0 {
		return usagef("--wait %v: must not be negative", f.wait)
	}
	return nil
}

// migrator parses the flags of a migrate subcommand and connects. The
// context it returns carries the logger, for the index helpers' warnings.
func (a *app) migrator(ctx context.Context, fs *flag.FlagSet, f *migrateFlags, args []string) (context.Context, *migrations.Migrator, func(), error) {
	pos, err := a.parse(fs, args)
	if err != nil {
		return ctx, nil, nil, err
	}
	if len(pos) > 0 {
		return ctx, nil, nil, usagef("%s takes no arguments, got %q", fs.Name(), pos[0])
	}
	if err := f.check(); err != nil {
		return ctx, nil, nil, err
	}
	// The migrator takes its lock through a Session.
	if err := checkTTL(a.g.ttl, minSessionTTL); err != nil {
		return ctx, nil, nil, err
	}
	log, err := a.logger()
	if err != nil {
		return ctx, nil, nil, err
	}
	db, disconnect, err := a.connect(ctx)
	if err != nil {
		return ctx, nil, nil, err
	}
	m, err := migrations.New(db,
		migrations.WithCollection(f.collection),
		migrations.WithLockCollection(a.g.collection),
		migrations.WithLockTTL(a.g.ttl),
		migrations.WithSchedulerHistory(f.runs, f.retention),
		migrations.WithWait(f.wait),
		migrations.WithLogger(log),
		migrations.WithMigrations(a.cfg.migrations...),
	)
	switch {
	case errors.Is(err, migrations.ErrInvalidMigration):
		// The program's migrations (WithMigrations): not the operator's doing.
		disconnect()
		return ctx, nil, nil, err
	case err != nil:
		disconnect()
		return ctx, nil, nil, usagef("%v", err)
	}
	return log.WithContext(ctx), m, disconnect, nil
}

func (a *app) migrateUp(ctx context.Context, args []string) error {
	fs, f := a.migrateFlagSet("up", true, false)
	ctx, m, disconnect, err := a.migrator(ctx, fs, f, args)
	if err != nil {
		return err
	}
	defer disconnect()
	res, err := m.Up(ctx)
	for _, ap := range res.Applied {
		fmt.Fprintf(a.stdout, "applied %d  %s  (%s)\n", ap.Version, ap.Description, fmtDur(ap.Duration))
	}
	if err != nil {
		return err
	}
	if len(res.Applied) == 0 {
		fmt.Fprintln(a.stdout, "nothing to apply")
	}
	return nil
}

// statusJSON is one migration in `migrate status --json`.
type statusJSON struct {
	Version     int64  `json:"version"`
	Description string `json:"description"`
	State       string `json:"state"`
	Repeatable  bool   `json:"repeatable,omitempty"`
	Checksum    string `json:"checksum,omitempty"`
	Recorded    string `json:"recordedChecksum,omitempty"`
	Keeper      string `json:"keeper,omitempty"`
	StartedAt   string `json:"startedAt,omitempty"`
	AppliedAt   string `json:"appliedAt,omitempty"`
	FailedAt    string `json:"failedAt,omitempty"`
	DurationMS  int64  `json:"durationMs,omitempty"`
	Error       string `json:"error,omitempty"`
}

func (a *app) migrateStatus(ctx context.Context, args []string) error {
	fs, f := a.migrateFlagSet("status", false, true)
	ctx, m, disconnect, err := a.migrator(ctx, fs, f, args)
	if err != nil {
		return err
	}
	defer disconnect()
	entries, err := m.Status(ctx)
	if err != nil {
		return err
	}
	for i, e := range entries {
		entries[i] = redact.Migration(e, redact.URIs)
	}
	if f.json {
		out := make([]statusJSON, 0, len(entries))
		for _, e := range entries {
			s := statusJSON{Version: e.Version, Description: e.Description, State: string(e.State), Repeatable: e.Repeatable, Checksum: e.Checksum}
			if r := e.Record; r != nil {
				s.Recorded, s.Keeper, s.Error = r.Checksum, r.Keeper, r.Error
				s.StartedAt, s.AppliedAt, s.FailedAt = jsonTime(r.StartedAt), jsonTime(r.AppliedAt), jsonTime(r.FailedAt)
				s.DurationMS = r.Duration.Milliseconds()
			}
			out = append(out, s)
		}
		return a.printJSON(out)
	}
	tw := table(a.stdout)
	fmt.Fprintln(tw, "VERSION\tSTATE\tDESCRIPTION\tAT\tKEEPER\tTOOK\tERROR")
	for _, e := range entries {
		at, keeper, took, errText := "-", "-", "-", "-"
		if r := e.Record; r != nil {
			switch {
			case !r.AppliedAt.IsZero():
				at = fmtTime(r.AppliedAt)
			case !r.FailedAt.IsZero():
				at = fmtTime(r.FailedAt)
			default:
				at = fmtTime(r.StartedAt)
			}
			keeper, took, errText = orDash(r.Keeper), fmtDur(r.Duration), orDash(oneLine(r.Error))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Version, e.State, e.Description, at, keeper, took, errText)
	}
	return tw.Flush()
}

func (a *app) migratePlan(ctx context.Context, args []string) error {
	fs, f := a.migrateFlagSet("plan", false, false)
	ctx, m, disconnect, err := a.migrator(ctx, fs, f, args)
	if err != nil {
		return err
	}
	defer disconnect()
	steps, err := m.Plan(ctx)
	if err != nil && !errors.Is(err, migrations.ErrChanged) {
		return err
	}
	if len(steps) == 0 && err == nil {
		fmt.Fprintln(a.stdout, "nothing to do")
	}
	failing := 0
	for _, s := range steps {
		fmt.Fprintf(a.stdout, "%d  %s  (%s)\n", s.Version, s.Description, s.Reason)
		for _, act := range s.Actions {
			fmt.Fprintf(a.stdout, "    %s\n", act)
		}
		if s.Actions == nil && s.Err == nil {
			fmt.Fprintln(a.stdout, "    run its Up function")
		}
		if s.Err != nil {
			failing++
			fmt.Fprintf(a.stdout, "    would fail: %s\n", a.red.oneLine(s.Err.Error()))
		}
	}
	switch {
	case err != nil:
		return fmt.Errorf("up would refuse to run: %w", err)
	case failing > 0:
		return fmt.Errorf("%d migration(s) would fail", failing)
	}
	return nil
}

func jsonTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeFormat)
}

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
