package main

import (
	"context"
	"fmt"
	"strconv"

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
	Job         string    `json:"job"`
	Spec        string    `json:"spec"`
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
	hist := make(map[string][]scheduler.Run, len(recs))
	if *history > 0 {
		for _, r := range recs {
			if hist[r.Name], err = scheduler.LoadHistory(ctx, db.Collection(*runsColl), r.Name, *history); err != nil {
				return err
			}
		}
	}
	if *asJSON {
		out := make([]jobJSON, 0, len(recs))
		for _, r := range recs {
			j := jobJSON{Job: r.Name, Spec: r.Spec, LastClaimed: jsonTime(r.LastClaimed), ClaimedBy: r.ClaimedBy}
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
	if len(recs) == 0 {
		fmt.Fprintf(a.stdout, "no jobs in %s.%s\n", a.g.db, *jobsColl)
		return nil
	}
	tw := table(a.stdout)
	fmt.Fprintln(tw, "JOB\tSPEC\tLAST CLAIMED\tBY\tLAST RUN\tOUTCOME\tTOOK\tERROR")
	for _, r := range recs {
		run, outcome, took, errText := "-", "-", "-", "-"
		if lr := r.LastRun; lr != nil {
			run, outcome, errText = fmtTime(lr.Start), string(lr.Outcome), orDash(lr.Error)
			if !lr.End.IsZero() {
				took = fmtDur(lr.End.Sub(lr.Start))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Spec, fmtTime(r.LastClaimed), orDash(r.ClaimedBy), run, outcome, took, a.red.oneLine(errText))
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
