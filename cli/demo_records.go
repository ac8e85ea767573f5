package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/cluster"
	"github.com/mongolock/mongolock/scheduler"
)

// What the scheduler recorded in the demo's database, for what the
// instances cannot report themselves: a firing whose start was recorded
// and whose job was never called (spent), and the firings recorded as not
// run, with the reason.

// notRunPrefix begins the error of a run recorded as started whose job
// was not called (scheduler package, "Order of operations").
const notRunPrefix = "not run:"

// demoHistory is the scheduler's history of the demo's jobs.
type demoHistory struct {
	runs  int // records of runs whose job was called
	twice int // firings with more than one start recorded
	// notRun are the firings recorded as started and not run (their
	// instance lost its lease, or stopped, before calling the job): spent.
	notRun map[cluster.Firing]startRecord
	// skipped are the records of firings not run.
	skipped []skipRecord
}

// startRecord is a run's start, recorded by keeper; err is its recorded
// error.
type startRecord struct{ keeper, err string }

// skipRecord records job's firings from from through through as not run,
// for reason.
type skipRecord struct {
	job           string
	from, through time.Time
	reason        string
}

// loadDemoHistory reads the history of jobs.
func loadDemoHistory(ctx context.Context, db *mongo.Database, jobs []demoJob) (demoHistory, error) {
	h := demoHistory{notRun: make(map[cluster.Firing]startRecord)}
	for _, j := range jobs {
		hist, bad, err := scheduler.LoadHistory(ctx, db.Collection(scheduler.DefaultRunsCollection), j.name, 0)
		switch {
		case err != nil:
			return demoHistory{}, err
		case len(bad) > 0: // the demo's own records: a check cannot skip one
			return demoHistory{}, fmt.Errorf("history of %s: %s", j.name, bad[0])
		}
		starts := make(map[cluster.Firing]int)
		for _, r := range hist {
			if r.Triggered {
				continue // not a firing of the schedule
			}
			k := cluster.NewFiring(j.name, r.Scheduled)
			switch {
			case r.Outcome == scheduler.OutcomeSkipped:
				through := r.Through
				if through.IsZero() {
					through = r.Scheduled
				}
				h.skipped = append(h.skipped, skipRecord{job: j.name, from: r.Scheduled, through: through, reason: r.Reason})
				continue
			case strings.HasPrefix(r.Error, notRunPrefix):
				h.notRun[k] = startRecord{keeper: r.Keeper, err: r.Error}
			case r.Outcome == scheduler.OutcomeSpent: // by the job's next run
				h.notRun[k] = startRecord{keeper: r.Keeper, err: "spent: " + r.Error}
			default:
				h.runs++
			}
			if r.Attempt <= 1 { // retries of a run are one start
				starts[k]++
			}
		}
		for _, n := range starts {
			if n > 1 {
				h.twice++
			}
		}
	}
	return h, nil
}

// skipReason is the reason recorded for not running k, if a record covers
// it.
func (h demoHistory) skipReason(k cluster.Firing) (string, bool) {
	for _, r := range h.skipped {
		if r.job == k.Job && !k.Scheduled.Before(r.from) && !k.Scheduled.After(r.through) {
			return r.reason, true
		}
	}
	return "", false
}

// byPolicy reports whether reason is that of a firing a documented policy
// does not run while instances are up: the overlap policy (the previous
// run was still going), a pause or a removal. The misfire policy's reason
// is not among them: while an instance is up, no firing misfires.
func byPolicy(reason string) bool {
	for _, p := range []string{scheduler.ReasonRunGoing, scheduler.ReasonPaused, scheduler.ReasonRemoved} {
		if strings.HasPrefix(reason, p) {
			return true // ReasonLockHeld begins with ReasonRunGoing
		}
	}
	return false
}

// watchStarts reports the runs that the instance name (keeper) left
// recorded as started when it died: its job documents' run records that
// still say running, each as an EvStartSeen event. It reads them from the
// instance's exit for SafetyMargin (TTL/3) several times: a start write
// sent just before the kill may land after the first read, and no other
// instance can start the job (overwriting the record) before the dead
// one's lease of it lapsed, a safety margin at least after it last trusted
// it.
func (d *demo) watchStarts(name, keeper string) {
	if d.db == nil || keeper == "" {
		return
	}
	d.watchers.Go(func() {
		coll := d.db.Collection(scheduler.DefaultJobsCollection)
		var names []string
		for _, j := range demoJobs() {
			names = append(names, j.name)
		}
		seen := make(map[cluster.Firing]bool)
		margin := d.a.g.ttl / 3
		const reads = 5
		for i := range reads {
			if i > 0 {
				<-d.clock.After(margin / (reads - 1))
			}
			ctx, cancel := context.WithTimeout(context.Background(), d.a.g.timeout)
			recs, bad, err := scheduler.LoadRecords(ctx, coll, names...)
			cancel()
			if err == nil && len(bad) > 0 {
				err = fmt.Errorf("%s", bad[0])
			}
			if err != nil {
				d.c.Add(cluster.Event{Kind: cluster.EvLog, Instance: "demo",
					Msg: fmt.Sprintf("could not read the runs %s left started: %s", name, d.a.red.oneLine(err.Error()))})
				continue
			}
			for _, r := range recs {
				run := r.LastRun
				if run == nil || run.Outcome != scheduler.OutcomeRunning || run.Keeper != keeper || run.Triggered {
					continue
				}
				k := cluster.NewFiring(r.Name, run.Scheduled)
				if !seen[k] {
					seen[k] = true
					d.c.Add(cluster.Event{Kind: cluster.EvStartSeen, Instance: name, Job: k.Job, Firing: k.Scheduled, Keeper: keeper})
				}
			}
		}
	})
}
