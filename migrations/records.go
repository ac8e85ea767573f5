package migrations

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/baddoc"
	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/internal/planted"
	"github.com/mongolock/mongolock/lock"
)

// State is where a migration stands.
type State string

// States of a migration. A record in the records collection is running,
// applied or failed; Status adds the others.
const (
	// StatePending: never applied; Up will apply it.
	StatePending State = "pending"
	// StateRunning: a migrator started it and has not recorded the outcome.
	// Either it is running now, or the migrator died and the next Up repeats
	// it.
	StateRunning State = "running"
	// StateApplied: applied with the current definition.
	StateApplied State = "applied"
	// StateFailed: the last attempt failed; Up tries again.
	StateFailed State = "failed"
	// StateChanged: applied, but with another definition. Up refuses to run
	// (ErrChanged) unless the migration is Repeatable, in which case Up
	// applies it again.
	StateChanged State = "changed"
	// StateUnknown: recorded but not registered with this Migrator, for
	// example applied by a newer release. Up leaves it alone.
	StateUnknown State = "unknown"
	// StateUnreadable: its record is not what a migrator writes (a hand
	// edit, another tool: Entry.Bad names the field). Up and Down refuse
	// to run while a registered migration's record is unreadable
	// (lock.ErrBadDocument): applied or not cannot be told, and a
	// migration must not run twice. Fix or delete the record.
	StateUnreadable State = "unreadable"
)

// Record is what the records collection holds about a migration.
type Record struct {
	Version     int64
	Description string
	// Checksum of the definition that was applied or attempted.
	Checksum string
	// State is StateRunning, StateApplied or StateFailed.
	State State
	// Error of the failed attempt.
	Error string
	// Keeper is the keeper id of the migrator that ran it, and Fence its
	// lease's fencing token.
	Keeper string
	Fence  uint64
	// Server times of the start and of the outcome.
	StartedAt time.Time
	AppliedAt time.Time
	FailedAt  time.Time
	// Duration of Up (or Down), by the migrator's clock.
	Duration time.Duration
}

// Field names of a record document.
const (
	fieldState    = "state"
	fieldFence    = "fence"
	fieldError    = "error"
	fieldApplied  = "appliedAt"
	fieldFailed   = "failedAt"
	fieldStarted  = "startedAt"
	fieldDuration = "durationMs"
)

type recordDoc struct {
	Version     int64     `bson:"_id"`
	Description string    `bson:"description"`
	Checksum    string    `bson:"checksum"`
	State       string    `bson:"state"`
	Error       string    `bson:"error"`
	Keeper      string    `bson:"keeper"`
	Fence       string    `bson:"fence"`
	StartedAt   time.Time `bson:"startedAt"`
	AppliedAt   time.Time `bson:"appliedAt"`
	FailedAt    time.Time `bson:"failedAt"`
	DurationMS  int64     `bson:"durationMs"`
}

// fenceString encodes a fencing token so that strings sort like the
// numbers (BSON has no unsigned 64-bit integer).
func fenceString(f uint64) string { return fmt.Sprintf("%016x", f) }

func (d recordDoc) record() Record {
	f, _ := strconv.ParseUint(d.Fence, 16, 64)
	return Record{
		Version:     d.Version,
		Description: d.Description,
		Checksum:    d.Checksum,
		State:       State(d.State),
		Error:       d.Error,
		Keeper:      d.Keeper,
		Fence:       f,
		StartedAt:   d.StartedAt,
		AppliedAt:   d.AppliedAt,
		FailedAt:    d.FailedAt,
		Duration:    time.Duration(d.DurationMS) * time.Millisecond,
	}
}

// badRecord is a record loadRecords could not read: what is wrong, and its
// version if its _id is one.
type badRecord struct {
	bad        lock.BadDocument
	version    int64
	hasVersion bool
}

// loadRecords reads the records, and those it cannot read.
func (m *Migrator) loadRecords(ctx context.Context) ([]Record, []badRecord, error) {
	what := fmt.Sprintf("read migration records from %q", m.records.Name())
	cur, err := m.records.Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, nil, mongoutil.WrapErr(ctx, what, err)
	}
	docs, bad, err := baddoc.All(ctx, cur, m.records.Name(), func(d *recordDoc) (string, error) {
		switch State(d.State) {
		case StateRunning, StateApplied, StateFailed:
			return "", nil
		}
		return fieldState, fmt.Errorf("%q is not running, applied or failed", d.State)
	})
	if err != nil {
		return nil, nil, mongoutil.WrapErr(ctx, what, err)
	}
	out := make([]Record, len(docs))
	for i, d := range docs {
		out[i] = d.record()
	}
	badRecs := make([]badRecord, len(bad))
	for i, b := range bad {
		badRecs[i].bad = b
		switch v := b.ID.(type) {
		case int32:
			badRecs[i].version, badRecs[i].hasVersion = int64(v), true
		case int64:
			badRecs[i].version, badRecs[i].hasVersion = v, true
		}
	}
	return out, badRecs, nil
}

// errTakenOver means a migrator with a newer lease took the record over:
// this one lost its lease.
type errTakenOver struct{ version int64 }

func (e errTakenOver) Error() string {
	return fmt.Sprintf("migration record %d was taken over by a migrator with a newer lease", e.version)
}

func (e errTakenOver) Unwrap() error { return lock.ErrLeaseLost }

// errAppliedMeanwhile means the migration was applied, as it is defined
// now, since the run read the records: by a migrator whose lease had
// lapsed but whose record still held (the records are claimed by fence,
// and it recorded its outcome before anyone claimed the migration after
// it). There is nothing left to do.
var errAppliedMeanwhile = errors.New("applied meanwhile by another migrator")

// claim marks a migration running under fence. It fails if a migrator with
// a newer lease claimed it (the fence makes the records a fenced
// resource), and, for up, with errAppliedMeanwhile if it is applied, as
// defined now, already: the read that found it pending may be older than
// the outcome of a migrator that ran it.
func (m *Migrator) claim(ctx context.Context, mig Migration, keeper string, fence uint64, up bool) error {
	f := fenceString(fence)
	filter := bson.D{
		{Key: "_id", Value: mig.Version},
		{Key: "$or", Value: bson.A{
			bson.D{{Key: fieldFence, Value: bson.D{{Key: "$lt", Value: f}}}},
			bson.D{{Key: fieldFence, Value: bson.D{{Key: "$exists", Value: false}}}},
		}},
	}
	if up && !planted.On(planted.MigrateTwice) { // planted: applied again
		filter = append(filter, bson.E{Key: "$nor", Value: bson.A{bson.D{
			{Key: fieldState, Value: string(StateApplied)},
			{Key: "checksum", Value: mig.Checksum()},
		}}})
	}
	update := bson.D{
		{Key: "$set", Value: bson.D{
			{Key: "description", Value: mig.Description},
			{Key: "checksum", Value: mig.Checksum()},
			{Key: fieldState, Value: string(StateRunning)},
			{Key: "keeper", Value: keeper},
			{Key: fieldFence, Value: f},
			{Key: fieldError, Value: ""},
			{Key: fieldDuration, Value: int64(0)},
		}},
		{Key: "$unset", Value: bson.D{{Key: fieldApplied, Value: ""}, {Key: fieldFailed, Value: ""}}},
		{Key: "$currentDate", Value: bson.D{{Key: fieldStarted, Value: true}}},
	}
	_, err := m.records.UpdateOne(ctx, filter, update, options.UpdateOne().SetUpsert(true))
	if mongoutil.IsDuplicateKey(err) { // the record exists with a newer fence, or applied
		var d recordDoc
		if rerr := m.records.FindOne(ctx, bson.D{{Key: "_id", Value: mig.Version}}).Decode(&d); up && rerr == nil &&
			d.State == string(StateApplied) && d.Checksum == mig.Checksum() {
			return errAppliedMeanwhile
		}
		return errTakenOver{mig.Version}
	}
	if err != nil {
		return mongoutil.WrapErr(ctx, fmt.Sprintf("record start of migration %d", mig.Version), err)
	}
	return nil
}

// finish records the outcome of a claimed migration.
func (m *Migrator) finish(ctx context.Context, mig Migration, fence uint64, took time.Duration, failure error) error {
	set := bson.D{{Key: fieldDuration, Value: took.Milliseconds()}}
	var now string
	if failure == nil {
		set = append(set, bson.E{Key: fieldState, Value: string(StateApplied)})
		now = fieldApplied
	} else {
		set = append(set, bson.E{Key: fieldState, Value: string(StateFailed)}, bson.E{Key: fieldError, Value: truncate(failure.Error(), 4096)})
		now = fieldFailed
	}
	res, err := m.records.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: mig.Version}, {Key: fieldFence, Value: fenceString(fence)}},
		bson.D{{Key: "$set", Value: set}, {Key: "$currentDate", Value: bson.D{{Key: now, Value: true}}}})
	if err != nil {
		return mongoutil.WrapErr(ctx, fmt.Sprintf("record outcome of migration %d", mig.Version), err)
	}
	if res.MatchedCount == 0 {
		return errTakenOver{mig.Version}
	}
	return nil
}

// forget deletes the record of a migration rolled back under fence.
func (m *Migrator) forget(ctx context.Context, version int64, fence uint64) error {
	res, err := m.records.DeleteOne(ctx, bson.D{{Key: "_id", Value: version}, {Key: fieldFence, Value: fenceString(fence)}})
	if err != nil {
		return mongoutil.WrapErr(ctx, fmt.Sprintf("delete record of migration %d", version), err)
	}
	if res.DeletedCount == 0 {
		return errTakenOver{version}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
