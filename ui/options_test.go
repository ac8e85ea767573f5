package ui_test

import (
	"errors"
	"testing"
	"time"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/ui"
)

func TestNewBadOptions(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	if _, err := ui.New(nil); !errors.Is(err, ui.ErrInvalidOption) {
		t.Errorf("nil database: %v", err)
	}
	for name, opt := range map[string]ui.Option{
		"nil option":      nil,
		"prefix":          ui.WithPrefix("no-slash"),
		"prefix quote":    ui.WithPrefix(`/a"b`),
		"refresh":         ui.WithRefresh(time.Millisecond),
		"read timeout":    ui.WithReadTimeout(0),
		"late after":      ui.WithLateAfter(-time.Second),
		"clock":           ui.WithClock(nil),
		"location":        ui.WithLocation(nil),
		"collection":      ui.WithRunsCollection("a$b"),
		"system":          ui.WithJobsCollection("system.x"),
		"lock prefix":     ui.WithLockPrefix(""),
		"migrator":        ui.WithMigrator(nil),
		"jobs":            ui.WithJobs(map[string]string{"a": ""}),
		"redact":          ui.WithRedact(nil),
		"title":           ui.WithTitle(" "),
		"actions":         ui.WithActions(nil),
		"short csrf key":  ui.WithCSRFKey([]byte("short")),
		"terms":           ui.WithTermsCollection(""),
		"actions coll":    ui.WithActionsCollection("$x"),
		"lock collection": ui.WithLockCollection(""),
	} {
		if _, err := ui.New(db, opt); !errors.Is(err, ui.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
	if got := ui.RedactURIs("dial mongodb+srv://u:p%40ss@h.example/db and http://x@y/"); got != "dial mongodb+srv://***@h.example/db and http://***@y/" {
		t.Errorf("RedactURIs: %q", got)
	}
}
