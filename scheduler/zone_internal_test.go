package scheduler

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// hostLocal is time.Local as Go builds it on a host whose /etc/localtime
// is zone's file and TZ is unset: a Location named "Local".
func hostLocal(t *testing.T, zone string) *time.Location {
	t.Helper()
	data, err := os.ReadFile("/usr/share/zoneinfo/" + zone)
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	loc, err := time.LoadLocationFromTZData("Local", data)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestLocalZonesRegisterApart: a UTC host and an Asia/Kathmandu host, each
// with WithLocation(time.Local) and TZ unset, must not register one spec
// (both were "CRON_TZ=Local ..." with one hash, and each ran the job in its
// own zone): a zone is registered by its name, and one this host cannot
// name is refused.
func TestLocalZonesRegisterApart(t *testing.T) {
	t.Parallel()
	const spec = "0 9,56 * * * *"
	utc, ktm := hostLocal(t, "Etc/UTC"), hostLocal(t, "Asia/Kathmandu")
	if utc.String() != ktm.String() {
		t.Fatalf("setup: %q and %q, want both named Local", utc, ktm)
	}
	registered := func(loc *time.Location) (string, error) {
		var c config
		if err := WithLocation(loc)(&c); err != nil {
			return "", err
		}
		return canonicalSpec(spec, c.location), nil
	}
	a, errA := registered(utc)
	b, errB := registered(ktm)
	switch {
	case errA == nil && errB == nil && specHash("j", a) == specHash("j", b):
		t.Fatalf("a UTC host and a Kathmandu host both register %q (one hash): each fires the job in its own zone", a)
	case errA != nil && errB != nil:
		t.Fatalf("both refused: %v; %v", errA, errB)
	}
	for _, err := range []error{errA, errB} {
		if err != nil && (!errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "time.LoadLocation")) {
			t.Errorf("refused with %v, want ErrInvalidOption naming time.LoadLocation", err)
		}
	}
}

// TestZoneNames: a local zone is named by TZ, the /etc/localtime link or
// /etc/timezone, and a name is taken only for the zone it loads.
func TestZoneNames(t *testing.T) {
	t.Parallel()
	ktm := hostLocal(t, "Asia/Kathmandu")
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip(err)
	}
	noFile := func(string) ([]byte, error) { return nil, os.ErrNotExist }
	link := func(to string) func(string) (string, error) {
		return func(p string) (string, error) {
			if p == "/etc/localtime" {
				return to, nil
			}
			return "", os.ErrInvalid
		}
	}
	unset := func(string) (string, bool) { return "", false }
	for _, tt := range []struct {
		name string
		src  zoneSources
		loc  *time.Location
		want string // the zone's name; empty: refused
	}{
		{"link", zoneSources{unset, link("/usr/share/zoneinfo/Asia/Kathmandu"), noFile}, ktm, "Asia/Kathmandu"},
		{"relative link", zoneSources{unset, link("../usr/share/zoneinfo/Asia/Kathmandu"), noFile}, ktm, "Asia/Kathmandu"},
		{"posix link", zoneSources{unset, link("/usr/share/zoneinfo/posix/Asia/Kathmandu"), noFile}, ktm, "Asia/Kathmandu"},
		{"macOS link", zoneSources{unset, link("/var/db/timezone/zoneinfo/Asia/Kathmandu"), noFile}, ktm, "Asia/Kathmandu"},
		{"/etc/timezone", zoneSources{unset, link("/nowhere"), func(p string) ([]byte, error) {
			return []byte("Asia/Kathmandu\n"), nil
		}}, ktm, "Asia/Kathmandu"},
		{"link to another zone", zoneSources{unset, link("/usr/share/zoneinfo/Asia/Kolkata"), noFile}, ktm, ""},
		{"stale /etc/timezone", zoneSources{unset, link("/nowhere"), func(string) ([]byte, error) {
			return []byte("Europe/Paris"), nil
		}}, ktm, ""},
		{"a copy, no name", zoneSources{unset, link("/nowhere"), noFile}, ktm, ""},
		{"UTC host", zoneSources{unset, link("/usr/share/zoneinfo/Etc/UTC"), noFile}, hostLocal(t, "Etc/UTC"), "UTC"},
		{"named", hostZones, paris, "Europe/Paris"},
		{"alias of UTC", hostZones, mustLoad(t, "Etc/Zulu"), "UTC"},
		{"fixed zone", hostZones, time.FixedZone("X", 3600), ""},
		{"fixed zone named like a real one", hostZones, time.FixedZone("Europe/Paris", 5*3600), ""},
		{"a path", zoneSources{unset, link("/nowhere"), noFile}, mustTZData(t, "/usr/share/zoneinfo/Asia/Kathmandu"), "Asia/Kathmandu"},
	} {
		z, err := tt.src.zoneOf(tt.loc)
		switch {
		case tt.want == "" && err == nil:
			t.Errorf("%s: named %q, want refused", tt.name, z)
		case tt.want == "" && !strings.Contains(err.Error(), "time.LoadLocation"):
			t.Errorf("%s: %v, want an error naming time.LoadLocation", tt.name, err)
		case tt.want != "" && (err != nil || z.String() != tt.want):
			t.Errorf("%s: %v, %v; want %s", tt.name, z, err, tt.want)
		}
	}
}

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	l, err := time.LoadLocation(name)
	if err != nil {
		t.Skip(err)
	}
	return l
}

// mustTZData is the zone of file named by its path, as time.Local is with
// TZ=/path.
func mustTZData(t *testing.T, file string) *time.Location {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Skip(err)
	}
	l, err := time.LoadLocationFromTZData(file, data)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
