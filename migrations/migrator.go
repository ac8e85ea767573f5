package migrations

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/scheduler"
)

// Migrator applies migrations to one database and records them.
// It is safe for concurrent use; runs are serialized by the lock.
type Migrator struct {
	db      *mongo.Database
	records *mongo.Collection
	locker  Locker
	migs    []Migration
	cfg     config
}

// New returns a Migrator for db with the built-in migrations (Builtin) and
// those given with WithMigrations.
func New(db *mongo.Database, opts ...Option) (*Migrator, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil database", ErrInvalidOption)
	}
	cfg := config{
		collection:     DefaultCollection,
		lockCollection: lock.DefaultCollection,
		lockTTL:        lock.DefaultTTL,
		lockID:         DefaultLockID,
		wait:           DefaultWait,
		log:            zerolog.Nop(),
		clock:          clockwork.NewRealClock(),
		runsCollection: scheduler.DefaultRunsCollection,
		retention:      scheduler.DefaultHistoryRetention,
	}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.retry == 0 { // not set; WithRetryPeriod refuses 0
		cfg.retry = min(DefaultRetryPeriod, cfg.lockTTL/2)
	}
	if cfg.retry >= cfg.lockTTL {
		return nil, fmt.Errorf("%w: retry period %v is not shorter than the lock TTL %v", ErrInvalidOption, cfg.retry, cfg.lockTTL)
	}
	if cfg.keeperID == "" {
		cfg.keeperID = lock.NewKeeperID()
	}
	if cfg.locker == nil {
		l, err := lock.New(db, lock.WithCollection(cfg.lockCollection), lock.WithTTL(cfg.lockTTL),
			lock.WithLogger(cfg.log), lock.WithClock(cfg.clock))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidOption, err)
		}
		cfg.locker = l
	}
	migs, err := prepare(append(Builtin(cfg.lockCollection, cfg.lockTTL, cfg.runsCollection, cfg.retention), cfg.migrations...))
	if err != nil {
		return nil, err
	}
	return &Migrator{
		db:      db,
		records: db.Collection(cfg.collection, options.Collection().SetWriteConcern(lock.DefaultWriteConcern())),
		locker:  cfg.locker,
		migs:    migs,
		cfg:     cfg,
	}, nil
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
}

// Status lists every registered migration and every recorded one, in
// version order. It takes no lock: a migration another migrator is applying
// shows as running.
func (m *Migrator) Status(ctx context.Context) ([]Entry, error) {
	recs, err := m.loadRecords(ctx)
	if err != nil {
		return nil, err
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
		if r, ok := byVersion[mig.Version]; ok {
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
	for _, e := range entries {
		switch e.State {
		case StateApplied, StateUnknown:
			continue
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
	ctx = m.cfg.log.WithContext(ctx)
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
// If another migrator holds the lock, Up waits (WithWait), polling every
// retry period, until the lock is free or everything is applied; it gives
// up with ErrWaitTimeout. If a migration the other migrator ran failed
// while this one waited, Up returns that failure instead of repeating it.
//
// If a migration fails, Up records the failure, stops, releases the lock
// and returns an error wrapping ErrFailed and naming the version. The
// migrations it applied before stay recorded. If an applied migration
// changed (StateChanged, not Repeatable), Up applies nothing and returns an
// error wrapping ErrChanged.
func (m *Migrator) Up(ctx context.Context) (Result, error) {
	ctx = m.cfg.log.WithContext(ctx)
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
	res.Waited, err = m.guarded(ctx, settled, func(ctx context.Context, fence uint64) error {
		entries, err := m.Status(ctx)
		if err != nil {
			return err
		}
		migs, _, err := m.pending(entries)
		if err != nil {
			return err
		}
		for _, mig := range migs {
			took, err := m.runOne(ctx, mig, fence, "up", mig.Up)
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
	ctx = m.cfg.log.WithContext(ctx)
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
	res.Waited, err = m.guarded(ctx, settled, func(ctx context.Context, fence uint64) error {
		migs, err := plan(ctx)
		if err != nil {
			return err
		}
		for _, mig := range migs {
			took, err := m.runOne(ctx, mig, fence, "down", mig.Down)
			if err != nil {
				return err
			}
			res.Applied = append(res.Applied, Applied{Version: mig.Version, Description: mig.Description, Duration: took})
		}
		return nil
	})
	return res, err
}

// runOne claims mig, runs fn (its Up or Down) and records the outcome.
func (m *Migrator) runOne(ctx context.Context, mig Migration, fence uint64, dir string,
	fn func(context.Context, *mongo.Database) error) (time.Duration, error) {
	if ctx.Err() != nil {
		return 0, m.stopped(ctx, mig)
	}
	if err := m.claim(ctx, mig, m.cfg.keeperID, fence); err != nil {
		return 0, fmt.Errorf("version %d (%s): %w", mig.Version, mig.Description, err)
	}
	log := m.cfg.log.With().Int64("version", mig.Version).Str("description", mig.Description).Str("direction", dir).Logger()
	log.Info().Msg("migration started")
	start := m.cfg.clock.Now()
	runErr := call(log.WithContext(ctx), m.db, fn)
	took := m.cfg.clock.Since(start)
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
		recErr = m.forget(recCtx, mig.Version, fence)
	} else {
		recErr = m.finish(recCtx, mig, fence, took, runErr)
	}
	if runErr != nil {
		log.Error().Err(runErr).Dur("took", took).Msg("migration failed")
		if recErr != nil {
			log.Error().Err(recErr).Msg("could not record the failure")
		}
		return took, fmt.Errorf("%w: version %d (%s): %w", ErrFailed, mig.Version, mig.Description, runErr)
	}
	if recErr != nil {
		return took, fmt.Errorf("%w: version %d (%s) ran but was not recorded: %w", ErrFailed, mig.Version, mig.Description, recErr)
	}
	log.Info().Dur("took", took).Msg("migration done")
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
