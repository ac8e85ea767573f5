package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/scheduler"
)

// jobsHelp is printed after the flags of `jobs -h` and by `jobs help`.
const jobsHelp = `jobs lists every job of the jobs collection, and those the program registers
(WithJobs); jobs JOB... lists those, and a name that is in neither is an error.
NEXT is the next firing that will run, from the spec the instances last
claimed with, in --tz unless the spec names its zone (CRON_TZ=): none while
the job is removed or paused with no end. STATE is paused (until, note), a
trigger waiting to be claimed, removed, failed firings in a row, and
orphaned: no instance up is known to register the job (by the presence
leases of the schedulers), so nothing fires it.

pause, resume, trigger, remove and help are commands when they come first
after jobs, flags aside (jobs --uri U pause JOB pauses JOB). To list a job
with such a name, end the flags before it: jobs -- pause.
`

// pauseHelp is printed after the flags of `jobs pause -h`.
const pauseHelp = `Every instance skips the job's firings from the next one on, and records
them as skipped ("paused"), until jobs resume or the --until time; a trigger
still runs it once. TIME is RFC 3339 (2026-01-02T15:04:05Z) or a duration
from the server's now (90m, 2h). Pausing again replaces the note and the end.
`

// jobVerbs are the words that make `jobs WORD` a command, not a listing.
func jobVerbs() []command {
	return []command{
		{name: "pause", args: "JOB [--note TEXT] [--until TIME]", summary: "pause a job on every instance, until resumed or until TIME",
			run: (*app).jobsPause, help: pauseHelp},
		{name: "resume", args: "JOB", summary: "resume a paused or removed job; resets its failures in a row", run: (*app).jobsResume},
		{name: "trigger", args: "JOB", summary: "run a job once, now, on one instance (twice asked: still once)", run: (*app).jobsTrigger},
		{name: "remove", args: "JOB", summary: "no instance runs the job any more (resume undoes it)", run: (*app).jobsRemove},
	}
}

// runJSON is one run in `jobs --json`.
type runJSON struct {
	Keeper    string `json:"keeper"`
	Scheduled string `json:"scheduled"`
	Start     string `json:"start"`
	End       string `json:"end,omitempty"`
	Outcome   string `json:"outcome"`
	Error     string `json:"error,omitempty"`
	Fence     string `json:"fence"`
	// Attempt is the attempt of the firing, from 1 (retries).
	Attempt   int  `json:"attempt"`
	Triggered bool `json:"triggered,omitempty"`
	// Of a record of firings not run (outcome skipped): the last firing,
	// how many, and why.
	Through string `json:"through,omitempty"`
	Count   int    `json:"count,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// pauseJSON is a job's pause in `jobs --json`.
type pauseJSON struct {
	Note  string `json:"note,omitempty"`
	Until string `json:"until,omitempty"`
	At    string `json:"at"`
}

// jobJSON is one job in `jobs --json`.
type jobJSON struct {
	Job  string `json:"job"`
	Spec string `json:"spec"`
	// Registered: the program registers the job (WithJobs). ClusterSpec is
	// the spec the cluster follows when it differs from the registered
	// one: the program's instances do not fire the job (superseded).
	Registered  bool   `json:"registered,omitempty"`
	ClusterSpec string `json:"clusterSpec,omitempty"`
	// NextFiring is the next firing that will run (NEXT); absent if none
	// will.
	NextFiring  string     `json:"nextFiring,omitempty"`
	Paused      *pauseJSON `json:"paused,omitempty"`
	Triggered   string     `json:"triggered,omitempty"` // a trigger waiting since then
	Removed     bool       `json:"removed,omitempty"`
	FailedInRow int        `json:"failedInARow,omitempty"`
	// Orphaned: no instance up is known to register the job (the last
	// registrant of each of its specs, and its last claimant): nothing
	// fires it (scheduler.Record.Orphaned).
	Orphaned bool `json:"orphaned,omitempty"`
	// Pending: the last claim's work has not all started or been recorded
	// as not run.
	Pending     bool      `json:"pending,omitempty"`
	LastClaimed string    `json:"lastClaimed,omitempty"`
	ClaimedBy   string    `json:"claimedBy,omitempty"`
	LastRun     *runJSON  `json:"lastRun,omitempty"`
	History     []runJSON `json:"history,omitempty"`
}

func toRunJSON(r scheduler.Run) runJSON {
	return runJSON{
		Keeper:    r.Keeper,
		Scheduled: jsonTime(r.Scheduled),
		Start:     jsonTime(r.Start),
		End:       jsonTime(r.End),
		Outcome:   string(r.Outcome),
		Error:     r.Error,
		Fence:     strconv.FormatUint(r.Fence, 10),
		Attempt:   max(r.Attempt, 1),
		Triggered: r.Triggered,
		Through:   jsonTime(r.Through),
		Count:     r.Count,
		Reason:    r.Reason,
	}
}

func (a *app) jobs(ctx context.Context, args []string) error {
	fs := a.flagSet("jobs")
	asJSON := fs.Bool("json", false, "print JSON")
	jobsColl := fs.String("jobs-collection", scheduler.DefaultJobsCollection, "the scheduler's jobs collection")
	runsColl := fs.String("runs-collection", scheduler.DefaultRunsCollection, "the scheduler's run history collection")
	history := fs.Int("history", 0, "also show this many recent runs of each job")
	tz := fs.String("tz", "UTC", "time zone of specs without CRON_TZ=, for NEXT: the scheduler's WithLocation")
	self, _ := a.command("jobs")
	if verb, rest, ok := a.subcommand(self, fs, args); ok {
		return verb.run(a, ctx, rest)
	}
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case *history < 0:
		return usagef("--history must not be negative")
	}
	if err := checkCollection("jobs-collection", *jobsColl); err != nil {
		return err
	}
	if err := checkCollection("runs-collection", *runsColl); err != nil {
		return err
	}
	loc, err := time.LoadLocation(*tz)
	if err != nil || *tz == "" {
		return usagef("--tz %q: not a time zone", *tz)
	}
	log, err := a.logger()
	if err != nil {
		return err
	}
	db, disconnect, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer disconnect()
	recs, bad, err := scheduler.LoadRecords(ctx, db.Collection(*jobsColl), pos...)
	if err != nil {
		return err
	}
	a.warnBad(log, bad)
	jobs := a.withRegistered(recs, pos)
	if err := a.allKnown(jobs, pos, *jobsColl, bad); err != nil {
		return err
	}
	if err := a.markOrphaned(ctx, db, log, *jobsColl, jobs); err != nil {
		return err
	}
	var now time.Time
	if len(jobs) > 0 {
		// The server's clock, not this machine's: the pauses' ends are
		// its times.
		if now, err = mongoutil.ServerTime(ctx, db); err != nil {
			return fmt.Errorf("read the server's time: %w", err)
		}
	}
	hist := make(map[string][]scheduler.Run, len(jobs))
	if *history > 0 {
		for _, j := range jobs {
			name := j.rec.Name
			if hist[name], bad, err = scheduler.LoadHistory(ctx, db.Collection(*runsColl), name, *history); err != nil {
				return err
			}
			a.warnBad(log, bad)
		}
	}
	jobs, hist = redactJobs(jobs, hist)
	if *asJSON {
		out := make([]jobJSON, 0, len(jobs))
		for _, job := range jobs {
			out = append(out, job.json(now, loc, hist[job.rec.Name]))
		}
		return a.printJSON(out)
	}
	if len(jobs) == 0 {
		fmt.Fprintf(a.stdout, "no jobs in %s.%s\n", a.g.db, *jobsColl)
		return nil
	}
	tw := table(a.stdout)
	fmt.Fprintln(tw, "JOB\tSPEC\tNEXT\tSTATE\tLAST CLAIMED\tBY\tLAST RUN\tOUTCOME\tTOOK\tERROR")
	for _, job := range jobs {
		r := job.rec
		spec := job.spec
		if c := job.clusterSpec(loc); c != "" {
			spec += " (superseded: the cluster follows " + c + ")"
		}
		next, why := job.next(now, loc)
		nextText := fmtTime(next)
		if why != "" {
			nextText = "- (" + why + ")"
		}
		run, outcome, took, errText := "-", "-", "-", "-"
		if lr := r.LastRun; lr != nil {
			run, outcome, errText = fmtTime(lr.Start), outcomeText(*lr), orDash(lr.Error)
			if !lr.End.IsZero() {
				took = fmtDur(lr.End.Sub(lr.Start))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, spec, nextText, oneLine(job.state()),
			fmtTime(r.LastClaimed), orDash(r.ClaimedBy), run, outcome, took, oneLine(errText))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, job := range jobs {
		if err := a.printHistory(a.stdout, job.rec.Name, hist[job.rec.Name], *history); err != nil {
			return err
		}
	}
	return nil
}

// printHistory prints the runs of job read with --history limit, one table
// per job.
func (a *app) printHistory(w io.Writer, job string, runs []scheduler.Run, limit int) error {
	if limit <= 0 {
		return nil
	}
	fmt.Fprintf(w, "\n%s: last %d runs, newest first\n", job, limit)
	if len(runs) == 0 {
		fmt.Fprintln(w, "  none recorded")
		return nil
	}
	tw := table(w)
	fmt.Fprintln(tw, "  FIRING\tKEEPER\tSTART\tOUTCOME\tTOOK\tERROR OR REASON")
	for _, h := range runs {
		took := "-"
		if !h.End.IsZero() && !h.Start.IsZero() && h.Outcome != scheduler.OutcomeSpent { // a spent run's end is when it was found
			took = fmtDur(h.End.Sub(h.Start))
		}
		detail := h.Error
		if h.Outcome == scheduler.OutcomeSkipped {
			detail = skippedText(h)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", fmtTime(h.Scheduled), orDash(h.Keeper), fmtTime(h.Start),
			outcomeText(h), took, orDash(oneLine(detail)))
	}
	return tw.Flush()
}

// outcomeText is r's outcome, with its attempt if it was a retry and
// whether a trigger asked for it.
func outcomeText(r scheduler.Run) string {
	s := string(r.Outcome)
	if r.Attempt > 1 {
		s += fmt.Sprintf(" (attempt %d)", r.Attempt)
	}
	if r.Triggered {
		s += " (triggered)"
	}
	return s
}

// skippedText says which firings a record of firings not run covers, and
// why they did not run.
func skippedText(r scheduler.Run) string {
	reason := cmp.Or(r.Reason, "no reason recorded")
	if r.Count > 1 {
		return fmt.Sprintf("%d firings through %s: %s", r.Count, fmtTime(r.Through), reason)
	}
	return reason
}

// listedJob is a job the jobs command lists: its record (zero but the name
// if no instance claimed it yet) and the spec to show.
type listedJob struct {
	rec        scheduler.Record
	spec       string // the registered one, else the record's
	registered bool
	orphaned   bool // no instance up is known to register it (scheduler.Record.Orphaned)
}

// markOrphaned marks the jobs that no instance up is known to register,
// by the presence leases of the schedulers of jobsColl (one read, only if
// some job records who registered it).
func (a *app) markOrphaned(ctx context.Context, db *mongo.Database, log zerolog.Logger, jobsColl string, jobs []listedJob) error {
	if !slices.ContainsFunc(jobs, func(j listedJob) bool { return len(j.rec.Specs) > 0 }) {
		return nil
	}
	l, err := a.locker(db, nil, log)
	if err != nil {
		return err
	}
	hs, err := l.LocksWithPrefix(ctx, scheduler.DefaultLockPrefix+"@instance/"+jobsColl+"/")
	if err != nil {
		return fmt.Errorf("read the schedulers' presence: %w", err)
	}
	up := make(map[string]bool, len(hs))
	for _, h := range hs {
		if !h.Expired && !h.Released {
			up[h.KeeperID] = true
		}
	}
	for i := range jobs {
		jobs[i].orphaned = jobs[i].rec.Orphaned(func(k string) bool { return up[k] })
	}
	return nil
}

// clusterSpec is the spec the cluster follows (the newest registration's)
// if it differs from the registered one, as a scheduler in loc registers
// it.
func (j listedJob) clusterSpec(loc *time.Location) string {
	if j.registered && j.rec.Spec != "" && j.rec.Spec != scheduler.RegisteredSpecIn(j.spec, loc) {
		return j.rec.Spec
	}
	return ""
}

// next is the next firing of j that will run, after now and after the
// last one claimed, computed from the spec the cluster follows (the
// registered one if none): none while j is removed or paused with no end,
// and none before the end of a pause. why says why there is none.
func (j listedJob) next(now time.Time, loc *time.Location) (next time.Time, why string) {
	r := j.rec
	switch {
	case r.Removed:
		return time.Time{}, "removed"
	case r.Paused != nil && r.Paused.Until.IsZero():
		return time.Time{}, "paused"
	}
	after := now
	if r.LastClaimed.After(after) {
		after = r.LastClaimed
	}
	if p := r.Paused; p != nil && !p.Until.Before(after) {
		// A pause ending at U lets the firings at or after U run.
		after = p.Until.Add(-time.Nanosecond)
	}
	next, err := scheduler.NextFiring(cmp.Or(r.Spec, j.spec), after, loc)
	switch {
	case err != nil:
		return time.Time{}, "invalid spec"
	case next.IsZero():
		return time.Time{}, "no firing"
	}
	return next, ""
}

// state is the STATE of j: paused, triggered, removed, failing, or
// active.
func (j listedJob) state() string {
	r := j.rec
	var parts []string
	if r.Removed {
		parts = append(parts, "removed")
	}
	if p := r.Paused; p != nil {
		s := "paused"
		if !p.Until.IsZero() {
			s += " until " + fmtTime(p.Until)
		}
		if p.Note != "" {
			s += " " + strconv.Quote(p.Note)
		}
		parts = append(parts, s)
	}
	if !r.Triggered.IsZero() {
		parts = append(parts, "triggered at "+fmtTime(r.Triggered))
	}
	if r.FailedInARow > 0 {
		parts = append(parts, fmt.Sprintf("failed %d in a row", r.FailedInARow))
	}
	if j.orphaned {
		parts = append(parts, "orphaned: no instance up registers it, nothing fires it")
	}
	if len(parts) == 0 {
		return "active"
	}
	return strings.Join(parts, "; ")
}

func (j listedJob) json(now time.Time, loc *time.Location, hist []scheduler.Run) jobJSON {
	r := j.rec
	out := jobJSON{Job: r.Name, Spec: j.spec, Registered: j.registered, ClusterSpec: j.clusterSpec(loc),
		Triggered: jsonTime(r.Triggered), Removed: r.Removed, FailedInRow: r.FailedInARow, Orphaned: j.orphaned, Pending: r.Pending,
		LastClaimed: jsonTime(r.LastClaimed), ClaimedBy: r.ClaimedBy}
	if next, _ := j.next(now, loc); !next.IsZero() {
		out.NextFiring = jsonTime(next)
	}
	if p := r.Paused; p != nil {
		out.Paused = &pauseJSON{Note: p.Note, Until: jsonTime(p.Until), At: jsonTime(p.At)}
	}
	if r.LastRun != nil {
		lr := toRunJSON(*r.LastRun)
		out.LastRun = &lr
	}
	for _, h := range hist {
		out.History = append(out.History, toRunJSON(h))
	}
	return out
}

// withRegistered adds the program's jobs (WithJobs) to the records, those
// among names if any are given, sorted by name as the records are.
func (a *app) withRegistered(recs []scheduler.Record, names []string) []listedJob {
	want := func(name string) bool { return len(names) == 0 || slices.Contains(names, name) }
	reg := make(map[string]string, len(a.cfg.jobs))
	for _, j := range a.cfg.jobs {
		reg[j.Name] = j.Spec
	}
	out := make([]listedJob, 0, len(recs)+len(reg))
	have := make(map[string]bool, len(recs))
	for _, r := range recs {
		spec, ok := reg[r.Name]
		if !ok {
			spec = r.Spec
		}
		out = append(out, listedJob{rec: r, spec: spec, registered: ok})
		have[r.Name] = true
	}
	for _, j := range a.cfg.jobs {
		if !have[j.Name] && want(j.Name) {
			out = append(out, listedJob{rec: scheduler.Record{Name: j.Name}, spec: j.Spec, registered: true})
		}
	}
	slices.SortFunc(out, func(x, y listedJob) int { return strings.Compare(x.rec.Name, y.rec.Name) })
	return out
}

// warnBad logs, as warnings, the documents a read skipped because they
// could not be read (lock.BadDocument), whatever their collection: the
// listing goes on without them.
func (a *app) warnBad(log zerolog.Logger, bad []lock.BadDocument) {
	for _, b := range bad {
		log.Warn().Str("collection", b.Collection).Str("id", a.red.oneLine(fmt.Sprint(b.ID))).Str("field", b.Field).
			Str("problem", a.red.oneLine(b.Problem)).Msg("skipped a bad document")
	}
}

// allKnown returns an error naming the jobs of names that are neither in
// the database nor registered. A job whose document could not be read
// (bad) is known: warnBad named it.
func (a *app) allKnown(jobs []listedJob, names []string, coll string, bad []lock.BadDocument) error {
	var unknown []string
	for _, n := range names {
		if !slices.ContainsFunc(jobs, func(j listedJob) bool { return j.rec.Name == n }) &&
			!slices.ContainsFunc(bad, func(b lock.BadDocument) bool { return b.ID == n }) && !slices.Contains(unknown, n) {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	quoted := make([]string, len(unknown))
	for i, n := range unknown {
		quoted[i] = strconv.Quote(n)
	}
	msg := fmt.Sprintf("unknown job %s: not in %s.%s", strings.Join(quoted, ", "), a.g.db, coll)
	if len(unknown) > 1 {
		msg = fmt.Sprintf("unknown jobs %s: not in %s.%s", strings.Join(quoted, ", "), a.g.db, coll)
	}
	if len(a.cfg.jobs) > 0 {
		msg += " nor registered by " + a.name()
	}
	return errors.New(msg)
}

// jobsVerb parses the flags of a jobs command's verb (fs holds its own),
// calls check, if not nil, to check them, and connects. It returns the
// job's name and the jobs collection; disconnect must be called.
func (a *app) jobsVerb(ctx context.Context, fs *flag.FlagSet, args []string, check func() error) (string, *mongo.Collection, func(), error) {
	jobsColl := fs.String("jobs-collection", scheduler.DefaultJobsCollection, "the scheduler's jobs collection")
	pos, err := a.parse(fs, args)
	switch {
	case err != nil:
		return "", nil, nil, err
	case len(pos) != 1:
		return "", nil, nil, usagef("%s needs one job name", fs.Name())
	}
	if err := checkCollection("jobs-collection", *jobsColl); err != nil {
		return "", nil, nil, err
	}
	if check != nil {
		if err := check(); err != nil {
			return "", nil, nil, err
		}
	}
	if _, err := a.logger(); err != nil {
		return "", nil, nil, err
	}
	db, disconnect, err := a.connect(ctx)
	if err != nil {
		return "", nil, nil, err
	}
	return pos[0], db.Collection(*jobsColl), disconnect, nil
}

// controlErr is the error of a control call on job name: bad input is
// bad usage.
func (a *app) controlErr(err error, name string) error {
	switch {
	case errors.Is(err, scheduler.ErrInvalidOption), errors.Is(err, scheduler.ErrInvalidJob):
		return usagef("%v", err)
	case errors.Is(err, scheduler.ErrUnknownJob) &&
		slices.ContainsFunc(a.cfg.jobs, func(j Job) bool { return j.Name == name }):
		return fmt.Errorf("%w (%s registers it, but no instance has started with it yet)", err, a.name())
	}
	return err
}

func (a *app) jobsPause(ctx context.Context, args []string) error {
	fs := a.flagSet("jobs pause")
	note := fs.String("note", "", fmt.Sprintf("why, shown by jobs (at most %d bytes)", scheduler.MaxPauseNote))
	untilText := fs.String("until", "", "resume by itself at TIME: RFC 3339, or a duration from now such as 2h (default: until jobs resume)")
	var until time.Time
	var after time.Duration
	name, coll, done, err := a.jobsVerb(ctx, fs, args, func() (err error) {
		if *untilText != "" {
			until, after, err = parseUntil(*untilText)
		}
		return err
	})
	if err != nil {
		return err
	}
	defer done()
	if after > 0 {
		now, err := mongoutil.ServerTime(ctx, coll.Database())
		if err != nil {
			return fmt.Errorf("read the server's time: %w", err)
		}
		until = now.Add(after)
	}
	if err := scheduler.PauseJob(ctx, coll, name, scheduler.Pause{Note: *note, Until: until}); err != nil {
		return a.controlErr(err, name)
	}
	msg := fmt.Sprintf("paused %q on every instance until resumed", name)
	if !until.IsZero() {
		msg = fmt.Sprintf("paused %q on every instance until %s", name, fmtTime(until))
	}
	fmt.Fprintln(a.stdout, msg)
	return nil
}

// parseUntil reads --until: an RFC 3339 time, or a positive duration from
// now (returned as after).
func parseUntil(s string) (until time.Time, after time.Duration, err error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, 0, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, 0, usagef("--until %q: a duration from now must be positive", s)
		}
		return time.Time{}, d, nil
	}
	return time.Time{}, 0, usagef("--until %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or a duration from now (2h)", s)
}

func (a *app) jobsResume(ctx context.Context, args []string) error {
	name, coll, done, err := a.jobsVerb(ctx, a.flagSet("jobs resume"), args, nil)
	if err != nil {
		return err
	}
	defer done()
	if err := scheduler.ResumeJob(ctx, coll, name); err != nil {
		return a.controlErr(err, name)
	}
	fmt.Fprintf(a.stdout, "resumed %q on every instance from its next firing\n", name)
	return nil
}

func (a *app) jobsTrigger(ctx context.Context, args []string) error {
	name, coll, done, err := a.jobsVerb(ctx, a.flagSet("jobs trigger"), args, nil)
	if err != nil {
		return err
	}
	defer done()
	made, err := scheduler.TriggerJob(ctx, coll, name)
	if err != nil {
		return a.controlErr(err, name)
	}
	if !made {
		fmt.Fprintf(a.stdout, "%q already has a trigger waiting; it runs once\n", name)
		return nil
	}
	// Whether an instance runs is not known here (one in leader-only mode
	// holds no presence lease to find): say what happens either way.
	fmt.Fprintf(a.stdout, "triggered %q: it runs once, on the first instance to poll: within its poll interval "+
		"if one is running, or when one starts\n", name)
	return nil
}

func (a *app) jobsRemove(ctx context.Context, args []string) error {
	name, coll, done, err := a.jobsVerb(ctx, a.flagSet("jobs remove"), args, nil)
	if err != nil {
		return err
	}
	defer done()
	if err := scheduler.RemoveJob(ctx, coll, name); err != nil {
		return a.controlErr(err, name)
	}
	fmt.Fprintf(a.stdout, "removed %q: no instance runs it from its next firing on (%s jobs resume %s undoes it)\n", name, a.name(), name)
	return nil
}
