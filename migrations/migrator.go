package migrations

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"

	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/internal/planted"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/scheduler"
)

// Migrator applies migrations to one database and records them.
// It is safe for concurrent use; runs are serialized by the lock, also
// between calls on one Migrator.
type Migrator struct {
	db      *mongo.Database
	records *mongo.Collection
	locker  *lock.Locker // store of the Sessions it makes; nil with WithSession
	migs    []Migration
	cfg     config
}

// New returns a Migrator for db with the built-in migrations (Builtin) and
// those given with WithMigrations. It does no I/O. Given WithSession, it is
// added to the session's components (lock.Session.AddComponent), so that
// the health checks of the session cover it.
func New(db *mongo.Database, opts ...Option) (*Migrator, error) {
	if db == nil {
		return nil, invalidOption("nil database")
	}
	cfg, err := configure(opts)
	if err != nil {
		return nil, err
	}
	m := &Migrator{db: db, cfg: cfg}
	if cfg.session != nil {
		if st, ok := cfg.session.Store().(interface{ Collection() *mongo.Collection }); ok {
			lc := st.Collection()
			if lc.Database().Name() != db.Name() {
				return nil, invalidOption("WithSession: the session's locks are in database %q, the migrator's is %q; "+
					"the built-in migration maintains the lock collection's indexes in the migrator's database",
					lc.Database().Name(), db.Name())
			}
			m.cfg.lockCollection = lc.Name()
		}
	} else {
		l, err := lock.New(db, lock.WithCollection(cfg.lockCollection), lock.WithTTL(cfg.lockTTL))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		// Up and Down make their Sessions when they need them: check now
		// that one can be made. A Session that took nothing closes without
		// I/O.
		s, err := lock.NewSession(l, cfg.sessionOpts...)
		if err != nil {
			return nil, fmt.Errorf("%w: WithLockTTL: %v is too short for a lock.Session: %w", ErrInvalidOption, cfg.lockTTL, err)
		}
		_ = s.Close()
		m.locker = l
	}
	m.migs, err = prepare(append(builtin(m.cfg.lockCollection, cfg.runsCollection, cfg.retention, cfg.termsCollection, cfg.termRetention), cfg.migrations...))
	if err != nil {
		return nil, err
	}
	// Reads from the primary, whatever the client prefers: the records
	// decide what runs, and a lagging secondary would show an applied
	// migration as pending and have it run twice.
	m.records = db.Collection(cfg.collection, options.Collection().
		SetWriteConcern(lock.DefaultWriteConcern()).SetReadPreference(readpref.Primary()))
	if cfg.session != nil {
		cfg.session.AddComponent(m) // for those who watch the session: health
	}
	return m, nil
}

// configure applies opts to the defaults and checks that they agree.
func configure(opts []Option) (config, error) {
	cfg := config{
		collection:      DefaultCollection,
		lockCollection:  lock.DefaultCollection,
		lockTTL:         lock.DefaultTTL,
		lockID:          DefaultLockID,
		wait:            DefaultWait,
		runsCollection:  scheduler.DefaultRunsCollection,
		retention:       scheduler.DefaultHistoryRetention,
		termsCollection: runner.DefaultTermsCollection,
		termRetention:   runner.DefaultTermRetention,
	}
	for _, o := range opts {
		if o == nil {
			return config{}, invalidOption("nil option")
		}
		if err := o(&cfg); err != nil {
			return config{}, err
		}
	}
	if cfg.session != nil {
		if len(cfg.notWithSession) > 0 {
			var names []string
			for _, n := range cfg.notWithSession {
				if !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
			return config{}, invalidOption("WithSession cannot be combined with %s: the session decides the lock's "+
				"store and TTL, and has its own observers", strings.Join(names, ", "))
		}
		cfg.lockTTL = cfg.session.Timings().TTL
	}
	if cfg.retry == 0 { // not set; WithRetryPeriod refuses 0
		cfg.retry = min(DefaultRetryPeriod, cfg.lockTTL/2)
	}
	if cfg.retry >= cfg.lockTTL {
		return config{}, invalidOption("WithRetryPeriod (%v) must be shorter than the lock TTL (%v)", cfg.retry, cfg.lockTTL)
	}
	return cfg, nil
}

// Migrations returns the registered migrations in version order.
func (m *Migrator) Migrations() []Migration { return slices.Clone(m.migs) }

// Collection returns the collection of migration records.
func (m *Migrator) Collection() *mongo.Collection { return m.records }

// Entry is one line of Status.
type Entry struct {
	Version     int64
	Description string
	State       State
	Repeatable  bool
	// Checksum of the registered definition; empty for StateUnknown.
	Checksum string
	// Record is nil for a migration never attempted.
	Record *Record
	// Bad names the field of an unreadable record (StateUnreadable); its
	// Record then holds its version and, as Error, the description. An
	// unreadable record whose _id is not a version has Version 0.
	Bad *lock.BadDocument
}

// Status lists every registered migration and every recorded one, in
// version order. It takes no lock: a migration another migrator is applying
// shows as running. A record it cannot read (a field of the wrong type, a
// state it does not know) is an entry of its own, StateUnreadable, and
// never fails the others.
func (m *Migrator) Status(ctx context.Context) ([]Entry, error) {
	if err := checkContext(ctx, "status"); err != nil {
		return nil, err
	}
	recs, bad, err := m.loadRecords(ctx)
	if err != nil {
		return nil, err
	}
	unreadable := make(map[int64]*lock.BadDocument, len(bad))
	for _, b := range bad {
		if b.hasVersion {
			unreadable[b.version] = &b.bad
		}
	}
	byVersion := make(map[int64]Record, len(recs))
	for _, r := range recs {
		byVersion[r.Version] = r
	}
	out := make([]Entry, 0, len(m.migs)+len(recs))
	known := make(map[int64]bool, len(m.migs))
	for _, mig := range m.migs {
		known[mig.Version] = true
		e := Entry{Version: mig.Version, Description: mig.Description, Repeatable: mig.Repeatable,
			Checksum: mig.Checksum(), State: StatePending}
		if b := unreadable[mig.Version]; b != nil {
			e.State, e.Bad, e.Record = StateUnreadable, b, &Record{Version: mig.Version, Error: b.String()}
		} else if r, ok := byVersion[mig.Version]; ok {
			e.Record = &r
			switch {
			case r.State == StateApplied && r.Checksum != e.Checksum:
				e.State = StateChanged
			case r.State == StateApplied || r.State == StateRunning || r.State == StateFailed:
				e.State = r.State
			}
		}
		out = append(out, e)
	}
	for _, r := range recs {
		if !known[r.Version] {
			out = append(out, Entry{Version: r.Version, Description: r.Description, State: StateUnknown, Record: &r})
		}
	}
	for _, b := range bad {
		if !b.hasVersion || !known[b.version] {
			out = append(out, Entry{Version: b.version, State: StateUnreadable, Bad: &b.bad,
				Record: &Record{Version: b.version, Error: b.bad.String()}})
		}
	}
	slices.SortFunc(out, func(a, b Entry) int {
		switch {
		case a.Version < b.Version:
			return -1
		case a.Version > b.Version:
			return 1
		}
		return 0
	})
	return out, nil
}

// pending picks from entries the migrations Up would apply, or returns an
// error wrapping ErrChanged if an applied migration changed.
func (m *Migrator) pending(entries []Entry) ([]Migration, []Entry, error) {
	var changed []string
	var migs []Migration
	var why []Entry
	byVersion := make(map[int64]Migration, len(m.migs))
	for _, mig := range m.migs {
		byVersion[mig.Version] = mig
	}
	var unreadable []string
	for _, e := range entries {
		switch e.State {
		case StateUnreadable:
			if _, ok := byVersion[e.Version]; ok && e.Bad != nil {
				unreadable = append(unreadable, e.Bad.String())
			}
			continue
		case StateApplied, StateUnknown:
			if e.State == StateUnknown || !planted.On(planted.MigrateTwice) { // planted: applied again
				continue
			}
		case StateChanged:
			if !e.Repeatable {
				changed = append(changed, fmt.Sprintf("version %d (%s) was applied with checksum %.12s, its definition now has %.12s",
					e.Version, e.Description, e.Record.Checksum, e.Checksum))
				continue
			}
		}
		migs = append(migs, byVersion[e.Version])
		why = append(why, e)
	}
	if len(unreadable) > 0 {
		// Applied or not cannot be told: running it could apply it twice.
		return nil, nil, fmt.Errorf("%w: %s; fix or delete the record", lock.ErrBadDocument, strings.Join(unreadable, "; "))
	}
	if len(changed) > 0 {
		return migs, why, fmt.Errorf("%w: %s; restore the definition, or leave it and add a new migration", ErrChanged, strings.Join(changed, "; "))
	}
	return migs, why, nil
}

// Step is one migration Plan expects Up to apply.
type Step struct {
	Version     int64
	Description string
	// Reason the migration is pending: "not applied", "failed: …",
	// "interrupted or running", "definition changed".
	Reason string
	// Actions describes what Up would do, from Migration.Explain, judged
	// against the database as it is now: a step that depends on an earlier
	// pending one is explained as if that one had not run. Nil if the
	// migration has no Explain.
	Actions []string
	// Err is the error Explain expects Up to fail with, or why it could not
	// tell.
	Err error
}

// Plan returns what Up would do now, in order, without changing anything.
// If an applied migration changed (Up would refuse to run), it returns the
// steps and an error wrapping ErrChanged.
func (m *Migrator) Plan(ctx context.Context) ([]Step, error) {
	if err := checkContext(ctx, "plan"); err != nil {
		return nil, err
	}
	entries, err := m.Status(ctx)
	if err != nil {
		return nil, err
	}
	migs, why, blocked := m.pending(entries)
	steps := make([]Step, len(migs))
	for i, mig := range migs {
		s := Step{Version: mig.Version, Description: mig.Description}
		switch why[i].State {
		case StatePending:
			s.Reason = "not applied"
		case StateFailed:
			s.Reason = "failed: " + why[i].Record.Error
		case StateRunning:
			s.Reason = "interrupted or running"
		case StateChanged:
			s.Reason = "definition changed"
		}
		if mig.Explain != nil {
			s.Actions, s.Err = mig.Explain(ctx, m.db)
			if s.Err != nil && ctx.Err() != nil {
				return nil, mongoutil.WrapErr(ctx, fmt.Sprintf("explain migration %d", mig.Version), s.Err)
			}
		}
		steps[i] = s
	}
	return steps, blocked
}

// Applied is one migration a run applied or rolled back.
type Applied struct {
	Version     int64
	Description string
	Duration    time.Duration
}

// Result is what Up or Down did.
type Result struct {
	// Applied lists the migrations this call applied (Up) or rolled back
	// (Down), in the order it did them. Migrations another migrator applied
	// while this one waited are not in it.
	Applied []Applied
	// Waited is how long the call waited for another migrator.
	Waited time.Duration
}

// Up applies the pending migrations in version order, holding the lock.
//
// If another migrator holds the lock (another process, or another call on
// this Migrator), Up waits (WithWait), polling with pauses that grow up to
// the retry period, until the lock is free or everything is applied; it
// gives up with ErrWaitTimeout. If a migration the other migrator ran failed
// while this one waited, Up returns that failure instead of repeating it.
// Migrations log to ctx's logger (zerolog.Ctx), and the migrator reports
// lock.MigrationApplied, lock.MigrationFailed and lock.MigrationWaited to
// its Session's observers.
//
// If a migration fails, Up records the failure, stops, releases the lock
// and returns an error wrapping ErrFailed and naming the version. The
// migrations it applied before stay recorded. If an applied migration
// changed (StateChanged, not Repeatable), Up applies nothing and returns an
// error wrapping ErrChanged.
func (m *Migrator) Up(ctx context.Context) (Result, error) {
	if err := checkContext(ctx, "up"); err != nil {
		return Result{}, err
	}
	entries, err := m.Status(ctx)
	if err != nil {
		return Result{}, err
	}
	migs, _, err := m.pending(entries)
	if err != nil || len(migs) == 0 {
		return Result{}, err
	}
	// Records as they were before waiting: a failure recorded after this was
	// another migrator's, made while this one waited.
	before := make(map[int64]Record, len(entries))
	for _, e := range entries {
		if e.Record != nil {
			before[e.Version] = *e.Record
		}
	}
	settled := func(ctx context.Context) (bool, error) {
		entries, err := m.Status(ctx)
		if err != nil {
			return false, err
		}
		for _, e := range entries {
			if e.State != StateFailed {
				continue
			}
			if b, ok := before[e.Version]; !ok || b.State != StateFailed || b.Fence != e.Record.Fence {
				return false, fmt.Errorf("%w: version %d (%s) failed in the run of %s: %s",
					ErrFailed, e.Version, e.Description, e.Record.Keeper, e.Record.Error)
			}
		}
		migs, _, err := m.pending(entries)
		return err == nil && len(migs) == 0, err
	}
	var res Result
	res.Waited, err = m.guarded(ctx, settled, func(ctx context.Context, r run) error {
		entries, err := m.Status(ctx)
		if err != nil {
			return err
		}
		migs, _, err := m.pending(entries)
		if err != nil {
			return err
		}
		for _, mig := range migs {
			took, err := m.runOne(ctx, r, mig, "up", mig.Up)
			if errors.Is(err, errAppliedMeanwhile) {
				continue
			}
			if err != nil {
				return err
			}
			res.Applied = append(res.Applied, Applied{Version: mig.Version, Description: mig.Description, Duration: took})
		}
		return nil
	})
	return res, err
}

// Down rolls back, newest first, every recorded migration whose version is
// above target, with its Down function, and deletes its record. It checks
// first that each has a Down, and returns ErrIrreversible otherwise without
// changing anything. Down(ctx, 0) rolls back all your migrations and none
// of the built-in ones. Failures are handled as by Up: recorded, and the
// run stops.
func (m *Migrator) Down(ctx context.Context, target int64) (Result, error) {
	if err := checkContext(ctx, "down"); err != nil {
		return Result{}, err
	}
	plan := func(ctx context.Context) ([]Migration, error) {
		entries, err := m.Status(ctx)
		if err != nil {
			return nil, err
		}
		byVersion := make(map[int64]Migration, len(m.migs))
		for _, mig := range m.migs {
			byVersion[mig.Version] = mig
		}
		var out []Migration
		for _, e := range slices.Backward(entries) {
			if e.Version <= target || e.Record == nil {
				continue
			}
			mig, ok := byVersion[e.Version]
			switch {
			case e.State == StateUnreadable && !ok:
				continue // not this migrator's
			case e.State == StateUnreadable:
				return nil, fmt.Errorf("%w; fix or delete the record", *e.Bad)
			case !ok:
				return nil, fmt.Errorf("%w: version %d (%s) is recorded but not registered here", ErrIrreversible, e.Version, e.Description)
			case mig.Down == nil:
				return nil, fmt.Errorf("%w: version %d (%s) has no Down", ErrIrreversible, e.Version, e.Description)
			}
			out = append(out, mig)
		}
		return out, nil
	}
	migs, err := plan(ctx)
	if err != nil || len(migs) == 0 {
		return Result{}, err
	}
	settled := func(ctx context.Context) (bool, error) {
		migs, err := plan(ctx)
		return err == nil && len(migs) == 0, err
	}
	var res Result
	res.Waited, err = m.guarded(ctx, settled, func(ctx context.Context, r run) error {
		migs, err := plan(ctx)
		if err != nil {
			return err
		}
		for _, mig := range migs {
			took, err := m.runOne(ctx, r, mig, "down", mig.Down)
			if err != nil {
				return err
			}
			res.Applied = append(res.Applied, Applied{Version: mig.Version, Description: mig.Description, Duration: took})
		}
		return nil
	})
	return res, err
}

// runOne claims mig, runs fn (its Up or Down) and records the outcome. It
// emits lock.MigrationApplied, or lock.MigrationFailed if it returns an
// error after it started on mig.
func (m *Migrator) runOne(ctx context.Context, r run, mig Migration, dir string,
	fn func(context.Context, *mongo.Database) error) (time.Duration, error) {
	if ctx.Err() != nil {
		return 0, m.stopped(ctx, mig)
	}
	ev := lock.Event{LockID: m.cfg.lockID, Fence: r.fence, Migration: fmt.Sprintf("%d %s", mig.Version, mig.Description)}
	if dir == "down" {
		ev.Reason = "down"
	}
	fail := func(took time.Duration, err error) (time.Duration, error) {
		ev.Kind, ev.Took, ev.Err = lock.MigrationFailed, took, err
		r.s.Emit(ev)
		return took, err
	}
	if err := m.claim(ctx, mig, r.s.KeeperID(), r.fence, dir == "up"); errors.Is(err, errAppliedMeanwhile) {
		return 0, err // the caller moves on
	} else if err != nil {
		return fail(0, fmt.Errorf("version %d (%s): %w", mig.Version, mig.Description, err))
	}
	// The lease may have lapsed during the claim's round trip (this
	// process paused or suspended): the keep-alive cancels ctx only when
	// it runs, Err reads the clocks now.
	if l, ok := lock.LeaseFrom(ctx); ok {
		if err := l.Err(); err != nil {
			return fail(0, fmt.Errorf("stopped before version %d (%s): %w", mig.Version, mig.Description, err))
		}
	}
	clk := r.s.Clock()
	start := clk.Now()
	runErr := call(ctx, m.db, fn)
	took := clk.Since(start)
	if runErr != nil && errors.Is(context.Cause(ctx), lock.ErrLeaseLost) {
		runErr = fmt.Errorf("%w (%w)", runErr, lock.ErrLeaseLost)
	}
	if dir == "down" && runErr != nil {
		runErr = fmt.Errorf("down: %w", runErr)
	}
	// Record even if ctx ended: the outcome must not be lost.
	recCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultReleaseTimeout)
	defer cancel()
	var recErr error
	if dir == "down" && runErr == nil {
		recErr = m.forget(recCtx, mig.Version, r.fence)
	} else {
		recErr = m.finish(recCtx, mig, r.fence, took, runErr)
	}
	switch {
	case runErr != nil && recErr != nil:
		return fail(took, fmt.Errorf("%w: version %d (%s): %w; recording the failure failed too: %w",
			ErrFailed, mig.Version, mig.Description, runErr, recErr))
	case runErr != nil:
		return fail(took, fmt.Errorf("%w: version %d (%s): %w", ErrFailed, mig.Version, mig.Description, runErr))
	case recErr != nil:
		return fail(took, fmt.Errorf("%w: version %d (%s) ran but was not recorded: %w", ErrFailed, mig.Version, mig.Description, recErr))
	}
	ev.Kind, ev.Took = lock.MigrationApplied, took
	r.s.Emit(ev)
	return took, nil
}

func (m *Migrator) stopped(ctx context.Context, mig Migration) error {
	cause := context.Cause(ctx)
	if errors.Is(cause, lock.ErrLeaseLost) {
		return fmt.Errorf("stopped before version %d (%s): %w", mig.Version, mig.Description, cause)
	}
	return fmt.Errorf("stopped before version %d (%s): %w", mig.Version, mig.Description, ctx.Err())
}

// call runs fn, turning a panic into an error so that the failure is
// recorded and the lock released.
func call(ctx context.Context, db *mongo.Database, fn func(context.Context, *mongo.Database) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return fn(ctx, db)
}
