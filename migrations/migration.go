package migrations

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Migration is one versioned change to the database.
type Migration struct {
	// Version orders migrations: pending ones are applied in ascending
	// order. It must be unique and not zero. Negative versions are reserved
	// for mongolock's own migrations (Builtin), so they run first.
	Version int64

	// Description says what the migration does, for people. It is recorded
	// but is not part of the checksum.
	Description string

	// Definition identifies what Up does. Its SHA-256 is the checksum
	// recorded when the migration is applied; a recorded migration whose
	// Definition changed is reported (Status, Plan) and stops Up with
	// ErrChanged instead of being re-run. For a hand-written Up, put in it
	// whatever Up depends on, for example the command it sends, and change
	// it whenever Up changes meaning. EnsureIndex and DropIndex fill it from
	// their arguments.
	Definition string

	// Up applies the migration. It runs with the run's lock held; its context
	// is cancelled with cause lock.ErrLeaseLost when the lease can no longer
	// be trusted, a safety margin before another migrator could take the
	// lock, and carries the values of the context given to Migrator.Up or
	// Migrator.Down: log to its logger (zerolog.Ctx). Up must be
	// safe to run again after it was interrupted: a migrator that crashes
	// between Up returning and the record being written leaves the migration
	// pending, and the next run repeats it.
	Up func(ctx context.Context, db *mongo.Database) error

	// Down reverts Up; optional. Migrator.Down refuses to roll back a
	// migration without one.
	Down func(ctx context.Context, db *mongo.Database) error

	// Explain describes what Up would do now, without changing anything, for
	// Migrator.Plan. An error means Up would fail with it. Optional.
	Explain func(ctx context.Context, db *mongo.Database) ([]string, error)

	// Repeatable makes a changed Definition a reason to apply the migration
	// again rather than an error: for migrations that follow configuration,
	// like the TTL index of the lock collection. Up must then be idempotent
	// and converge on the new definition.
	Repeatable bool

	// err is set by helpers given bad arguments; New reports it.
	err error
}

// Checksum is the hex SHA-256 of the Definition.
func (m Migration) Checksum() string {
	sum := sha256.Sum256([]byte(m.Definition))
	return hex.EncodeToString(sum[:])
}

// prepare checks migrations and returns them sorted by version.
func prepare(ms []Migration) ([]Migration, error) {
	out := slices.Clone(ms)
	slices.SortStableFunc(out, func(a, b Migration) int {
		switch {
		case a.Version < b.Version:
			return -1
		case a.Version > b.Version:
			return 1
		}
		return 0
	})
	for i, m := range out {
		switch {
		case m.err != nil:
			return nil, fmt.Errorf("%w: version %d: %w", ErrInvalidMigration, m.Version, m.err)
		case m.Version == 0:
			return nil, fmt.Errorf("%w: %q has no version", ErrInvalidMigration, m.Description)
		case i > 0 && out[i-1].Version == m.Version:
			return nil, fmt.Errorf("%w: version %d is used by %q and %q", ErrInvalidMigration, m.Version, out[i-1].Description, m.Description)
		case m.Up == nil:
			return nil, fmt.Errorf("%w: version %d has no Up", ErrInvalidMigration, m.Version)
		case m.Definition == "":
			return nil, fmt.Errorf("%w: version %d has no Definition (describe what Up does, so that changes to it are detected)", ErrInvalidMigration, m.Version)
		}
	}
	return out, nil
}
