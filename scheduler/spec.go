package scheduler

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// newParser returns robfig's parser for the accepted spec syntax: five
// fields (or six with an optional leading seconds field), descriptors such
// as @daily and @every, and a CRON_TZ= or TZ= prefix.
func newParser(seconds bool) cron.Parser {
	opts := cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor
	if seconds {
		opts |= cron.SecondOptional
	}
	return cron.NewParser(opts)
}

// parseSpec parses spec with robfig's parser. @every schedules are replaced
// by ones aligned to the Unix epoch, so that every instance computes the
// same firings whenever it started.
func parseSpec(p cron.Parser, spec string) (sched cron.Schedule, err error) {
	defer func() {
		// robfig's parser panics on some malformed input ("CRON_TZ=UTC"
		// without a schedule slices out of range).
		if r := recover(); r != nil {
			sched, err = nil, fmt.Errorf("%w %q: %v", ErrInvalidSpec, spec, r)
		}
	}()
	s, err := p.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v%s", ErrInvalidSpec, spec, err, secondsHint(spec))
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
	return s, nil
}

// secondsHint is what to add to the error of a spec with a seconds field
// that a parser without WithSeconds refused.
func secondsHint(spec string) string {
	f := strings.Fields(spec)
	if len(f) > 0 && (strings.HasPrefix(f[0], "TZ=") || strings.HasPrefix(f[0], "CRON_TZ=")) {
		f = f[1:]
	}
	if len(f) != 6 {
		return ""
	}
	if _, err := newParser(true).Parse(spec); err != nil {
		return ""
	}
	return " (a leading seconds field needs scheduler.WithSeconds)"
}

// NextFiring returns the first firing of spec after t, as every Scheduler
// computes it, for tools that show schedules. spec is read as AddJob reads
// it, with or without WithSeconds: five fields, or six with a leading
// seconds field, descriptors such as @daily and "@every 10m", and a
// CRON_TZ= prefix; in loc unless it names its zone (UTC if loc is nil, as
// without WithLocation). It returns the zero time if spec has no firing in
// the five years after t, and an error wrapping ErrInvalidSpec if it does
// not parse.
func NextFiring(spec string, t time.Time, loc *time.Location) (time.Time, error) {
	sched, err := parseSpec(newParser(true), spec)
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
	rest := spec
	if strings.HasPrefix(rest, "TZ=") || strings.HasPrefix(rest, "CRON_TZ=") {
		_, rest, _ = strings.Cut(rest, " ")
		rest = strings.TrimSpace(rest)
	}
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
