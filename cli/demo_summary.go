package cli

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/mongolock/mongolock/internal/cluster"
	"github.com/mongolock/mongolock/scheduler"
)

// demoSettle is how long an instance must stay up after the firing that
// follows a firing F for it to count as able to run F: a claim, a lock and a
// start take a few round trips. F runs by its own claim, or, if no instance
// tried it when it fell (all were busy, behind or overloaded, or an earlier
// claim was pending), by the claim of a later firing, which covers it. A
// firing an instance claimed but did not start before it went down is taken
// over by another instance and runs late; at the end of the demo every
// instance goes down at once, and nobody is left to.
const demoSettle = time.Second

// failover is a leader the demo killed or stopped, and who took over.
type failover struct {
	from, to string
	kind     string    // "SIGKILL" or "stop"
	at       time.Time // the demo's clock, as the events it received
	took     time.Duration
	done     bool // someone else led afterwards
}

// demoSummary is what the demo proves. ok says whether it held.
type demoSummary struct {
	instances   []string
	runs        int // run events
	perJob      map[string]int
	perInstance map[string]int
	twice       map[cluster.Firing][]string // firings run more than once, and by whom
	due         int                         // firings due while an instance could run them
	// spent are the firings whose start was recorded but whose job was
	// never called (their instance died, or lost its lease, first): not
	// run again, anywhere. Of all firings, due or not.
	spent []noteFiring
	// skipped are the firings due that were recorded as not run by a
	// documented policy (byPolicy), missed those due that were neither
	// run, nor spent, nor so skipped: each with what the history says.
	skipped, missed []noteFiring
	failovers       []failover
	migrations      map[int64][]string // version -> instances that applied it
	migrated        int                // instances whose migrations returned
	problems        []string           // unexpected exits and errors
	terms           []cluster.Span     // leader terms
	overlaps        []string           // pairs of leader terms that overlapped
	// scraped lists the instances whose own /metrics counted the same runs
	// per job as their run events; a mismatch is a problem.
	scraped []string
}

// noteFiring is a firing and what became of it.
type noteFiring struct {
	cluster.Firing
	note string
}

// summarize computes the summary from the demo's log, in receipt order, and
// the history the scheduler recorded.
func summarize(log []cluster.Event, jobs []demoJob, hist demoHistory) demoSummary {
	s := demoSummary{
		perJob:      make(map[string]int),
		perInstance: make(map[string]int),
		twice:       make(map[cluster.Firing][]string),
		migrations:  make(map[int64][]string),
	}
	runsBy := make(map[string]map[string]int) // instance -> job -> run events
	ready := make(map[string]time.Time)
	down := make(map[string]time.Time)
	killed := make(map[string]bool)
	killedAt := make(map[string]time.Time)
	instanceOf := make(map[string]string) // keeper -> instance
	startSeen := make(map[cluster.Firing]string)
	var open []int // failovers waiting for a new leader
	var last time.Time
	for _, ev := range log {
		if ev.T.After(last) {
			last = ev.T
		}
		switch ev.Kind {
		case cluster.EvStart:
			s.instances = append(s.instances, ev.Instance)
			instanceOf[ev.Keeper] = ev.Instance
		case cluster.EvStartSeen:
			startSeen[cluster.NewFiring(ev.Job, ev.Firing)] = ev.Instance
		case cluster.EvMigrated:
			s.migrated++
			for _, v := range ev.Applied {
				s.migrations[v] = append(s.migrations[v], ev.Instance)
			}
		case cluster.EvReady:
			ready[ev.Instance] = ev.T
		case cluster.EvRun:
			s.runs++
			s.perInstance[ev.Instance]++
			if runsBy[ev.Instance] == nil {
				runsBy[ev.Instance] = make(map[string]int)
			}
			runsBy[ev.Instance][ev.Job]++
		case cluster.EvMetrics:
			same := true
			for _, j := range jobs {
				if ev.Runs[j.name] != runsBy[ev.Instance][j.name] {
					same = false
					s.problems = append(s.problems, fmt.Sprintf("%s: its /metrics counted %d runs of %s, its events %d",
						ev.Instance, ev.Runs[j.name], j.name, runsBy[ev.Instance][j.name]))
				}
			}
			if same {
				s.scraped = append(s.scraped, ev.Instance)
			}
		case cluster.EvLead:
			for _, i := range open {
				if f := &s.failovers[i]; ev.Instance != f.from {
					f.to, f.took, f.done = ev.Instance, ev.Received.Sub(f.at), true
				}
			}
			open = slices.DeleteFunc(open, func(i int) bool { return s.failovers[i].done })
		case cluster.EvKilled, cluster.EvStopping:
			if _, ok := down[ev.Instance]; !ok {
				down[ev.Instance] = ev.T
			}
			if ev.Kind == cluster.EvKilled {
				killed[ev.Instance] = true
				if _, ok := killedAt[ev.Instance]; !ok {
					killedAt[ev.Instance] = ev.T
				}
			}
			if ev.Leader {
				kind := "stop"
				if ev.Kind == cluster.EvKilled {
					kind = "SIGKILL"
				}
				s.failovers = append(s.failovers, failover{from: ev.Instance, kind: kind, at: ev.Received})
				open = append(open, len(s.failovers)-1)
			}
		case cluster.EvExited:
			if _, ok := down[ev.Instance]; !ok {
				down[ev.Instance] = ev.T
			}
			if ev.Msg != "" && !killed[ev.Instance] {
				s.problems = append(s.problems, fmt.Sprintf("%s exited unexpectedly: %s", ev.Instance, ev.Msg))
			}
		case cluster.EvError:
			s.problems = append(s.problems, ev.Instance+": "+ev.Msg)
		}
	}
	ran := cluster.Runs(log)
	for k, who := range ran {
		s.perJob[k.Job]++
		if len(who) > 1 {
			s.twice[k] = who
		}
	}
	s.terms = cluster.LeaderTerms(log, last)
	s.overlaps = cluster.Overlaps(s.terms)

	// Spent: started, and never run.
	spent := make(map[cluster.Firing]bool)
	for k, who := range startSeen {
		if len(ran[k]) == 0 {
			spent[k] = true
			s.spent = append(s.spent, noteFiring{k, "started by " + who + ", killed before it called the job"})
		}
	}
	for k, r := range hist.notRun {
		if len(ran[k]) == 0 && !spent[k] {
			who := instanceOf[r.keeper]
			if who == "" {
				who = r.keeper
			}
			spent[k] = true
			s.spent = append(s.spent, noteFiring{k, "started by " + who + ", recorded as " + r.err})
		}
	}
	slices.SortFunc(s.spent, compareNoted)

	// Firings due while some instance had started its scheduler and was not
	// about to go down before the next firing's claim (demoSettle).
	for _, j := range jobs {
		var first, end time.Time
		for name, r := range ready {
			if first.IsZero() || r.Before(first) {
				first = r
			}
			d, ok := down[name]
			if !ok {
				d = last
			}
			if d.After(end) {
				end = d
			}
		}
		if first.IsZero() {
			continue
		}
		for _, f := range cluster.Scheduled(first, end, j.every) {
			covered := false
			for name, r := range ready {
				d, ok := down[name]
				if !ok {
					d = last
				}
				if r.Before(f) && !f.Add(j.every).After(d.Add(-demoSettle)) {
					covered = true
					break
				}
			}
			if !covered {
				continue
			}
			s.due++
			k := cluster.NewFiring(j.name, f)
			if len(ran[k]) > 0 || spent[k] {
				continue
			}
			switch reason, ok := hist.skipReason(k); {
			case ok && byPolicy(reason):
				if dead := deadBefore(k, reason, log, killedAt); dead != "" {
					s.missed = append(s.missed, noteFiring{k, "recorded as not run: " + reason + "; but " + dead})
					continue
				}
				s.skipped = append(s.skipped, noteFiring{k, reason})
			case ok:
				s.missed = append(s.missed, noteFiring{k, "recorded as not run: " + reason})
			default:
				s.missed = append(s.missed, noteFiring{k, "no record of it"})
			}
		}
	}
	slices.SortFunc(s.skipped, compareNoted)
	slices.SortFunc(s.missed, compareNoted)
	return s
}

// deadBefore says, for firing k that the overlap policy skipped for reason
// (the previous run still going), why the facts refute it, or returns "":
// the run before k (the one of the latest firing before it that ran, or
// was left started) was on an instance killed before k fell. Its job's
// lock outlived it, but nothing was going: the documented policy waits
// out a lock whose holder stopped renewing it, and runs the firing late.
func deadBefore(k cluster.Firing, reason string, log []cluster.Event, killedAt map[string]time.Time) string {
	if !strings.HasPrefix(reason, scheduler.ReasonRunGoing) { // ReasonLockHeld too
		return ""
	}
	var prev cluster.Event
	for _, ev := range log {
		if (ev.Kind == cluster.EvRun && !ev.Triggered || ev.Kind == cluster.EvStartSeen) &&
			ev.Job == k.Job && ev.Firing.Before(k.Scheduled) && ev.Firing.After(prev.Firing) {
			prev = ev
		}
	}
	at, ok := killedAt[prev.Instance]
	if prev.Job == "" || !ok || at.After(k.Scheduled) {
		return ""
	}
	return fmt.Sprintf("the run before it, of %s, was on %s, killed at %s",
		cluster.NewFiring(prev.Job, prev.Firing), prev.Instance, at.Local().Format(clockFormat))
}

func compareNoted(a, b noteFiring) int {
	return cmp.Or(a.Scheduled.Compare(b.Scheduled), strings.Compare(a.Job, b.Job))
}

// firings is the number of distinct firings that ran.
func (s demoSummary) firings() int {
	n := 0
	for _, c := range s.perJob {
		n += c
	}
	return n
}

// failures lists what makes the demo fail: a firing that ran twice above all,
// then a firing missed while an instance was up, two leaders at once, a
// migration applied twice, a leader nobody replaced, an instance that
// crashed.
func (s demoSummary) failures() []string {
	var out []string
	if n := len(s.twice); n > 0 {
		out = append(out, fmt.Sprintf("%d firing(s) ran twice", n))
	}
	if n := len(s.missed); n > 0 {
		out = append(out, fmt.Sprintf("%d firing(s) missed while an instance was up", n))
	}
	if n := len(s.overlaps); n > 0 {
		out = append(out, fmt.Sprintf("%d pair(s) of leader terms overlapped", n))
	}
	for _, v := range slices.Sorted(maps.Keys(s.migrations)) {
		if who := s.migrations[v]; len(who) > 1 {
			out = append(out, fmt.Sprintf("migration %d was applied %d times (%s)", v, len(who), strings.Join(who, ", ")))
		}
	}
	for _, f := range s.failovers {
		if !f.done {
			out = append(out, fmt.Sprintf("nobody took over from %s", f.from))
		}
	}
	return append(out, s.problems...)
}

// print writes the summary.
func (s demoSummary) print(w io.Writer, ttl time.Duration) {
	line := func(label, format string, args ...any) {
		fmt.Fprintf(w, "  %-20s %s\n", label+":", fmt.Sprintf(format, args...))
	}
	fmt.Fprintln(w, "\nSummary")
	line("instances", "%d (%s)", len(s.instances), strings.Join(s.instances, ", "))
	var mig []string
	for _, v := range slices.Sorted(maps.Keys(s.migrations)) {
		mig = append(mig, fmt.Sprintf("%d by %s", v, strings.Join(s.migrations[v], " and ")))
	}
	switch {
	case len(mig) > 0:
	case s.migrated > 0:
		mig = []string{"none (already applied)"}
	default:
		mig = []string{"none (no instance got that far)"}
	}
	line("migrations applied", "%s", strings.Join(mig, ", "))
	perJob := make([]string, 0, len(s.perJob))
	for _, j := range slices.Sorted(maps.Keys(s.perJob)) {
		perJob = append(perJob, fmt.Sprintf("%s %d", j, s.perJob[j]))
	}
	perInst := make([]string, 0, len(s.instances))
	for _, i := range s.instances {
		perInst = append(perInst, fmt.Sprintf("%s %d", i, s.perInstance[i]))
	}
	line("firings run", "%d (%s); runs by %s", s.firings(), strings.Join(perJob, ", "), strings.Join(perInst, ", "))
	line("firings run twice", "%d", len(s.twice))
	for _, k := range cluster.SortedFirings(s.twice) {
		fmt.Fprintf(w, "    %s by %s\n", k, strings.Join(s.twice[k], ", "))
	}
	noted := func(fs []noteFiring) {
		for _, f := range fs {
			fmt.Fprintf(w, "    %s: %s\n", f.Firing, f.note)
		}
	}
	line("firings spent", "%d (started, then their instance died or lost its lease before running the job)", len(s.spent))
	noted(s.spent)
	if len(s.spent) > 0 {
		fmt.Fprintln(w, "    (a spent firing's start was recorded, so it may have done its work: it is not run")
		fmt.Fprintln(w, "    again, anywhere. A firing claimed but not started when its claimant died is taken")
		fmt.Fprintln(w, "    over once the claimant's lease lapsed, and runs late.)")
	}
	line("firings skipped", "%d due, as a policy says (previous run still going, job paused)", len(s.skipped))
	noted(s.skipped)
	line("firings misfired", "%d of %d due while an instance was up", len(s.missed), s.due)
	noted(s.missed)
	if len(s.missed) > 0 {
		fmt.Fprintln(w, "    (a firing due while an instance was up starts within the misfire threshold, late if")
		fmt.Fprintln(w, "    its claimant died; unless it is spent or a policy skipped it: these were lost)")
	}
	if len(s.scraped) > 0 {
		line("metrics", "the /metrics of %s counted the runs their events show (killed instances are not scraped)", strings.Join(s.scraped, ", "))
	}
	line("leader terms", "%d", len(s.terms))
	for _, o := range s.overlaps {
		fmt.Fprintf(w, "    %s\n", o)
	}
	line("failovers", "%d", len(s.failovers))
	for _, f := range s.failovers {
		what := fmt.Sprintf("%s %s (leader)", f.kind, f.from)
		if !f.done {
			fmt.Fprintf(w, "    %s  %-22s -> nobody took over\n", f.at.Local().Format(clockFormat), what)
			continue
		}
		fmt.Fprintf(w, "    %s  %-22s -> %s led %d ms later (%.2f x TTL)\n",
			f.at.Local().Format(clockFormat), what, f.to, f.took.Milliseconds(), f.took.Seconds()/ttl.Seconds())
	}
}
