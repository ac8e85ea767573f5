package scheduler

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"time"
)

// A spec is registered with the name of the zone it is read in
// (canonicalSpec), and every instance loads that name: the name must be
// one time.LoadLocation loads, to the zone the Scheduler computes in.
// time.Local is named "Local" on every host whose TZ is unset, and
// time.LoadLocation("Local") is each host's own zone: so the zone of a
// Location named "Local", or named by a file's path (TZ=/path), is found
// as Go found it (TZ, else /etc/localtime) and named by where that file
// sits in a zoneinfo directory, or by /etc/timezone (Debian). A name is
// taken only if the zone it loads has the Location's offsets at every
// transition from 1970 to 2100 of either: a stale /etc/timezone, or a
// time.FixedZone named like a real zone, is refused, not registered under
// a name other instances read differently.
//
// Go's own resolution of time.Local (zoneinfo_unix.go) keeps no name, and
// the small libraries that find one read only the /etc/localtime link
// without checking it; this is theirs with the check.

// zoneOf returns loc as a Scheduler computes and registers it: time.UTC
// for UTC and its aliases (Etc/UTC, ...), else loc loaded by its IANA
// name. It returns an error if loc has no name every instance can load.
func zoneOf(loc *time.Location) (*time.Location, error) { return hostZones.zoneOf(loc) }

// zoneSources is where a host's local zone is read from.
type zoneSources struct {
	getenv   func(string) (string, bool)
	readlink func(string) (string, error)
	readFile func(string) ([]byte, error)
}

var hostZones = zoneSources{getenv: os.LookupEnv, readlink: os.Readlink, readFile: os.ReadFile}

// utcNames are the tz database's names of UTC (links to Etc/UTC or
// Etc/GMT): a zone of one of them is registered as UTC, as without
// WithLocation.
var utcNames = []string{"UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal", "Etc/Zulu", "Zulu",
	"GMT", "Etc/GMT", "Etc/GMT0", "Etc/GMT+0", "Etc/GMT-0", "GMT0", "GMT+0", "GMT-0", "Etc/Greenwich", "Greenwich"}

func (z zoneSources) zoneOf(loc *time.Location) (*time.Location, error) {
	if loc == nil || loc == time.UTC {
		return time.UTC, nil
	}
	name := loc.String()
	names, why := []string{name}, []string(nil)
	if name == "Local" || strings.HasPrefix(name, "/") {
		names, why = z.localNames(name)
	}
	for _, n := range names {
		if n == "" || n == "Local" {
			continue
		}
		named, err := time.LoadLocation(n)
		switch {
		case err != nil:
			why = append(why, fmt.Sprintf("%q: %v", n, err))
		case !sameOffsets(named, loc):
			why = append(why, fmt.Sprintf("%q is another zone", n))
		case slices.Contains(utcNames, n):
			return time.UTC, nil
		default:
			return named, nil
		}
	}
	detail := ""
	if len(why) > 0 {
		detail = " (" + strings.Join(why, "; ") + ")"
	}
	return nil, fmt.Errorf("time zone %q has no name that every instance loads to the same zone%s: "+
		"give a zone loaded by name, such as time.LoadLocation(\"Europe/Paris\"), or set TZ", name, detail)
}

// localNames are the names the zone of the Location called name ("Local",
// or a path) may have on this host, best first, and why others are not.
func (z zoneSources) localNames(name string) (names, why []string) {
	file := name
	if name == "Local" {
		file = "/etc/localtime" // TZ unset, or TZ=/etc/localtime
		if tz, ok := z.getenv("TZ"); ok && strings.HasPrefix(strings.TrimPrefix(tz, ":"), "/") {
			file = strings.TrimPrefix(tz, ":")
		}
	}
	// The file, or what it links to, in a zoneinfo directory.
	for range 8 {
		if n, ok := zoneinfoName(file); ok {
			names = append(names, n)
			break
		}
		target, err := z.readlink(file)
		if err != nil {
			why = append(why, fmt.Sprintf("%s: not a link into a zoneinfo directory", file))
			break
		}
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(file), target)
		}
		file = target
	}
	if name == "Local" {
		b, err := z.readFile("/etc/timezone")
		if n := strings.TrimSpace(string(b)); err == nil && n != "" {
			names = append(names, n)
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			why = append(why, fmt.Sprintf("/etc/timezone: %v", err))
		}
	}
	return names, why
}

// zoneinfoName is the zone name of file, a path in a zoneinfo directory
// (/usr/share/zoneinfo/Europe/Paris: Europe/Paris).
func zoneinfoName(file string) (string, bool) {
	parts := strings.Split(file, "/")
	i := slices.Index(parts, "zoneinfo")
	if i < 0 || i == len(parts)-1 {
		return "", false
	}
	rest := parts[i+1:]
	if rest[0] == "posix" && len(rest) > 1 {
		rest = rest[1:] // posix/Europe/Paris is Europe/Paris
	}
	return strings.Join(rest, "/"), true
}

// sameOffsets reports whether a and b have the same offset from UTC from
// 1970 to 2100: at each transition of either (ZoneBounds), both stay
// constant until the next.
func sameOffsets(a, b *time.Location) bool {
	from, to := time.Unix(0, 0), time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, l := range []*time.Location{a, b} {
		for t, n := from, 0; t.Before(to) && n < 4096; n++ {
			_, oa := t.In(a).Zone()
			_, ob := t.In(b).Zone()
			if oa != ob {
				return false
			}
			_, end := t.In(l).ZoneBounds()
			if !end.After(t) {
				break // no transition after t
			}
			t = end
		}
	}
	return true
}
