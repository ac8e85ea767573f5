package scheduler

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestSecondsHint: a six-field spec refused for want of WithSeconds says
// so; other bad specs get no such hint.
func TestSecondsHint(t *testing.T) {
	t.Parallel()
	const hint = "scheduler.WithSeconds"
	for _, tt := range []struct {
		spec string
		hint bool
	}{
		{"*/2 * * * * *", true},
		{"CRON_TZ=Europe/Paris 0 30 2 * * *", true},
		{"* * *", false},
		{"61 * * * * *", false},      // six fields, but no valid seconds spec either
		{"* * * * * * *", false},     // seven
		{"0 0 0 0 0 0 0 0", false},   // eight
		{"CRON_TZ=UTC * * *", false}, // zone, three fields
	} {
		_, err := parseSpec(newParser(false), tt.spec)
		if !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%q: %v, want ErrInvalidSpec", tt.spec, err)
			continue
		}
		if got := strings.Contains(err.Error(), hint); got != tt.hint {
			t.Errorf("%q: %v; hint %v, want %v", tt.spec, err, got, tt.hint)
		}
	}
	if _, err := parseSpec(newParser(true), "*/2 * * * * *"); err != nil {
		t.Errorf("with seconds: %v", err)
	}
}

func TestNextFiring(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC) // a Tuesday
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	for _, tt := range []struct {
		spec string
		loc  *time.Location
		want time.Time
	}{
		{"0 3 * * *", nil, time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)},
		{"0 3 * * *", paris, time.Date(2030, 1, 2, 2, 0, 0, 0, time.UTC)},
		{"CRON_TZ=UTC 0 3 * * *", paris, time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)},
		{"30 0 3 * * *", nil, time.Date(2030, 1, 2, 3, 0, 30, 0, time.UTC)}, // seconds
		{"@daily", nil, time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC)},
		{"@every 7m", nil, time.Unix(at.Unix()/420*420+420, 0)}, // the epoch's multiples
	} {
		got, err := NextFiring(tt.spec, at, tt.loc)
		if err != nil || !got.Equal(tt.want) {
			t.Errorf("NextFiring(%q, %v, %v) = %v, %v; want %v", tt.spec, at, tt.loc, got, err, tt.want)
		}
	}
	if got, err := NextFiring("0 0 30 2 *", at, nil); err != nil || !got.IsZero() {
		t.Errorf("a spec that never fires: %v, %v", got, err)
	}
	for _, bad := range []string{"", "* * *", "@fortnightly", "@every 500ms", "CRON_TZ=UTC"} {
		if _, err := NextFiring(bad, at, nil); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("NextFiring(%q): %v, want ErrInvalidSpec", bad, err)
		}
	}
}

// FuzzNextFiring: any spec parses or is refused with ErrInvalidSpec, never
// a panic, and a firing is after the time given.
func FuzzNextFiring(f *testing.F) {
	for _, s := range []string{"0 3 * * *", "*/5 * * * * *", "@every 1h30m", "CRON_TZ=Asia/Tokyo @daily", "CRON_TZ=", "TZ=UTC", "@every -1s", "0 0 31 2 *"} {
		f.Add(s)
	}
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, spec string) {
		next, err := NextFiring(spec, at, nil)
		switch {
		case err != nil && !errors.Is(err, ErrInvalidSpec):
			t.Fatalf("%q: %v", spec, err)
		case err == nil && !next.IsZero() && !next.After(at):
			t.Fatalf("%q: next firing %v not after %v", spec, next, at)
		}
	})
}
