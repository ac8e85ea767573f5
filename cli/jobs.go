package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/mongolock/mongolock/scheduler"
)

// runJSON is one run in `jobs --json`.
type runJSON struct {
	Keeper    string `json:"keeper"`
	Scheduled string `json:"scheduled"`
	Start     string `json:"start"`
	End       string `json:"end,omitempty"`
	Outcome   string `json:"outcome"`
	Error     string `json:"error,omitempty"`
	Fence     string `json:"fence"`
}

// jobJSON is one job in `jobs --json`.
type jobJSON struct {
	Job  string `json:"job"`
	Spec string `json:"spec"`
	// Registered: the program registers the job (WithJobs). ClaimedSpec is
	// the spec of the last claim when it differs from the registered one.
	Registered  bool      `json:"registered,omitempty"`
	ClaimedSpec string    `json:"claimedSpec,omitempty"`
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
	}
}

func (a *app) jobs(ctx context.Context, args []string) error {
	fs := a.flagSet("jobs")
	asJSON := fs.Bool("json", false, "print JSON")
	jobsColl := fs.String("jobs-collection", scheduler.DefaultJobsCollection, "the scheduler's jobs collection")
	runsColl := fs.String("runs-collection", scheduler.DefaultRunsCollection, "the scheduler's run history collection")
	history := fs.Int("history", 0, "also show this many recent runs of each job")
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case *history < 0:
		return usagef("--history must not be negative")
	case *jobsColl == "" || *runsColl == "":
		return usagef("empty collection name")
	}
	if _, err := a.logger(); err != nil {
		return err
	}
	db, disconnect, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer disconnect()
	recs, err := scheduler.LoadRecords(ctx, db.Collection(*jobsColl), pos...)
	if err != nil {
		return err
	}
	jobs := a.withRegistered(recs, pos)
	hist := make(map[string][]scheduler.Run, len(jobs))
	if *history > 0 {
		for _, j := range jobs {
			name := j.rec.Name
			if hist[name], err = scheduler.LoadHistory(ctx, db.Collection(*runsColl), name, *history); err != nil {
				return err
			}
		}
	}
	if *asJSON {
		out := make([]jobJSON, 0, len(jobs))
		for _, job := range jobs {
			r := job.rec
			j := jobJSON{Job: r.Name, Spec: job.spec, Registered: job.registered, ClaimedSpec: job.claimedSpec(),
				LastClaimed: jsonTime(r.LastClaimed), ClaimedBy: r.ClaimedBy}
			if r.LastRun != nil {
				lr := toRunJSON(*r.LastRun)
				j.LastRun = &lr
			}
			for _, h := range hist[r.Name] {
				j.History = append(j.History, toRunJSON(h))
			}
			out = append(out, j)
		}
		return a.printJSON(out)
	}
	if len(jobs) == 0 {
		fmt.Fprintf(a.stdout, "no jobs in %s.%s\n", a.g.db, *jobsColl)
		return nil
	}
	tw := table(a.stdout)
	fmt.Fprintln(tw, "JOB\tSPEC\tLAST CLAIMED\tBY\tLAST RUN\tOUTCOME\tTOOK\tERROR")
	for _, job := range jobs {
		r := job.rec
		spec := job.spec
		if c := job.claimedSpec(); c != "" {
			spec += " (claimed as " + c + ")"
		}
		run, outcome, took, errText := "-", "-", "-", "-"
		if lr := r.LastRun; lr != nil {
			run, outcome, errText = fmtTime(lr.Start), string(lr.Outcome), orDash(lr.Error)
			if !lr.End.IsZero() {
				took = fmtDur(lr.End.Sub(lr.Start))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, spec, fmtTime(r.LastClaimed), orDash(r.ClaimedBy), run, outcome, took, a.red.oneLine(errText))
		for _, h := range hist[r.Name] {
			took := "-"
			if !h.End.IsZero() {
				took = fmtDur(h.End.Sub(h.Start))
			}
			fmt.Fprintf(tw, "  run\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", "", fmtTime(h.Scheduled), h.Keeper, fmtTime(h.Start), h.Outcome, took, orDash(a.red.oneLine(h.Error)))
		}
	}
	return tw.Flush()
}

// listedJob is a job the jobs command lists: its record (zero but the name
// if no instance claimed it yet) and the spec to show.
type listedJob struct {
	rec        scheduler.Record
	spec       string // the registered one, else the record's
	registered bool
}

// claimedSpec is the spec of the last claim if it differs from the
// registered one.
func (j listedJob) claimedSpec() string {
	if j.registered && j.rec.Spec != "" && j.rec.Spec != j.spec {
		return j.rec.Spec
	}
	return ""
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
