package scheduler

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// specParser is robfig's parser for the accepted spec syntax: five fields
// (minute first, as in crontab) or six (a leading seconds field), with no
// switch between them: robfig's SecondOptional reads five fields as
// seconds 0; descriptors such as @daily and @every; a CRON_TZ= or TZ=
// prefix.
var specParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// parseSpec parses spec with robfig's parser, and refuses what it accepts
// but does not mean what it says: a step larger than the range it steps
// through (checkSteps), and CRON_TZ=Local, each host's own zone. @every
// schedules are replaced by ones aligned to the Unix epoch, so that every
// instance computes the same firings whenever it started.
func parseSpec(spec string) (sched cron.Schedule, err error) {
	defer func() {
		// robfig's parser panics on some malformed input ("CRON_TZ=UTC"
		// without a schedule slices out of range).
		if r := recover(); r != nil {
			sched, err = nil, fmt.Errorf("%w %q: %v", ErrInvalidSpec, spec, r)
		}
	}()
	s, err := specParser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrInvalidSpec, spec, err)
	}
	zone, rest := splitZone(spec)
	if zone == "Local" {
		return nil, fmt.Errorf("%w %q: CRON_TZ=Local is each host's own zone: name the zone (CRON_TZ=Europe/Paris), "+
			"or use WithLocation(time.Local)", ErrInvalidSpec, spec)
	}
	if _, ok := s.(cron.ConstantDelaySchedule); ok {
		// robfig silently rounds the interval to whole seconds (at least
		// one); a job that runs 50% more often than written is worse than
		// an error.
		d, err := everyInterval(spec)
		if err != nil {
			return nil, err
		}
		return everySchedule{d}, nil
	}
	if err := checkSteps(rest); err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrInvalidSpec, spec, err)
	}
	return s, nil
}

// splitZone splits a CRON_TZ= or TZ= prefix off spec: the zone's name and
// the rest.
func splitZone(spec string) (zone, rest string) {
	for _, p := range []string{"CRON_TZ=", "TZ="} {
		if r, ok := strings.CutPrefix(spec, p); ok {
			zone, rest, _ = strings.Cut(r, " ")
			return zone, strings.TrimSpace(rest)
		}
	}
	return "", spec
}

// specField is a field of a spec: its name and the values it takes.
type specField struct {
	name     string
	min, max int
	names    []string // of the values from min on, if they have names
}

var specFields = [6]specField{
	{"seconds", 0, 59, nil},
	{"minutes", 0, 59, nil},
	{"hours", 0, 23, nil},
	{"day of month", 1, 31, nil},
	{"month", 1, 12, []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}},
	{"day of week", 0, 6, []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}},
}

// checkSteps refuses a step larger than the range it steps through, which
// robfig accepts and reads as the range's first value alone: "*/75" in the
// seconds field fires at second 0 only, once a minute, and "*/25" in the
// hours field once a day. As Quartz does, a step over a whole field must
// be at most its largest value less its smallest (59 for seconds and
// minutes, 23 for hours); over a range a-b, at most b-a. fields is a
// spec's fields after its zone, robfig having parsed them.
func checkSteps(fields string) error {
	f := strings.Fields(fields)
	if len(f) == 0 || strings.HasPrefix(f[0], "@") {
		return nil
	}
	defs := specFields[:]
	if len(f) == 5 {
		defs = defs[1:] // no seconds field
	}
	if len(f) != len(defs) {
		return nil
	}
	for i, field := range f {
		d := defs[i]
		for _, part := range strings.Split(field, ",") {
			rng, stepText, ok := strings.Cut(part, "/")
			if !ok {
				continue
			}
			step, err1 := strconv.Atoi(stepText)
			lo, hi, err2 := d.bounds(rng)
			if err1 != nil || err2 != nil {
				continue // robfig parsed it; what it means is its business
			}
			if step > hi-lo {
				return fmt.Errorf("%s field %q: step %d is larger than the range %d-%d it steps through "+
					"(it would fire at %d only)", d.name, field, step, lo, hi, lo)
			}
		}
	}
	return nil
}

// bounds are the first and last values of rng, a range in d: "*", "?",
// "a-b", or "a" (before a step: a to d's largest value).
func (d specField) bounds(rng string) (lo, hi int, err error) {
	if rng == "*" || rng == "?" {
		return d.min, d.max, nil
	}
	a, b, isRange := strings.Cut(rng, "-")
	if lo, err = d.value(a); err != nil {
		return 0, 0, err
	}
	hi = d.max
	if isRange {
		if hi, err = d.value(b); err != nil {
			return 0, 0, err
		}
	}
	return lo, hi, nil
}

// value is the number of s in d: a number, or a name (jan, mon).
func (d specField) value(s string) (int, error) {
	if i := slices.Index(d.names, strings.ToLower(s)); i >= 0 {
		return d.min + i, nil
	}
	return strconv.Atoi(s)
}

// NextFiring returns the first firing of spec after t, as every Scheduler
// computes it, for tools that show schedules. spec is read as AddJob reads
// it: five fields, or six with a leading seconds field, descriptors such as
// @daily and "@every 10m", and a CRON_TZ= prefix; in loc unless it names
// its zone (UTC if loc is nil, as without WithLocation). It returns the
// zero time if spec has no firing in the five years after t, and an error
// wrapping ErrInvalidSpec if it does not parse.
func NextFiring(spec string, t time.Time, loc *time.Location) (time.Time, error) {
	sched, err := parseSpec(spec)
	if err != nil {
		return time.Time{}, err
	}
	if loc == nil {
		loc = time.UTC
	}
	return nextAfter(sched, loc, t), nil
}

// everyInterval returns the duration of an "@every D" spec, which may carry
// a time zone prefix.
func everyInterval(spec string) (time.Duration, error) {
	_, rest := splitZone(spec)
	d, err := time.ParseDuration(strings.TrimPrefix(rest, "@every "))
	if err != nil {
		return 0, fmt.Errorf("%w %q: %v", ErrInvalidSpec, spec, err)
	}
	if d < time.Second || d%time.Second != 0 {
		return 0, fmt.Errorf("%w %q: @every needs a whole number of seconds, at least 1s", ErrInvalidSpec, spec)
	}
	return d, nil
}

// everySchedule fires at every multiple of d since the Unix epoch.
type everySchedule struct{ d time.Duration }

// Next returns the first multiple of d after t.
func (e everySchedule) Next(t time.Time) time.Time {
	n, d := t.UnixNano(), int64(e.d)
	k := n / d
	if n < 0 && n%d != 0 {
		k-- // floor, for times before 1970
	}
	return time.Unix(0, (k+1)*d).In(t.Location())
}

// nextAfter returns the first firing of sched after t, or the zero time if
// there is none. Specs without CRON_TZ= are read in loc.
func nextAfter(sched cron.Schedule, loc *time.Location, t time.Time) time.Time {
	// A SpecSchedule without a zone of its own uses t's zone, as in
	// robfig's cron.Cron with cron.WithLocation.
	return sched.Next(t.In(loc))
}
