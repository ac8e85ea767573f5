package metrics

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/scheduler"
)

const (
	acqTotal  = "mongolock_lock_acquisitions_total"
	renTotal  = "mongolock_lock_renewals_total"
	lostTotal = "mongolock_lock_leases_lost_total"
	relTotal  = "mongolock_lock_releases_total"
	acqDur    = "mongolock_lock_acquire_duration_seconds"
	renDur    = "mongolock_lock_renew_duration_seconds"
	held      = "mongolock_lock_leases_held"
	leader    = "mongolock_election_leader"
	terms     = "mongolock_election_terms_total"
	gap       = "mongolock_election_failover_gap_seconds"
	changes   = "mongolock_election_leader_changes_total"
	firings   = "mongolock_job_firings_total"
	runDur    = "mongolock_job_run_duration_seconds"
	lateness  = "mongolock_job_start_lateness_seconds"
	lastOK    = "mongolock_job_last_success_timestamp_seconds"
	failures  = "mongolock_job_consecutive_failures"
	retries   = "mongolock_job_retries_total"
	takeovers = "mongolock_job_takeovers_total"
	control   = "mongolock_job_control_total"
	specSuper = "mongolock_job_spec_superseded"
	applied   = "mongolock_migrations_applied_total"
	migFailed = "mongolock_migrations_failed_total"
	migWait   = "mongolock_migrations_lock_wait_seconds"
	clockW    = "mongolock_server_clock_uncertainty_seconds"
	shared    = "mongolock_lock_keeper_id_shared_total"
)

func firing(job, outcome, reason string) string {
	return series(firings, "job_name", job, "outcome", outcome, "reason", reason)
}

// TestObserveMapping feeds one event (after some setup events) to a fresh
// Metrics and checks exactly which series it changed, and by how much.
func TestObserveMapping(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	lease := lock.Event{KeeperID: "k", LockID: "a", Fence: 7}
	with := func(e lock.Event, kind lock.EventKind, f func(*lock.Event)) lock.Event {
		e.Kind = kind
		if f != nil {
			f(&e)
		}
		return e
	}
	acquired := with(lease, lock.Acquired, func(e *lock.Event) { e.Took = 3 * time.Millisecond })
	lost := func(reason string) lock.Event {
		return with(lease, lock.LeaseLost, func(e *lock.Event) { e.Reason, e.Err = reason, lock.ErrLeaseLost })
	}
	job := func(kind lock.EventKind, f func(*lock.Event)) lock.Event {
		return with(lock.Event{Job: "j", LockID: "scheduler.j", Scheduled: at}, kind, f)
	}
	skipped := func(reason string) lock.Event {
		return job(lock.FiringSkipped, func(e *lock.Event) { e.Reason = reason })
	}
	term := func(kind lock.EventKind, keeper string, fence uint64, g time.Duration) lock.Event {
		return lock.Event{Kind: kind, LockID: "e", KeeperID: keeper, Fence: fence, Gap: g}
	}
	migration := func(kind lock.EventKind, reason string) lock.Event {
		return lock.Event{Kind: kind, LockID: "migrations", Migration: "1 x", Reason: reason, Took: 1200 * time.Millisecond}
	}
	ranFailed := job(lock.RunEnded, func(e *lock.Event) {
		e.Outcome, e.Err, e.Took = string(scheduler.OutcomeFailed), errors.New("boom"), time.Second
	})
	skipCase := func(reason, label string) struct {
		name  string
		setup []lock.Event
		event lock.Event
		want  map[string]float64
	} {
		return struct {
			name  string
			setup []lock.Event
			event lock.Event
			want  map[string]float64
		}{"skipped " + label + ": " + reason, nil, skipped(reason),
			map[string]float64{firing("j", "skipped", label): 1}}
	}

	cases := []struct {
		name  string
		setup []lock.Event
		event lock.Event
		want  map[string]float64
	}{
		{"acquired", nil, acquired, map[string]float64{
			series(acqTotal, "result", "acquired"): 1, series(acqDur + "_count"): 1, series(acqDur + "_sum"): .003, series(held): 1}},
		{"refused held elsewhere", nil,
			lock.Event{Kind: lock.Refused, LockID: "a", Reason: "held elsewhere", Took: 2 * time.Millisecond},
			map[string]float64{series(acqTotal, "result", "held_elsewhere"): 1, series(acqDur + "_count"): 1, series(acqDur + "_sum"): .002}},
		{"refused held in this session: no round trip", nil,
			lock.Event{Kind: lock.Refused, LockID: "a", Reason: "held in this session"},
			map[string]float64{series(acqTotal, "result", "held_elsewhere"): 1}},
		{"refused too late", nil,
			lock.Event{Kind: lock.Refused, LockID: "a", Fence: 3, Reason: "acquired too late", Err: lock.ErrNotTrusted, Took: time.Second},
			map[string]float64{series(acqTotal, "result", "too_late"): 1, series(acqDur + "_count"): 1, series(acqDur + "_sum"): 1}},
		{"refused session closed", nil,
			lock.Event{Kind: lock.Refused, LockID: "a", Fence: 3, Reason: "session closed", Err: lock.ErrSessionClosed, Took: time.Second},
			map[string]float64{series(acqTotal, "result", "error"): 1, series(acqDur + "_count"): 1, series(acqDur + "_sum"): 1}},
		{"acquire failed", nil,
			lock.Event{Kind: lock.AcquireFailed, LockID: "a", Err: errors.New("boom"), Took: 500 * time.Millisecond},
			map[string]float64{series(acqTotal, "result", "error"): 1, series(acqDur + "_count"): 1, series(acqDur + "_sum"): .5}},
		{"renewed", []lock.Event{acquired}, with(lease, lock.Renewed, func(e *lock.Event) { e.Took = 4 * time.Millisecond }),
			map[string]float64{series(renTotal, "result", "renewed"): 1, series(renDur + "_count"): 1, series(renDur + "_sum"): .004}},
		{"renew failed", []lock.Event{acquired}, with(lease, lock.RenewFailed, func(e *lock.Event) { e.Attempt, e.Err = 2, errors.New("boom") }),
			map[string]float64{series(renTotal, "result", "failed"): 1}},
		{"lost: taken over", []lock.Event{acquired}, lost("renewal found it taken over or expired"),
			map[string]float64{series(lostTotal, "cause", "taken_over"): 1, series(held): -1}},
		{"lost: renew deadline", []lock.Event{acquired}, lost("renew deadline passed"),
			map[string]float64{series(lostTotal, "cause", "renew_deadline"): 1, series(held): -1}},
		{"lost: abandoned", []lock.Event{acquired}, lost("abandoned"),
			map[string]float64{series(lostTotal, "cause", "abandoned"): 1, series(held): -1}},
		{"lost: other reason", []lock.Event{acquired}, lost("cosmic rays"),
			map[string]float64{series(lostTotal, "cause", "other"): 1, series(held): -1}},
		{"lost twice: counted once in held", []lock.Event{acquired, lost("renew deadline passed")}, lost("abandoned"),
			map[string]float64{series(lostTotal, "cause", "abandoned"): 1}},
		{"released", []lock.Event{acquired}, with(lease, lock.Released, nil),
			map[string]float64{series(relTotal, "result", "released"): 1, series(held): -1}},
		{"release failed", []lock.Event{acquired}, with(lease, lock.Released, func(e *lock.Event) { e.Err = errors.New("boom") }),
			map[string]float64{series(relTotal, "result", "error"): 1, series(held): -1}},
		{"released after lost: not subtracted twice", []lock.Event{acquired, lost("abandoned")}, with(lease, lock.Released, nil),
			map[string]float64{series(relTotal, "result", "released"): 1}},
		{"task abandoned", []lock.Event{acquired, lost("abandoned")},
			with(lease, lock.TaskAbandoned, func(e *lock.Event) { e.Err = lock.ErrTaskDidNotStop }),
			map[string]float64{series("mongolock_lock_tasks_abandoned_total"): 1}},
		{"keeper id shared", nil, lock.Event{Kind: lock.KeeperIDShared, KeeperID: "billing", LockID: "a", Reason: "held by another session with this keeper id"},
			map[string]float64{series(shared): 1}},
		{"released at close", []lock.Event{acquired}, with(lease, lock.Released, func(e *lock.Event) { e.Reason = "session closed" }),
			map[string]float64{series(relTotal, "result", "released"): 1, series(held): -1}},
		{"released, another term", []lock.Event{acquired}, with(lease, lock.Released, func(e *lock.Event) { e.Fence = 8 }),
			map[string]float64{series(relTotal, "result", "released"): 1}},
		{"released, another keeper", []lock.Event{acquired}, with(lease, lock.Released, func(e *lock.Event) { e.KeeperID = "k2" }),
			map[string]float64{series(relTotal, "result", "released"): 1}},

		{"term started with gap", nil, term(lock.TermStarted, "k", 1, 2500*time.Millisecond), map[string]float64{
			series(leader, "election", "e"): 1, series(terms, "election", "e"): 1,
			series(gap+"_count", "election", "e"): 1, series(gap+"_sum", "election", "e"): 2.5}},
		{"term started without gap", nil, term(lock.TermStarted, "k", 1, 0), map[string]float64{
			series(leader, "election", "e"): 1, series(terms, "election", "e"): 1}},
		{"term ended", []lock.Event{term(lock.TermStarted, "k", 1, 0)}, term(lock.TermEnded, "k", 1, 0), map[string]float64{
			series(leader, "election", "e"): -1}},
		{"term ended late, after the next one started", []lock.Event{term(lock.TermStarted, "k", 1, 0), term(lock.TermStarted, "k2", 2, time.Second)},
			term(lock.TermEnded, "k", 1, 0), map[string]float64{}},
		{"leader seen", nil, lock.Event{Kind: lock.LeaderSeen, LockID: "e", Leader: "other"}, map[string]float64{
			series(changes, "election", "e"): 1}},

		{"firing claimed: nothing", nil, job(lock.FiringClaimed, nil), map[string]float64{}},
		{"firing lost", nil, job(lock.FiringLost, nil), map[string]float64{firing("j", "claimed_elsewhere", ""): 1}},
		skipCase(scheduler.ReasonBusy, "busy"),
		skipCase(scheduler.ReasonLockHeld, "lock_held"),
		skipCase(scheduler.ReasonUntrusted, "untrusted"),
		skipCase(scheduler.ReasonUntrusted+"; run not recorded in the history: boom", "untrusted"),
		skipCase(scheduler.ReasonNoLock+"boom", "no_lock"),
		skipCase(scheduler.ReasonNoStart+"; end not recorded: boom", "no_start"),
		skipCase(scheduler.ReasonNoClaim+"boom", "no_claim"),
		skipCase(scheduler.ReasonStopping, "stopping"),
		skipCase(scheduler.ReasonBehind+": 3 firings from this one on not tried here", "behind"),
		skipCase(scheduler.ReasonMisfired, "misfired"),
		skipCase(scheduler.ReasonPaused, "paused"),
		skipCase(scheduler.ReasonRemoved, "removed"),
		skipCase(scheduler.ReasonTakenOver, "taken_over"),
		skipCase(scheduler.ReasonAbsent+": boom", "absent"),
		skipCase(scheduler.ReasonOverloaded+": 12 firings in flight", "overloaded"),
		skipCase("something new", "other"),
		{"firing taken over", nil, job(lock.FiringTakenOver, func(e *lock.Event) { e.Leader = "dead" }),
			map[string]float64{series(takeovers, "job_name", "j"): 1}},
		{"run retrying", nil, job(lock.RunRetrying, func(e *lock.Event) { e.Attempt, e.Err, e.Took = 1, errors.New("boom"), time.Second }),
			map[string]float64{series(retries, "job_name", "j"): 1}},
		{"job paused", nil, job(lock.JobPaused, func(e *lock.Event) { e.Reason = "deploy" }),
			map[string]float64{series(control, "job_name", "j", "action", "pause"): 1}},
		{"job resumed", nil, job(lock.JobResumed, nil), map[string]float64{series(control, "job_name", "j", "action", "resume"): 1}},
		{"job triggered", nil, job(lock.JobTriggered, nil), map[string]float64{series(control, "job_name", "j", "action", "trigger"): 1}},
		{"job removed", nil, job(lock.JobRemoved, nil), map[string]float64{series(control, "job_name", "j", "action", "remove"): 1}},
		{"job spec superseded", nil, job(lock.JobSpecSuperseded, nil), map[string]float64{series(specSuper, "job_name", "j"): 1}},
		{"job spec restored", []lock.Event{job(lock.JobSpecSuperseded, nil)}, job(lock.JobSpecRestored, nil),
			map[string]float64{series(specSuper, "job_name", "j"): -1}},
		{"run started", nil, job(lock.RunStarted, func(e *lock.Event) { e.Lateness, e.Attempt = 1500*time.Millisecond, 1 }),
			map[string]float64{series(lateness+"_count", "job_name", "j"): 1, series(lateness+"_sum", "job_name", "j"): 1.5}},
		{"run started at the lock's second try: not a retry", nil, job(lock.RunStarted, func(e *lock.Event) { e.Lateness, e.Attempt = 2*time.Second, 2 }),
			map[string]float64{series(lateness+"_count", "job_name", "j"): 1, series(lateness+"_sum", "job_name", "j"): 2}},
		{"run succeeded", []lock.Event{ranFailed, ranFailed}, job(lock.RunEnded, func(e *lock.Event) {
			e.Outcome, e.Took, e.At = string(scheduler.OutcomeSucceeded), 250*time.Millisecond, at
		}), map[string]float64{
			firing("j", "succeeded", ""): 1, series(runDur+"_count", "job_name", "j"): 1, series(runDur+"_sum", "job_name", "j"): .25,
			series(lastOK, "job_name", "j"): float64(at.Unix()), series(failures, "job_name", "j"): -2}},
		{"run failed", nil, ranFailed, map[string]float64{
			firing("j", "failed", ""): 1, series(runDur+"_count", "job_name", "j"): 1, series(runDur+"_sum", "job_name", "j"): 1,
			series(failures, "job_name", "j"): 1}},
		{"run ended with another outcome: failed", nil, job(lock.RunEnded, func(e *lock.Event) { e.Outcome = "timed out" }),
			map[string]float64{firing("j", "failed", ""): 1, series(runDur+"_count", "job_name", "j"): 1, series(failures, "job_name", "j"): 1}},
		{"job event without a job: ignored", nil, lock.Event{Kind: lock.RunEnded, Outcome: "failed"}, map[string]float64{}},

		{"migration applied", nil, migration(lock.MigrationApplied, ""), map[string]float64{series(applied, "direction", "up"): 1}},
		{"migration rolled back", nil, migration(lock.MigrationApplied, "down"), map[string]float64{series(applied, "direction", "down"): 1}},
		{"migration failed", nil, migration(lock.MigrationFailed, ""), map[string]float64{series(migFailed, "direction", "up"): 1}},
		{"rollback failed", nil, migration(lock.MigrationFailed, "down"), map[string]float64{series(migFailed, "direction", "down"): 1}},
		{"migration waited", nil, migration(lock.MigrationWaited, "lock acquired"),
			map[string]float64{series(migWait + "_count"): 1, series(migWait + "_sum"): 1.2}},

		{"unknown kind", nil, lock.Event{Kind: 999, LockID: "a", Job: "j"}, map[string]float64{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := newMetrics(t)
			for _, e := range tc.setup {
				m.Observe(e)
			}
			before := gather(t, m)
			m.Observe(tc.event)
			got := diff(before, gather(t, m))
			if len(got) != len(tc.want) {
				t.Errorf("changed %v, want %v", fmtSeries(got), fmtSeries(tc.want))
			}
			for k, w := range tc.want {
				if !near(got[k], w) {
					t.Errorf("%s changed by %v, want %v", k, got[k], w)
				}
			}
		})
	}
}

func fmtSeries(m map[string]float64) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "\n\t%s %v", k, m[k])
	}
	return b.String()
}

// TestSkipReasonsCoverScheduler: every prefix is mapped to a distinct label,
// and no prefix is a prefix of another (the first match would win).
func TestSkipReasonsCoverScheduler(t *testing.T) {
	t.Parallel()
	labels := map[string]bool{"other": true}
	for i, r := range skipReasons {
		if labels[r.label] {
			t.Errorf("label %q twice", r.label)
		}
		labels[r.label] = true
		for j, o := range skipReasons {
			if i != j && strings.HasPrefix(r.prefix, o.prefix) {
				t.Errorf("%q begins with %q", r.prefix, o.prefix)
			}
		}
	}
}

// TestSeriesPresentFromTheStart: the series that do not depend on a label
// value are there at zero from New, those of a job from AddJobs and those of
// an election from AddElections; none of a job's or an election's appears
// before.
func TestSeriesPresentFromTheStart(t *testing.T) {
	t.Parallel()
	m := newMetrics(t)
	s := gather(t, m)
	want := map[string]float64{held: 0}
	for _, r := range []string{"acquired", "held_elsewhere", "too_late", "error"} {
		want[series(acqTotal, "result", r)] = 0
	}
	for _, r := range []string{"renewed", "failed"} {
		want[series(renTotal, "result", r)] = 0
	}
	for _, c := range []string{"taken_over", "renew_deadline", "abandoned", "other"} {
		want[series(lostTotal, "cause", c)] = 0
	}
	for _, r := range []string{"released", "error"} {
		want[series(relTotal, "result", r)] = 0
	}
	for _, d := range []string{"up", "down"} {
		want[series(applied, "direction", d)] = 0
		want[series(migFailed, "direction", d)] = 0
	}
	for _, h := range []string{acqDur, renDur, migWait} {
		want[series(h+"_count")] = 0
		want[series(h+"_sum")] = 0
	}
	want[series(held)] = 0
	want[series("mongolock_lock_tasks_abandoned_total")] = 0
	want[series(shared)] = 0
	delete(want, held)
	if len(s) != len(want) {
		t.Errorf("New exports %v, want %v", fmtSeries(s), fmtSeries(want))
	}
	s.want(t, want)

	m.AddJobs("a", "b")
	m.AddElections("e")
	s = gather(t, m)
	jobWant := map[string]float64{}
	for _, j := range []string{"a", "b"} {
		for _, o := range []string{"succeeded", "failed", "claimed_elsewhere"} {
			jobWant[firing(j, o, "")] = 0
		}
		for i := range skipOther + 1 {
			jobWant[firing(j, "skipped", skipLabel(i))] = 0
		}
		for _, g := range []string{lastOK, failures, retries, takeovers, specSuper} {
			jobWant[series(g, "job_name", j)] = 0
		}
		for _, a := range []string{"pause", "resume", "trigger", "remove"} {
			jobWant[series(control, "job_name", j, "action", a)] = 0
		}
		for _, h := range []string{runDur, lateness} {
			jobWant[series(h+"_count", "job_name", j)] = 0
			jobWant[series(h+"_sum", "job_name", j)] = 0
		}
	}
	for _, n := range []string{leader, terms, changes} {
		jobWant[series(n, "election", "e")] = 0
	}
	jobWant[series(gap+"_count", "election", "e")] = 0
	jobWant[series(gap+"_sum", "election", "e")] = 0
	if got := len(s) - len(want); got != len(jobWant) {
		t.Errorf("AddJobs and AddElections added %d series, want %d", got, len(jobWant))
	}
	s.want(t, jobWant)
	// succeeded, failed, claimed elsewhere, and skipped for each reason.
	if want := 2 * (3 + skipOther + 1); testutil.CollectAndCount(m, firings) != want {
		t.Errorf("%d firing series for two jobs, want %d", testutil.CollectAndCount(m, firings), want)
	}
}

// TestCollectAndCompare reads a scripted sequence through the exposition
// format, as Prometheus would scrape it.
func TestCollectAndCompare(t *testing.T) {
	t.Parallel()
	m := newMetrics(t)
	m.AddElections("e")
	m.Observe(lock.Event{Kind: lock.TermStarted, LockID: "e", KeeperID: "k", Fence: 4})
	m.Observe(lock.Event{Kind: lock.LeaderSeen, LockID: "e", KeeperID: "k", Leader: "k"})
	m.Observe(lock.Event{Kind: lock.TermEnded, LockID: "e", KeeperID: "k", Fence: 4, Err: runner.ErrStalled, Reason: "task stalled"})
	m.Observe(lock.Event{Kind: lock.TermStarted, LockID: "e", KeeperID: "k", Fence: 9, Gap: 3 * time.Second})
	want := `
# HELP mongolock_election_leader 1 while this process leads the election (a runner's lock id), else 0.
# TYPE mongolock_election_leader gauge
mongolock_election_leader{election="e"} 1
# HELP mongolock_election_terms_total Terms this process started as leader.
# TYPE mongolock_election_terms_total counter
mongolock_election_terms_total{election="e"} 2
# HELP mongolock_election_leader_changes_total Changes of leader this process observed, itself included.
# TYPE mongolock_election_leader_changes_total counter
mongolock_election_leader_changes_total{election="e"} 1
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), leader, terms, changes); err != nil {
		t.Error(err)
	}
	if v := testutil.ToFloat64(m.elections.leader.WithLabelValues("e")); v != 1 {
		t.Errorf("leader %v", v)
	}
}

// TestLint: the names, types and help follow Prometheus's conventions
// (promlint), with every series present.
func TestLint(t *testing.T) {
	t.Parallel()
	m := newMetrics(t)
	m.AddJobs("j")
	m.AddElections("e")
	m.WatchLocker(fakeClock{width: time.Millisecond})
	problems, err := testutil.CollectAndLint(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	if got, want := len(gatherFamilies(t, m)), len(m.defs); got != want {
		t.Errorf("%d metric families exported, %d defined", got, want)
	}
}

func gatherFamilies(t *testing.T, m *Metrics) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for k := range gather(t, m) {
		name, _, _ := strings.Cut(k, "{")
		for _, suf := range []string{"_count", "_sum"} {
			if n, ok := strings.CutSuffix(name, suf); ok && slices.ContainsFunc(m.defs, func(d def) bool { return d.name == n }) {
				name = n
			}
		}
		names[name] = true
	}
	return names
}

type fakeClock struct {
	width time.Duration
	none  bool
}

func (c fakeClock) ServerTime() (lo, hi time.Time, ok bool) {
	if c.none {
		return time.Time{}, time.Time{}, false
	}
	lo = time.Now()
	return lo, lo.Add(c.width), true
}

func TestWatchLocker(t *testing.T) {
	t.Parallel()
	m := newMetrics(t)
	if _, ok := gather(t, m)[series(clockW)]; ok {
		t.Error("uncertainty exported with no Locker watched")
	}
	m.WatchLocker(fakeClock{none: true})
	if _, ok := gather(t, m)[series(clockW)]; ok {
		t.Error("uncertainty exported before any estimate")
	}
	m.WatchLocker(fakeClock{width: 30 * time.Millisecond})
	m.WatchLocker(fakeClock{width: 70 * time.Millisecond})
	gather(t, m).want(t, map[string]float64{series(clockW): .07})
}

type fakeScheduler struct{ names []string }

func (f *fakeScheduler) JobNames() []string { return f.names }

func TestWatchSchedulerAddsJobsAtScrape(t *testing.T) {
	t.Parallel()
	m := newMetrics(t)
	s := &fakeScheduler{names: []string{"a"}}
	m.WatchScheduler(s)
	if n := testutil.CollectAndCount(m, lastOK); n != 1 {
		t.Fatalf("%d last-success series, want 1", n)
	}
	s.names = append(s.names, "b") // AddJob after WatchScheduler
	gather(t, m).want(t, map[string]float64{
		series(lastOK, "job_name", "b"): 0, firing("b", "skipped", "lock_held"): 0, series(failures, "job_name", "b"): 0})
}

func TestNamespace(t *testing.T) {
	t.Parallel()
	m := newMetrics(t, WithNamespace("acme_locks"))
	for k := range gather(t, m) {
		if !strings.HasPrefix(k, "acme_locks_lock_") && !strings.HasPrefix(k, "acme_locks_migrations_") {
			t.Errorf("series %s", k)
		}
	}
}

func TestBadOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opt  Option
	}{
		{"nil", nil},
		{"empty namespace", WithNamespace("")},
		{"namespace with a dash", WithNamespace("mongo-lock")},
		{"namespace with a leading digit", WithNamespace("1lock")},
		{"no latency buckets", WithLatencyBuckets()},
		{"decreasing latency buckets", WithLatencyBuckets(1, .5)},
		{"repeated duration buckets", WithDurationBuckets(1, 1)},
		{"NaN bucket", WithDurationBuckets(nanValue())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.opt); !errors.Is(err, ErrInvalidOption) {
				t.Errorf("New: %v, want ErrInvalidOption", err)
			}
		})
	}
	m := newMetrics(t, WithLatencyBuckets(.1, 1), WithDurationBuckets(1, 10, 100))
	m.Observe(lock.Event{Kind: lock.Acquired, Took: 50 * time.Millisecond})
	gather(t, m).want(t, map[string]float64{series(acqDur + "_count"): 1})
}

func nanValue() float64 {
	zero := 0.0
	return zero / zero
}

// TestDocTable: the package documentation's table lists every metric with
// its type and labels.
func TestDocTable(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(strings.TrimPrefix(line, "//"))
		if len(f) >= 2 && strings.HasPrefix(f[0], "mongolock_") {
			rows[f[0]] = f[1:]
		}
	}
	m := newMetrics(t)
	if len(rows) != len(m.defs) {
		t.Errorf("%d metrics in the documentation, %d exported", len(rows), len(m.defs))
	}
	for _, d := range m.defs {
		row, ok := rows[d.name]
		if !ok {
			t.Errorf("%s is not documented", d.name)
			continue
		}
		if row[0] != d.kind {
			t.Errorf("%s documented as a %s, is a %s", d.name, row[0], d.kind)
		}
		doc := strings.Join(row[1:], " ")
		if want := strings.Join(d.labels, ", "); len(d.labels) > 0 && !strings.HasPrefix(doc, want+" ") {
			t.Errorf("%s: documented labels %q, want %q", d.name, doc, want)
		}
	}
}

// TestLeaderEndsWithItsLease: a term ends when its lease is lost or
// released, even before the runner reports TermEnded (RunTaskOnLeader
// reports it only at its next call); a lease of another term or lock
// changes nothing, and no election is made up from lock events.
func TestLeaderEndsWithItsLease(t *testing.T) {
	t.Parallel()
	for _, kind := range []lock.EventKind{lock.LeaseLost, lock.Released} {
		m := newMetrics(t)
		leader := func() float64 { return testutil.ToFloat64(m.elections.leader.WithLabelValues("e")) }
		m.Observe(lock.Event{Kind: lock.TermStarted, LockID: "e", KeeperID: "k", Fence: 4})
		m.Observe(lock.Event{Kind: kind, LockID: "e", KeeperID: "k", Fence: 3})
		m.Observe(lock.Event{Kind: kind, LockID: "e", KeeperID: "other", Fence: 4})
		m.Observe(lock.Event{Kind: kind, LockID: "not-an-election", KeeperID: "k", Fence: 4})
		if v := leader(); v != 1 {
			t.Fatalf("%v of another term: leader %v, want 1", kind, v)
		}
		m.Observe(lock.Event{Kind: kind, LockID: "e", KeeperID: "k", Fence: 4})
		if v := leader(); v != 0 {
			t.Fatalf("%v of the term's lease: leader %v, want 0", kind, v)
		}
		m.Observe(lock.Event{Kind: lock.TermEnded, LockID: "e", KeeperID: "k", Fence: 4})
		if v := leader(); v != 0 {
			t.Fatalf("TermEnded after the lease ended: leader %v", v)
		}
		m.elections.mu.Lock()
		_, made := m.elections.all["not-an-election"]
		m.elections.mu.Unlock()
		if made {
			t.Fatal("a lock event made an election")
		}
	}
}

// TestInvalidUTF8Labels: a job name or election id that is not valid UTF-8
// (a foreign document, a hand-edited spec) is exported with its bad bytes
// escaped, never panicking: the Prometheus client panics on such a label
// value. Two names that differ only in bad bytes stay two series.
func TestInvalidUTF8Labels(t *testing.T) {
	t.Parallel()
	m := newMetrics(t)
	for _, name := range []string{"bad\xff", "bad\xfe"} {
		m.Observe(lock.Event{Kind: lock.RunEnded, Job: name, LockID: "scheduler/" + name,
			Outcome: string(scheduler.OutcomeSucceeded), Took: time.Second})
		m.Observe(lock.Event{Kind: lock.TermStarted, LockID: name, KeeperID: "k", Fence: 1})
	}
	m.WatchScheduler(&fakeScheduler{names: []string{"listed\xff"}})
	gather(t, m).want(t, map[string]float64{
		firing(`bad\xff`, "succeeded", ""):                              1,
		firing(`bad\xfe`, "succeeded", ""):                              1,
		series(lastOK, "job_name", `listed\xff`):                        0,
		series("mongolock_election_terms_total", "election", `bad\xff`): 1,
		series("mongolock_election_terms_total", "election", `bad\xfe`): 1,
	})
}
