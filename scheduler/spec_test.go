package scheduler

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestBadSpecs: specs robfig accepts but that do not mean what they say,
// and specs it refuses, get ErrInvalidSpec naming what is wrong.
func TestBadSpecs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		spec string
		want string // in the error
	}{
		{"*/75 * * * * *", `seconds field "*/75": step 75 is larger than the range 0-59`},
		{"*/60 * * * * *", `seconds field "*/60": step 60`},
		{"*/75 * * * *", `minutes field "*/75"`},
		{"0 */75 * * * *", `minutes field "*/75"`},
		{"0 */25 * * *", `hours field "*/25": step 25 is larger than the range 0-23`},
		{"0 */24 * * *", `hours field "*/24"`},
		{"0 0 */31 * *", `day of month field "*/31": step 31 is larger than the range 1-31`},
		{"0 0 * */12 *", `month field "*/12"`},
		{"0 0 * jan-mar/3 *", `month field "jan-mar/3": step 3 is larger than the range 1-3`},
		{"0 0 * * */7", `day of week field "*/7"`},
		{"0 0 * * MON-FRI/5", `day of week field "MON-FRI/5"`},
		{"0 0-10/15 * * *", `hours field "0-10/15"`},
		{"5,50/10 * * * *", `minutes field "5,50/10": step 10 is larger than the range 50-59`},
		{"CRON_TZ=Europe/Paris 0 */30 * * *", `hours field "*/30"`},
		{"CRON_TZ=Local 0 9 * * *", "CRON_TZ=Local is each host's own zone"},
		{"TZ=Local 0 9 * * *", "CRON_TZ=Local is each host's own zone"},
		{"*/0 * * * *", ""},
		{"* * *", ""},
		{"* * * * * * *", ""}, // seven fields
		{"61 * * * *", ""},
		{"CRON_TZ=UTC", ""},
		{"CRON_TZ=Nowhere/Land * * * * *", ""},
	} {
		_, err := parseSpec(tt.spec)
		if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want ErrInvalidSpec with %q", tt.spec, err, tt.want)
		}
	}
}

// TestFieldCount: five fields are minute first and six second first,
// whichever a spec has: no switch changes what "*/15 * * * *" means.
func TestFieldCount(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		spec string
		want time.Duration // after at
	}{
		{"*/15 * * * *", 15 * time.Minute},
		{"*/15 * * * * *", 15 * time.Second},
		{"*/59 * * * * *", 59 * time.Second},
		{"0 */23 * * *", 11 * time.Hour}, // hours 0 and 23
		{"0 0-59/30 * * * *", 30 * time.Minute},
		{"0 0 * * MON-FRI/2", 12 * time.Hour}, // at is a Tuesday noon; MON+2 is Wednesday
	} {
		got, err := NextFiring(tt.spec, at, nil)
		if err != nil || !got.Equal(at.Add(tt.want)) {
			t.Errorf("NextFiring(%q) = %v, %v; want %v", tt.spec, got, err, at.Add(tt.want))
		}
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
	for _, s := range []string{"0 3 * * *", "*/5 * * * * *", "@every 1h30m", "CRON_TZ=Asia/Tokyo @daily", "CRON_TZ=", "TZ=UTC", "@every -1s", "0 0 31 2 *",
		"*/75 * * * * *", "*/15 * * * *", "0 */25 * * *", "CRON_TZ=Local * * * * *", "5-/3 * * * *", "* * * JAN-/2 *", "0 0 * * sun-sat/6"} {
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
