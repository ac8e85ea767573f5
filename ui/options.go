package ui

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/scheduler"
)

// Defaults used by New.
const (
	// DefaultRefresh is how often the pages update themselves, and how long
	// the shared reader keeps what it read: every viewer of a page within
	// that time gets the same reading.
	DefaultRefresh = 2 * time.Second
	// DefaultReadTimeout bounds the reads of one page.
	DefaultReadTimeout = 10 * time.Second
	// DefaultLateAfter is how late a run may start, after its firing,
	// before the timeline shows it as late.
	DefaultLateAfter = time.Second
	// DefaultActionsCollection holds the record of every action taken
	// from the dashboard: what, on which job or lock, by whom, when.
	DefaultActionsCollection = "mongolock_actions"
	// DefaultPageSize is the number of rows of the history and jobs tables.
	DefaultPageSize = 50
	// DefaultTimelineSize is the number of records the timeline shows.
	DefaultTimelineSize = 200
	// maxCached bounds the readings the shared reader keeps: distinct
	// pages (a job's history with its filters is one) read within a
	// refresh.
	maxCached = 256
)

// ErrInvalidOption reports a bad option given to New.
var ErrInvalidOption = errors.New("ui: invalid option")

// Option configures the dashboard.
type Option func(*config) error

type config struct {
	prefix      string
	refresh     time.Duration
	readTimeout time.Duration
	lateAfter   time.Duration
	clock       clockwork.Clock
	log         zerolog.Logger
	location    *time.Location

	locks, jobs, runs, terms, actions string
	lockPrefix                        string
	migrator                          *migrations.Migrator
	registered                        map[string]string // job name -> spec the program registers

	authorize Authorize
	csrfKey   []byte
	redact    func(string) string
	title     string
}

func defaultConfig() config {
	return config{
		refresh:     DefaultRefresh,
		readTimeout: DefaultReadTimeout,
		lateAfter:   DefaultLateAfter,
		clock:       clockwork.NewRealClock(),
		log:         zerolog.Nop(),
		location:    time.UTC,
		locks:       lock.DefaultCollection,
		jobs:        scheduler.DefaultJobsCollection,
		runs:        scheduler.DefaultRunsCollection,
		terms:       runner.DefaultTermsCollection,
		actions:     DefaultActionsCollection,
		lockPrefix:  scheduler.DefaultLockPrefix,
		redact:      RedactURIs,
		title:       "mongolock",
	}
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidOption, fmt.Sprintf(format, args...))
}

// WithPrefix serves the dashboard under path, such as "/mongolock", so
// that it can share a ServeMux: mux.Handle("/mongolock/", h). Default: the
// root.
func WithPrefix(path string) Option {
	return func(c *config) error {
		path = strings.TrimSuffix(path, "/")
		if path != "" && (!strings.HasPrefix(path, "/") || strings.ContainsAny(path, "{}?#\"'<> ")) {
			return invalid("WithPrefix: %q is not a path", path)
		}
		c.prefix = path
		return nil
	}
}

// WithRefresh sets how often pages update themselves and how long a
// reading is shared between viewers: however many viewers, each page
// costs the database its reads at most once per refresh. At least 500ms.
// Default: DefaultRefresh.
func WithRefresh(d time.Duration) Option {
	return func(c *config) error {
		if d < 500*time.Millisecond {
			return invalid("WithRefresh: %v is under 500ms", d)
		}
		c.refresh = d
		return nil
	}
}

// WithReadTimeout bounds the database reads of one page. Default:
// DefaultReadTimeout.
func WithReadTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalid("WithReadTimeout: %v is not positive", d)
		}
		c.readTimeout = d
		return nil
	}
}

// WithLateAfter sets how late a run's start may be, after its firing,
// before the timeline shows it as late. Default: DefaultLateAfter.
func WithLateAfter(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalid("WithLateAfter: %v is not positive", d)
		}
		c.lateAfter = d
		return nil
	}
}

// WithClock sets the clock of the shared reader's refreshes and of the
// actions' timeouts. Default: the real clock.
func WithClock(clk clockwork.Clock) Option {
	return func(c *config) error {
		if clk == nil {
			return invalid("WithClock: nil clock")
		}
		c.clock = clk
		return nil
	}
}

// WithLogger sets the logger of failed reads and of actions. Default:
// zerolog.Nop().
func WithLogger(l zerolog.Logger) Option {
	return func(c *config) error { c.log = l; return nil }
}

// WithLocation sets the time zone of specs without CRON_TZ=, as the
// scheduler's WithLocation does. Default: UTC.
func WithLocation(loc *time.Location) Option {
	return func(c *config) error {
		if loc == nil {
			return invalid("WithLocation: nil location")
		}
		c.location = loc
		return nil
	}
}

func collection(opt, name string, set func(*config, string)) Option {
	return func(c *config) error {
		if !mongoutil.ValidCollectionName(name) {
			return invalid("%s: invalid collection name %q", opt, name)
		}
		set(c, name)
		return nil
	}
}

// WithLockCollection sets the lock collection. Default: lock.DefaultCollection.
func WithLockCollection(name string) Option {
	return collection("WithLockCollection", name, func(c *config, n string) { c.locks = n })
}

// WithJobsCollection sets the scheduler's jobs collection. Default:
// scheduler.DefaultJobsCollection.
func WithJobsCollection(name string) Option {
	return collection("WithJobsCollection", name, func(c *config, n string) { c.jobs = n })
}

// WithRunsCollection sets the scheduler's run history collection. Default:
// scheduler.DefaultRunsCollection.
func WithRunsCollection(name string) Option {
	return collection("WithRunsCollection", name, func(c *config, n string) { c.runs = n })
}

// WithTermsCollection sets the term log's collection (runner.TermLog).
// Default: runner.DefaultTermsCollection.
func WithTermsCollection(name string) Option {
	return collection("WithTermsCollection", name, func(c *config, n string) { c.terms = n })
}

// WithActionsCollection sets the collection actions are recorded in.
// Default: DefaultActionsCollection.
func WithActionsCollection(name string) Option {
	return collection("WithActionsCollection", name, func(c *config, n string) { c.actions = n })
}

// WithLockPrefix sets the scheduler's lock prefix (scheduler.WithLockPrefix),
// which tells job locks and instances' presence locks from other locks.
// Default: scheduler.DefaultLockPrefix.
func WithLockPrefix(prefix string) Option {
	return func(c *config) error {
		if prefix == "" {
			return invalid("WithLockPrefix: empty prefix")
		}
		c.lockPrefix = prefix
		return nil
	}
}

// WithMigrator sets the migrator whose Status the migrations page shows:
// one registering the program's migrations. Default: a migrator with
// mongolock's built-in migrations only, on the lock collection (yours
// then show as unknown).
func WithMigrator(m *migrations.Migrator) Option {
	return func(c *config) error {
		if m == nil {
			return invalid("WithMigrator: nil migrator")
		}
		c.migrator = m
		return nil
	}
}

// WithJobs gives the specs the program registers, by job name: a job whose
// last claim used another spec is flagged (its instances registered
// different specs). Default: none.
func WithJobs(specs map[string]string) Option {
	return func(c *config) error {
		c.registered = make(map[string]string, len(specs))
		for name, spec := range specs {
			if name == "" || spec == "" {
				return invalid("WithJobs: job %q with spec %q", name, spec)
			}
			c.registered[name] = spec
		}
		return nil
	}
}

// WithRedact adds a function every text read from the database passes
// through, where it is read, before RedactURIs, which always applies
// (errors, notes, keeper, lock and job ids): for what the program knows to
// hide besides URIs' credentials. Hide by the text's structure: a function
// that hides any piece of a secret tells a viewer, by what it hides, which
// pieces are (notes and ids are anyone's to write). It must be a function
// of its input alone. Default: RedactURIs alone.
func WithRedact(f func(string) string) Option {
	return func(c *config) error {
		if f == nil {
			return invalid("WithRedact: nil function")
		}
		c.redact = func(s string) string { return RedactURIs(f(s)) }
		return nil
	}
}

// WithTitle sets the name shown in the pages' title and header. Default:
// "mongolock".
func WithTitle(title string) Option {
	return func(c *config) error {
		if strings.TrimSpace(title) == "" {
			return invalid("WithTitle: empty title")
		}
		c.title = title
		return nil
	}
}
