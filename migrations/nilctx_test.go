package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/migrations"
)

// TestNilContext: a Migrator's calls given a nil context return an error
// wrapping lock.ErrInvalidArgument that names it, and write nothing,
// rather than panic (they panicked: "cannot create context from nil
// parent").
func TestNilContext(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	m, err := migrations.New(db)
	if err != nil {
		t.Fatal(err)
	}
	var nilCtx context.Context
	for name, call := range map[string]func() error{
		"Up":     func() error { _, err := m.Up(nilCtx); return err },
		"Status": func() error { _, err := m.Status(nilCtx); return err },
		"Plan":   func() error { _, err := m.Plan(nilCtx); return err },
		"Down":   func() error { _, err := m.Down(nilCtx, 0); return err },
	} {
		err := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panicked: %v", p)
				}
			}()
			return call()
		}()
		if !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil context") {
			t.Errorf("%s(nil context): %v, want an error wrapping lock.ErrInvalidArgument naming the nil context", name, err)
		}
	}
	if n, err := db.Collection(migrations.DefaultCollection).CountDocuments(context.Background(), bson.D{}); err != nil || n != 0 {
		t.Errorf("%d records written (%v)", n, err)
	}
}
