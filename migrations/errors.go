package migrations

import (
	"context"
	"errors"
	"fmt"

	"github.com/mongolock/mongolock/internal/errs"
	"github.com/mongolock/mongolock/lock"
)

// Sentinel errors. Check them with errors.Is; returned errors wrap them with
// the version and what was being done.
var (
	// ErrInvalidOption reports a bad option passed to New, or options that
	// disagree; the message names the option. It matches
	// lock.ErrInvalidOption too, and an error about a bad id also matches
	// lock.ErrInvalidArgument.
	ErrInvalidOption error = errs.Kind("migrations: invalid option", lock.ErrInvalidOption)

	// ErrInvalidMigration reports a migration New cannot accept: no version,
	// a negative version (reserved for Builtin) given to WithMigrations, a
	// duplicate version, no Up, no Definition, or a bad index description.
	// It matches lock.ErrInvalidArgument too.
	ErrInvalidMigration error = errs.Kind("migrations: invalid migration", lock.ErrInvalidArgument)

	// ErrChanged reports an applied migration whose definition differs from
	// the one recorded when it was applied. Up refuses to run while one
	// exists, unless the migration is Repeatable.
	ErrChanged = errors.New("migrations: applied migration changed")

	// ErrFailed reports that a migration's Up or Down returned an error. The
	// error also wraps the migration's own error.
	ErrFailed = errors.New("migrations: migration failed")

	// ErrWaitTimeout reports that another migrator held the lock for longer
	// than the wait allowed (WithWait).
	ErrWaitTimeout = errors.New("migrations: timed out waiting for another migrator")

	// ErrIndexConflict reports an existing index that differs from the one a
	// migration describes in a way only dropping and re-creating it can fix
	// (and the migration does not allow that), or an index with the same
	// keys under another name.
	ErrIndexConflict = errors.New("migrations: index conflicts with the migration")

	// ErrUnsupported reports that the server does not support what a
	// migration needs, such as hidden indexes (FerretDB, MongoDB before
	// 4.4), or an index option FerretDB 1.x does not implement. The step
	// that needs it changed nothing before it failed. The error wraps the
	// server's too.
	ErrUnsupported = errors.New("migrations: not supported by this server")

	// ErrIrreversible reports that Down was asked to roll back a migration
	// that has no Down function, or that this program does not know.
	ErrIrreversible = errors.New("migrations: migration cannot be rolled back")
)

// checkContext returns an error wrapping lock.ErrInvalidArgument if ctx is
// nil: the Migrator's calls check it first, so that a nil context is an
// error naming the call, never a panic.
func checkContext(ctx context.Context, call string) error {
	if ctx == nil {
		return fmt.Errorf("migrations: %s: %w: nil context", call, lock.ErrInvalidArgument)
	}
	return nil
}
