package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/migrations"
)

// TestNegativeVersionsAreReserved: New refuses a migration of the
// application's with a negative version, reserved for the built-in ones,
// naming it; the built-ins, registered by New itself, still have theirs.
func TestNegativeVersionsAreReserved(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	mig := func(v int64, desc string) migrations.Migration {
		return migrations.Migration{Version: v, Description: desc, Definition: desc,
			Up: func(context.Context, *mongo.Database) error { return nil }}
	}
	tests := []struct {
		name string
		opts []migrations.Option
		bad  *migrations.Migration // nil: accepted
	}{
		{"positive", []migrations.Option{migrations.WithMigrations(mig(1, "one"), mig(math.MaxInt64, "last"))}, nil},
		{"minus one", []migrations.Option{migrations.WithMigrations(mig(1, "one"), mig(-1, "backfill"))}, &migrations.Migration{Version: -1, Description: "backfill"}},
		{"a built-in's version", []migrations.Option{migrations.WithMigrations(mig(migrations.LockIndexesVersion, "my indexes"))},
			&migrations.Migration{Version: migrations.LockIndexesVersion, Description: "my indexes"}},
		{"smallest", []migrations.Option{migrations.WithMigrations(mig(math.MinInt64, "first of all"))},
			&migrations.Migration{Version: math.MinInt64, Description: "first of all"}},
		{"in a later WithMigrations", []migrations.Option{migrations.WithMigrations(mig(1, "one")),
			migrations.WithMigrations(mig(-5, "later"))}, &migrations.Migration{Version: -5, Description: "later"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := migrations.New(db, tt.opts...)
			if tt.bad == nil {
				if err != nil {
					t.Fatal(err)
				}
				if got := m.Migrations(); len(got) == 0 || got[0].Version != migrations.LockIndexesVersion {
					t.Errorf("built-in migrations missing: %v", got)
				}
				return
			}
			if !errors.Is(err, migrations.ErrInvalidMigration) || !errors.Is(err, lock.ErrInvalidArgument) {
				t.Fatalf("err = %v, want ErrInvalidMigration", err)
			}
			msg := err.Error()
			for _, want := range []string{"WithMigrations", fmt.Sprintf("version %d (%s)", tt.bad.Version, tt.bad.Description), "reserved"} {
				if !strings.Contains(msg, want) {
					t.Errorf("err = %q, want it to say %q", msg, want)
				}
			}
			if strings.Count(msg, "migrations:") != 1 {
				t.Errorf("err = %q, want one prefix", msg)
			}
		})
	}
}
