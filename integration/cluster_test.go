//go:build unix

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/cluster"
	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/scheduler"
)

// Timings of the tests: short, so the suite stays quick.
const (
	testTTL = 2 * time.Second
	// every is the period of the cron jobs.
	every = time.Second
	// startTimeout bounds an instance's start: exec, connect, migrations.
	startTimeout = 30 * time.Second
	// hang bounds a wait for what must happen however loaded the machine
	// (a run, a firing taken over): it only keeps a test gone wrong from
	// waiting for ever. A bound that is itself the property checked is
	// checked as such, not by how long the test waits.
	hang = time.Minute
	// logTail is how many lines of an instance's log a failure shows.
	logTail = 40
)

// testCluster is a test's set of instances on one fresh database: child
// processes (spawn) and in-process ones (startLocal), all reporting to one
// cluster.Cluster. An instance's name is its keeper id.
type testCluster struct {
	*cluster.Cluster
	tb   testing.TB
	be   backend
	db   *mongo.Database // the test's own client, for checks
	base instanceConfig
	// skews, if set, are given to the instances in turn (instanceConfig.Skew),
	// in the order they are configured.
	skews []time.Duration

	mu  sync.Mutex
	seq int
	// failedOK are the instances whose failure the test accepted: their
	// exit status is not an error.
	failedOK map[string]bool
}

// acceptFailure has close take name's failure for what the test expected.
func (c *testCluster) acceptFailure(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failedOK == nil {
		c.failedOK = map[string]bool{}
	}
	c.failedOK[name] = true
}

// newCluster returns an empty cluster whose instances use a lease of ttl and
// the jobs given (each "@every 1s"). Everything it starts is stopped at the
// end of the test.
func newCluster(tb testing.TB, ttl time.Duration, jobs ...string) *testCluster {
	tb.Helper()
	be := useBackend(tb)
	db := mongotest.NewDatabase(tb)
	c := &testCluster{
		Cluster: cluster.New(clockwork.NewRealClock()),
		tb:      tb,
		be:      be,
		db:      db,
		base: instanceConfig{
			URI:      be.URI,
			Database: db.Name(),
			TTL:      ttl,
			Jobs:     jobs,
			Every:    every,
			Work:     ttl / 10,
		},
	}
	tb.Cleanup(c.close)
	return c
}

// config returns the configuration of the next instance.
func (c *testCluster) config(mods ...func(*instanceConfig)) instanceConfig {
	c.mu.Lock()
	c.seq++
	cfg := c.base
	cfg.Keeper = fmt.Sprintf("inst-%02d", c.seq)
	if len(c.skews) > 0 {
		cfg.Skew = c.skews[(c.seq-1)%len(c.skews)]
	}
	c.mu.Unlock()
	for _, m := range mods {
		m(&cfg)
	}
	return cfg
}

// spawn starts an instance as a child process: this test binary, which
// TestMain turns into the instance.
func (c *testCluster) spawn(mods ...func(*instanceConfig)) *cluster.Proc {
	c.tb.Helper()
	cfg := c.config(mods...)
	raw, err := json.Marshal(cfg)
	if err != nil {
		c.tb.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		c.tb.Fatal(err)
	}
	p, err := c.Start(cluster.Spec{
		Name: cfg.Keeper,
		Path: exe,
		Env:  append(os.Environ(), envInstance+"="+string(raw)),
		// SIGKILL, not SIGTERM: a paused instance ignores SIGTERM.
		ParentDeathSignal: syscall.SIGKILL,
	})
	if err != nil {
		c.tb.Fatalf("start instance %s: %v", cfg.Keeper, err)
	}
	return p
}

// spawnAll starts n instances at once; from marks the events before.
func (c *testCluster) spawnAll(n int, mods ...func(*instanceConfig)) (from int, ps []*cluster.Proc) {
	c.tb.Helper()
	from = c.Mark()
	ps = make([]*cluster.Proc, n)
	for i := range ps {
		ps[i] = c.spawn(mods...)
	}
	return from, ps
}

// spawnN starts n instances at once and waits until all are up.
func (c *testCluster) spawnN(n int, mods ...func(*instanceConfig)) []*cluster.Proc {
	c.tb.Helper()
	from, ps := c.spawnAll(n, mods...)
	for _, p := range ps {
		c.awaitUp(from, p.Name())
	}
	return ps
}

// await waits up to d for n events at or after index from that match, and
// returns them. It fails the test, with the events seen, if they do not
// come.
func (c *testCluster) await(from, n int, d time.Duration, what string, match func(cluster.Event) bool) []cluster.Event {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	got, err := c.Await(ctx, from, n, match)
	if err != nil {
		c.tb.Fatalf("waited %v for %d× %s, saw %d; events since:\n%s", d, n, what, len(got), format(c.Since(from)))
	}
	return got
}

// awaitOne is await for a single event.
func (c *testCluster) awaitOne(from int, d time.Duration, what string, match func(cluster.Event) bool) cluster.Event {
	c.tb.Helper()
	return c.await(from, 1, d, what, match)[0]
}

// awaitUp waits until the instance reported it is up, at or after index
// from.
func (c *testCluster) awaitUp(from int, name string) cluster.Event {
	c.tb.Helper()
	return c.awaitOne(from, startTimeout, name+" up", func(e cluster.Event) bool {
		if e.Instance == name && (e.Kind == cluster.EvError || e.Kind == cluster.EvExited) {
			c.tb.Fatalf("instance %s failed: %s\n%s", name, e.Msg, c.logsOf(name))
		}
		return e.Instance == name && e.Kind == cluster.EvReady
	})
}

// awaitLeader waits up to d for a leader task to start at or after index
// from.
func (c *testCluster) awaitLeader(from int, d time.Duration) cluster.Event {
	c.tb.Helper()
	return c.awaitOne(from, d, "a leader", cluster.IsKind(cluster.EvLead))
}

// proc returns the instance process called name.
func (c *testCluster) proc(name string) *cluster.Proc {
	c.tb.Helper()
	p := c.Proc(name)
	if p == nil {
		c.tb.Fatalf("no process %s", name)
	}
	return p
}

// kill sends SIGKILL to the instance and returns when it is gone, and the
// time it exited: nothing it does is later than that.
func (c *testCluster) kill(name string) time.Time {
	c.tb.Helper()
	p := c.proc(name)
	must(c.tb, p.Kill())
	<-p.Done()
	at, _ := p.Exit()
	return at
}

// terminate asks the instance to stop (SIGTERM) and waits for it; it must
// stop cleanly within d.
func (c *testCluster) terminate(p *cluster.Proc, d time.Duration) {
	c.tb.Helper()
	if err := p.Shutdown(d); err != nil {
		c.tb.Errorf("%v\n%s", err, c.logsOf(p.Name()))
	}
}

// must fails tb if err is not nil.
func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// logsOf returns the last lines of what the instance logged.
func (c *testCluster) logsOf(name string) string {
	var lines []string
	for _, e := range c.Events() {
		if e.Kind == cluster.EvLog && e.Instance == name {
			lines = append(lines, e.Msg)
		}
	}
	return "  " + strings.Join(lines[max(0, len(lines)-logTail):], "\n  ")
}

// startLocal starts an instance in this process on client, and stops it at
// the end of the test, before client is disconnected.
func (c *testCluster) startLocal(client *mongo.Client, mods ...func(*instanceConfig)) *instance {
	c.tb.Helper()
	cfg := c.config(mods...)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	log := zerolog.New(zerolog.NewTestWriter(c.tb)).Level(zerolog.WarnLevel)
	in, err := startInstance(ctx, cfg, client, nil, nil, func(e cluster.Event) { c.Add(e) }, log)
	if err != nil {
		c.tb.Fatalf("start instance %s: %v", cfg.Keeper, err)
	}
	c.tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), instanceStopTimeout)
		defer cancel()
		if err := in.stop(ctx); err != nil {
			c.tb.Errorf("stop instance %s: %v", cfg.Keeper, err)
		}
	})
	return in
}

// close stops every instance process, checks they stopped cleanly, and shows
// their logs if the test failed.
func (c *testCluster) close() {
	procs := c.Procs()
	var wg sync.WaitGroup
	errs := make([]error, len(procs))
	for i, p := range procs {
		wg.Go(func() { errs[i] = p.Shutdown(instanceStopTimeout) })
	}
	wg.Wait()
	c.mu.Lock()
	for i, p := range procs {
		if c.failedOK[p.Name()] {
			errs[i] = nil
		}
	}
	c.mu.Unlock()
	c.Wait()
	if err := errors.Join(errs...); err != nil {
		c.tb.Error(err)
	}
	if c.tb.Failed() {
		for _, p := range procs {
			c.tb.Logf("log of %s:\n%s", p.Name(), c.logsOf(p.Name()))
		}
		c.tb.Logf("events:\n%s", format(c.Events()))
	}
}

// checkExclusion checks what every scenario promises: no two leader terms
// overlapped (a killed leader's term ends when it died), and no firing ran
// twice, by the instances' reports and by the database.
func (c *testCluster) checkExclusion() {
	c.tb.Helper()
	assertNoOverlap(c.tb, "leader terms", cluster.LeaderTerms(c.Events(), wallNow()))
	c.checkFirings(time.Time{}, time.Time{})
}

// checkFirings checks that no firing ran twice, and returns the firings that
// ran, from the database. When from is set, it also checks that every
// firing of every job in [from, to] ran.
func (c *testCluster) checkFirings(from, to time.Time) map[cluster.Firing]int {
	c.tb.Helper()
	return c.checkFiringsOf(c.base.Jobs, from, to)
}

// checkFiringsOf is checkFirings for the firings of jobs only, in [from,
// to]; that no firing ran twice is checked for every job.
func (c *testCluster) checkFiringsOf(jobs []string, from, to time.Time) map[cluster.Firing]int {
	c.tb.Helper()
	// The reports first: a job counts its run in the database before it
	// reports it, so every run reported by now is in the read that
	// follows (read the other way round, a run between the two was
	// reported and not yet read: 17:13:17 in a run under stress-ng).
	reported := cluster.Runs(c.Events())
	ran := c.firings()
	for _, k := range cluster.SortedFirings(reported) {
		if n := len(reported[k]); n > 1 || n > ran[k] {
			c.tb.Errorf("firing %s: %d runs reported (by %s), %d in the database", k, n, strings.Join(reported[k], ", "), ran[k])
		}
	}
	twice := 0
	for _, k := range cluster.SortedFirings(ran) {
		if ran[k] > 1 {
			twice++
			c.tb.Errorf("firing %s ran %d times", k, ran[k])
		}
	}
	if from.IsZero() {
		c.tb.Logf("firings: %d ran, %d ran more than once", len(ran), twice)
		return ran
	}
	var missed []string
	expected, once := 0, 0
	overlapped := c.overlapSkipped(jobs)
	for _, f := range cluster.Scheduled(from, to, c.base.Every) {
		for _, job := range jobs {
			expected++
			switch k := cluster.NewFiring(job, f); ran[k] {
			case 0:
				if overlapped[k] {
					expected--
					continue
				}
				missed = append(missed, k.String())
			case 1:
				once++
			}
		}
	}
	if len(missed) > 0 {
		c.tb.Errorf("firings in [%s, %s] that did not run: %s", from.Format(time.TimeOnly), to.Format(time.TimeOnly), strings.Join(missed, ", "))
		c.logRecords(jobs, from, to)
	}
	c.tb.Logf("firings in [%s, %s]: %d expected, %d ran exactly once, %d missed; %d ran more than once",
		from.Format(time.TimeOnly), to.Format(time.TimeOnly), expected, once, len(missed), twice)
	return ran
}

// awaitFirings waits up to d until every firing of the jobs in [from, to]
// ran, by the database: firings taken over or caught up run late. It
// returns when they have, or when d passed; the checks say what is
// missing.
func (c *testCluster) awaitFirings(jobs []string, from, to time.Time, d time.Duration) {
	c.tb.Helper()
	deadline := time.Now().Add(d)
	for {
		ran, all := c.firings(), true
		for _, f := range cluster.Scheduled(from, to, c.base.Every) {
			for _, job := range jobs {
				all = all && ran[cluster.NewFiring(job, f)] > 0
			}
		}
		if all || time.Now().After(deadline) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// firings reads how often each firing ran from the database. Triggered
// runs are not firings: they are left out.
func (c *testCluster) firings() map[cluster.Firing]int {
	c.tb.Helper()
	return c.readFirings(bson.D{{Key: "triggered", Value: bson.D{{Key: "$ne", Value: true}}}})
}

// triggeredRuns reads how often each triggered run of job ran, by the time
// of its trigger, from the database.
func (c *testCluster) triggeredRuns(job string) map[cluster.Firing]int {
	c.tb.Helper()
	return c.readFirings(bson.D{{Key: "triggered", Value: true}, {Key: "job", Value: job}})
}

func (c *testCluster) readFirings(filter bson.D) map[cluster.Firing]int {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cur, err := c.db.Collection(firingsColl).Find(ctx, filter)
	if err != nil {
		c.tb.Fatal(err)
	}
	var docs []struct {
		Job       string    `bson:"job"`
		Scheduled time.Time `bson:"scheduled"`
		N         int       `bson:"n"`     // counted by the test itself (countSpent)
		Calls     []string  `bson:"calls"` // the job's calls (instance.job)
	}
	if err := cur.All(ctx, &docs); err != nil {
		c.tb.Fatal(err)
	}
	out := map[cluster.Firing]int{}
	for _, d := range docs {
		out[cluster.NewFiring(d.Job, d.Scheduled)] = d.N + len(d.Calls)
	}
	return out
}

// overlapSkipped returns the firings of jobs that the scheduler recorded
// as not run because the job's previous run, on schedule, was still going
// (scheduler.ReasonRunGoing: the default overlap policy), where the
// history bears it out: the run of the firing before started before it
// and ended after it, within the instances' skew. On a loaded machine a
// run that starts late may outlast its period; that firing is then
// skipped, rightly.
func (c *testCluster) overlapSkipped(jobs []string) map[cluster.Firing]bool {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var slack time.Duration
	for _, s := range c.skews {
		slack = max(slack, s, -s)
	}
	out := map[cluster.Firing]bool{}
	for _, job := range jobs {
		runs, _, err := scheduler.LoadHistory(ctx, c.db.Collection(scheduler.DefaultRunsCollection), job, 0)
		if err != nil {
			c.tb.Logf("read the history of %s: %v", job, err)
			continue
		}
		byFiring := map[time.Time]scheduler.Run{}
		for _, r := range runs {
			if r.Outcome != scheduler.OutcomeSkipped {
				byFiring[r.Scheduled.UTC()] = r
			}
		}
		recorded := map[time.Time]bool{}
		for _, r := range runs {
			recorded[r.Scheduled.UTC()] = true
			if r.Outcome != scheduler.OutcomeSkipped || r.Reason != scheduler.ReasonRunGoing || r.Count > 1 {
				continue
			}
			f := r.Scheduled.UTC()
			prev, ok := byFiring[f.Add(-c.base.Every)]
			if ok && prev.Start.Before(f.Add(slack)) && prev.End.After(f.Add(-slack)) {
				out[cluster.NewFiring(job, f)] = true
			}
		}
		// A firing skipped so, whose record was lost: the claim of the
		// next firing covered it, and its claimant was killed between
		// that firing's start, which settled the skip, and the skip's
		// record (the scheduler writes it right after the start, before
		// the job is called).
		for at, prev := range byFiring {
			f := at.Add(c.base.Every)
			next, ok := byFiring[f.Add(c.base.Every)]
			if recorded[f] || !ok || !c.killed(next.Keeper) || !prev.Start.Before(f.Add(slack)) || !prev.End.After(f.Add(-slack)) {
				continue
			}
			c.tb.Logf("%s %s: skipped, the previous run still going; its record lost with %s, killed after the start of the next firing",
				job, f.Format(time.TimeOnly), next.Keeper)
			out[cluster.NewFiring(job, f)] = true
		}
	}
	return out
}

// killed reports whether instance name (a keeper id: the instances'
// are their names) exited by SIGKILL.
func (c *testCluster) killed(name string) bool {
	p := c.Proc(name)
	if p == nil || !p.Exited() {
		return false
	}
	_, err := p.Exit()
	return err != nil && strings.Contains(err.Error(), "signal: killed")
}

// logRecords logs, to explain a failure, the documents of jobs and their
// history from from to to, as the scheduler wrote them.
func (c *testCluster) logRecords(jobs []string, from, to time.Time) {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	cur, err := c.db.Collection(scheduler.DefaultJobsCollection).Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: jobs}}}})
	if err == nil {
		var docs []bson.M
		if err = cur.All(ctx, &docs); err == nil {
			for _, d := range docs {
				fmt.Fprintf(&b, "  job document %v\n", d)
			}
		}
	}
	for _, job := range jobs {
		runs, _, herr := scheduler.LoadHistory(ctx, c.db.Collection(scheduler.DefaultRunsCollection), job, 0)
		err = errors.Join(err, herr)
		slices.Reverse(runs)
		for _, r := range runs {
			if !r.Scheduled.Before(from.Add(-time.Second)) && !r.Scheduled.After(to) {
				fmt.Fprintf(&b, "  %s\n", runText(r))
			}
		}
	}
	c.tb.Logf("scheduler records:\n%s(errors: %v)", b.String(), err)
}

// runText is a line of history for a test log.
func runText(r scheduler.Run) string {
	s := fmt.Sprintf("%s %s by %s: %s", r.Job, r.Scheduled.Local().Format("15:04:05.000"), r.Keeper, r.Outcome)
	if r.Outcome == scheduler.OutcomeSkipped {
		s += fmt.Sprintf(" %q", r.Reason)
	}
	if r.Triggered {
		s += " triggered"
	}
	if r.Error != "" {
		s += fmt.Sprintf(" error %q", r.Error)
	}
	return s
}

// history reads the run history of job, oldest first.
func (c *testCluster) history(job string) []scheduler.Run {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runs, _, err := scheduler.LoadHistory(ctx, c.db.Collection(scheduler.DefaultRunsCollection), job, 0)
	if err != nil {
		c.tb.Fatal(err)
	}
	slices.Reverse(runs)
	return runs
}

// holder reads the leader lock's holder from the database.
func (c *testCluster) holder() lock.Holder {
	c.tb.Helper()
	l, err := lock.New(c.db, lock.WithTTL(c.base.TTL))
	if err != nil {
		c.tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := l.Holder(ctx, leaderLock)
	if err != nil {
		c.tb.Fatalf("holder of %s: %v", leaderLock, err)
	}
	return h
}

// openTerms returns the leader terms that have not ended.
func (c *testCluster) openTerms() []cluster.Span {
	var open []cluster.Span
	for _, s := range cluster.LeaderTerms(c.Events(), wallNow()) {
		if s.Open {
			open = append(open, s)
		}
	}
	return open
}

// assertNoOverlap fails tb if two spans overlap, and logs them.
func assertNoOverlap(tb testing.TB, what string, spans []cluster.Span) {
	tb.Helper()
	if bad := cluster.Overlaps(spans); len(bad) > 0 {
		tb.Errorf("%s: two holders at once:\n  %s", what, strings.Join(bad, "\n  "))
	}
	tb.Logf("%s: %d terms, none overlapping", what, len(spans))
	if len(spans) <= 4 {
		for _, s := range spans {
			tb.Logf("  %v", s)
		}
	}
}

// format lists events for a failure message, less the frequent ones.
func format(evs []cluster.Event) string {
	var b strings.Builder
	for _, e := range cluster.Filter(evs, func(e cluster.Event) bool { return e.Kind != cluster.EvWork && e.Kind != cluster.EvLog }) {
		b.WriteString("  ")
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// wallNow is the real clock without its monotonic reading, so that it
// compares with the times other processes report.
func wallNow() time.Time { return time.Now().Round(0) }

// sleep lets the cluster run for d: not synchronisation, a stretch of time
// the scenario observes.
func sleep(d time.Duration) { time.Sleep(d) }

// untilMidPeriod sleeps until halfway between two firings, then periods more,
// so that what the test does next lands away from the claims of a firing.
func untilMidPeriod(periods int) {
	now := time.Now()
	next := now.Truncate(every).Add(every / 2)
	if next.Before(now) {
		next = next.Add(every)
	}
	sleep(next.Sub(now) + time.Duration(periods)*every)
}
