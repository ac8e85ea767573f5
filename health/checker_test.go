package health_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/health"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/runner"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fixture is a Checker on a fake clock, fed synthetic events.
type fixture struct {
	t   *testing.T
	clk *clockwork.FakeClock
	c   *health.Checker
}

func newFixture(t *testing.T, opts ...health.Option) *fixture {
	t.Helper()
	clk := clockwork.NewFakeClockAt(t0)
	c, err := health.New(append([]health.Option{health.WithClock(clk)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, clk: clk, c: c}
}

// emit observes e, at the fake clock's time unless it has one.
func (f *fixture) emit(e lock.Event) {
	if e.KeeperID == "" {
		e.KeeperID = "k1"
	}
	if e.At.IsZero() {
		e.At = f.clk.Now()
	}
	f.c.Observe(e)
}

// at moves the fake clock to t0+d.
func (f *fixture) at(d time.Duration) { f.clk.Advance(t0.Add(d).Sub(f.clk.Now())) }

// probe serves h and decodes the report, checking the status code,
// headers, and that the body is the report the check function gives.
func (f *fixture) probe(h http.Handler) (int, health.Report) {
	f.t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		f.t.Fatalf("Content-Type %q", ct)
	}
	var rep health.Report
	if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
		f.t.Fatalf("body %q: %v", rec.Body, err)
	}
	if (rec.Code == http.StatusOK) != rep.OK || (rec.Code != http.StatusOK && rec.Code != http.StatusServiceUnavailable) {
		f.t.Fatalf("status %d with report %+v", rec.Code, rep)
	}
	return rec.Code, rep
}

// wantLive checks the liveness handler's answer: ok, or failing with
// check's reason containing each of why.
func (f *fixture) wantLive(ok bool, check string, why ...string) health.Report {
	f.t.Helper()
	return f.want(f.c.LiveHandler(), ok, check, why...)
}

func (f *fixture) want(h http.Handler, ok bool, check string, why ...string) health.Report {
	f.t.Helper()
	code, rep := f.probe(h)
	if rep.OK != ok {
		f.t.Fatalf("at t0+%v: got %d %+v, want ok=%v", f.clk.Since(t0), code, rep, ok)
	}
	ch, found := rep.Checks[check]
	if !found {
		f.t.Fatalf("at t0+%v: no check %q in %+v", f.clk.Since(t0), check, rep)
	}
	if !ok && ch.OK {
		f.t.Fatalf("at t0+%v: check %q passes in failing %+v", f.clk.Since(t0), check, rep)
	}
	for _, w := range why {
		if !strings.Contains(ch.Reason, w) {
			f.t.Fatalf("at t0+%v: check %q reason %q does not say %q", f.clk.Since(t0), check, ch.Reason, w)
		}
	}
	if !ok {
		line := check + ": " + ch.Reason
		found := false
		for _, r := range rep.Reasons {
			found = found || r == line
		}
		if !found {
			f.t.Fatalf("reasons %q lack %q", rep.Reasons, line)
		}
	}
	return rep
}

func TestNewOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opt  health.Option
	}{
		{"nil option", nil},
		{"WithClock", health.WithClock(nil)},
		{"WithRenewSlack", health.WithRenewSlack(-time.Second)},
		{"WithSchedulerLagLimit", health.WithSchedulerLagLimit(0)},
		{"WithStallHold", health.WithStallHold(-1)},
		{"WithCheckTimeout", health.WithCheckTimeout(0)},
	} {
		_, err := health.New(tc.opt)
		if !errors.Is(err, health.ErrInvalidOption) || !errors.Is(err, lock.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", tc.name, err)
		} else if !strings.Contains(err.Error(), strings.TrimPrefix(tc.name, "nil ")) {
			t.Errorf("%s: %v does not name the option", tc.name, err)
		}
	}
	if _, err := health.New(health.WithRenewSlack(0), health.WithStallHold(0)); err != nil {
		t.Errorf("zero slack and hold: %v", err)
	}
}

func TestLiveWithNothingObserved(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rep := f.wantLive(true, health.CheckRenewals, "no renewal failing")
	for _, name := range []string{health.CheckAbandoned, health.CheckStalls} {
		if ch := rep.Checks[name]; !ch.OK {
			t.Fatalf("%s: %+v", name, ch)
		}
	}
	if _, ok := rep.Checks[health.CheckScheduler]; ok {
		t.Fatal("scheduler checked with none watched")
	}
	if rep.Err() != nil || !rep.At.Equal(t0) {
		t.Fatalf("Err %v, At %v", rep.Err(), rep.At)
	}
}

// Renewals fail liveness from the lease's renew deadline plus the slack,
// and pass again at the next successful round trip.
func TestLiveRenewals(t *testing.T) {
	t.Parallel()
	const slack = 5 * time.Second
	f := newFixture(t, health.WithRenewSlack(slack))
	// A renewal fails 2s after the last success; the lease is trusted 8s
	// more (renew deadline at t0+10s).
	f.at(2 * time.Second)
	f.emit(lock.Event{Kind: lock.RenewFailed, LockID: "a", Fence: 1, Remaining: 8 * time.Second, Attempt: 1, Err: errors.New("connection refused")})
	f.wantLive(true, health.CheckRenewals, "keeper k1: renewals failing for 0s (1 in a row, last: connection refused)", `lease "a" trusted for 8s more`)
	f.at(4 * time.Second)
	f.emit(lock.Event{Kind: lock.RenewFailed, LockID: "a", Fence: 1, Remaining: 6 * time.Second, Attempt: 2, Err: errors.New("timeout")})
	f.at(10 * time.Second)
	f.wantLive(true, health.CheckRenewals, "(2 in a row, last: timeout)", `lease "a" untrusted for 0s, within the slack of 5s`)
	f.emit(lock.Event{Kind: lock.LeaseLost, LockID: "a", Fence: 1, Reason: "renew deadline passed", Err: lock.ErrLeaseLost})
	f.at(15*time.Second - time.Millisecond)
	f.wantLive(true, health.CheckRenewals)
	f.at(15 * time.Second)
	rep := f.wantLive(false, health.CheckRenewals,
		"keeper k1: renewals failing for 13s", `lease "a" stopped being trusted 5s ago, past the renew deadline plus 5s`)
	if since := rep.Checks[health.CheckRenewals].Since; !since.Equal(t0.Add(15 * time.Second)) {
		t.Fatalf("Since %v", since)
	}
	if err := rep.Err(); !errors.Is(err, health.ErrUnhealthy) || !strings.Contains(err.Error(), "renewals: keeper k1") {
		t.Fatalf("Err %v", err)
	}
	// Campaigns fail meanwhile: still failing.
	f.at(20 * time.Second)
	f.emit(lock.Event{Kind: lock.AcquireFailed, LockID: "a", Err: errors.New("connection refused")})
	f.wantLive(false, health.CheckRenewals)
	// The store answers a campaign: another instance leads now.
	f.emit(lock.Event{Kind: lock.Refused, LockID: "a", Reason: "held elsewhere"})
	f.wantLive(true, health.CheckRenewals, "no renewal failing")
}

func TestLiveRenewalsRecovery(t *testing.T) {
	t.Parallel()
	recoveries := []lock.Event{
		{Kind: lock.Renewed, LockID: "a", Fence: 1},
		{Kind: lock.Acquired, LockID: "b", Fence: 7},
		{Kind: lock.Refused, LockID: "a", Reason: "held elsewhere"},
		{Kind: lock.Released, LockID: "a", Fence: 1},
		{Kind: lock.LeaseLost, LockID: "a", Fence: 1, Reason: "renewal found it taken over or expired", Err: lock.ErrLeaseLost},
		{Kind: lock.Renewed, KeeperID: "k2", LockID: "z", Fence: 3}, // another Session of the process
		// A process whose leases were lost holds none to renew once the
		// store is back: other answers from the database count.
		{Kind: lock.LeaderSeen, LockID: "a", Leader: "other"},
		{Kind: lock.FiringClaimed, Job: "j", LockID: "job/j"},
		{Kind: lock.FiringLost, Job: "j", LockID: "job/j"},
		{Kind: lock.RunStarted, Job: "j", LockID: "job/j"},
		{Kind: lock.MigrationApplied, Migration: "1 index"},
		{Kind: lock.MigrationWaited, Migration: "1 index"},
	}
	for _, rec := range recoveries {
		t.Run(fmt.Sprintf("%v %s %s", rec.Kind, rec.KeeperID, rec.Reason), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, health.WithRenewSlack(0))
			f.emit(lock.Event{Kind: lock.RenewFailed, LockID: "a", Fence: 1, Remaining: time.Second, Attempt: 1})
			f.at(time.Second)
			f.wantLive(false, health.CheckRenewals, "past the renew deadline plus 0s")
			f.emit(rec)
			f.wantLive(true, health.CheckRenewals)
		})
	}
	// Neither a refusal without a round trip, nor one too late to trust,
	// nor a failed release, shows the store answering in time.
	for _, no := range []lock.Event{
		{Kind: lock.Refused, LockID: "a", Reason: "held in this session"},
		{Kind: lock.Refused, LockID: "a", Fence: 2, Reason: "acquired too late", Err: lock.ErrNotTrusted},
		{Kind: lock.Released, LockID: "a", Fence: 1, Err: errors.New("timeout")},
		{Kind: lock.AcquireFailed, LockID: "a", Err: errors.New("timeout")},
	} {
		f := newFixture(t, health.WithRenewSlack(0))
		f.emit(lock.Event{Kind: lock.RenewFailed, LockID: "a", Fence: 1, Remaining: time.Second, Attempt: 1})
		f.at(time.Second)
		f.emit(no)
		f.wantLive(false, health.CheckRenewals)
	}
}

// A lease lost at its deadline with no failed renewal seen counts from the
// loss; the earliest deadline of several leases counts.
func TestLiveRenewalsDeadlines(t *testing.T) {
	t.Parallel()
	f := newFixture(t, health.WithRenewSlack(time.Second))
	f.emit(lock.Event{Kind: lock.LeaseLost, LockID: "a", Fence: 1, Reason: "renew deadline passed", Err: lock.ErrLeaseLost})
	f.at(time.Second - 1)
	f.wantLive(true, health.CheckRenewals)
	f.at(time.Second)
	f.wantLive(false, health.CheckRenewals, `lease "a" stopped being trusted 1s ago`)

	g := newFixture(t, health.WithRenewSlack(time.Second))
	g.emit(lock.Event{Kind: lock.RenewFailed, LockID: "late", Fence: 1, Remaining: 9 * time.Second, Attempt: 1})
	g.emit(lock.Event{Kind: lock.RenewFailed, LockID: "early", Fence: 2, Remaining: 3 * time.Second, Attempt: 1})
	g.at(4 * time.Second)
	g.wantLive(false, health.CheckRenewals, `lease "early" stopped being trusted 1s ago`)
	// Two Sessions: both named.
	g.emit(lock.Event{KeeperID: "k2", Kind: lock.RenewFailed, LockID: "b", Fence: 1, Remaining: 0, Attempt: 3})
	g.at(5 * time.Second)
	g.wantLive(false, health.CheckRenewals, "keeper k1: ", "keeper k2: renewals failing for 1s (3 in a row)")
}

// An abandoned task fails liveness until its lock is released, which
// happens when it returns.
func TestLiveAbandoned(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		events []lock.Event
	}{
		{"Do", []lock.Event{
			{Kind: lock.LeaseLost, LockID: "a", Fence: 4, Reason: "abandoned", Err: lock.ErrTaskDidNotStop},
			{Kind: lock.TaskAbandoned, LockID: "a", Fence: 4, Err: lock.ErrTaskDidNotStop},
		}},
		{"runner", []lock.Event{
			{Kind: lock.TermEnded, LockID: "a", Fence: 4, Reason: "task did not stop", Err: runner.ErrTaskDidNotStop},
			{Kind: lock.LeaseLost, LockID: "a", Fence: 4, Reason: "abandoned", Err: runner.ErrTaskDidNotStop},
			{Kind: lock.TaskAbandoned, LockID: "a", Fence: 4, Err: runner.ErrTaskDidNotStop},
		}},
		{"runner after a lost lease", []lock.Event{
			{Kind: lock.LeaseLost, LockID: "a", Fence: 4, Reason: "renewal found it taken over or expired", Err: lock.ErrLeaseLost},
			{Kind: lock.TermEnded, LockID: "a", Fence: 4, Reason: "lease lost", Err: lock.ErrLeaseLost},
			{Kind: lock.TaskAbandoned, LockID: "a", Fence: 4, Err: fmt.Errorf("run: %w", runner.ErrTaskDidNotStop)},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.wantLive(true, health.CheckAbandoned, "no task abandoned")
			f.at(time.Second)
			for _, e := range tc.events {
				f.emit(e)
			}
			f.at(time.Hour)
			rep := f.wantLive(false, health.CheckAbandoned,
				`task under "a" (keeper k1, fence 4) ignored its cancelled context and was abandoned 59m59s ago; it has not returned`)
			if since := rep.Checks[health.CheckAbandoned].Since; !since.Equal(t0.Add(time.Second)) {
				t.Fatalf("Since %v", since)
			}
			// Another term's release, or another keeper's, says nothing.
			f.emit(lock.Event{Kind: lock.Released, LockID: "a", Fence: 5})
			f.emit(lock.Event{Kind: lock.Released, LockID: "a", Fence: 4, KeeperID: "k2"})
			f.wantLive(false, health.CheckAbandoned)
			// The task returned: its holder released the lock (the release
			// may fail; the task returned all the same).
			f.emit(lock.Event{Kind: lock.Released, LockID: "a", Fence: 4, Err: errors.New("timeout")})
			f.wantLive(true, health.CheckAbandoned)
		})
	}
}

// Errors of tasks that wrap ErrTaskDidNotStop or ErrStalled (a task that
// ran lock.Session.Do, say) are not abandonments or stalls of their own.
func TestLiveTaskErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	inner := fmt.Errorf("do %q: %w", "inner", lock.ErrTaskDidNotStop)
	f.emit(lock.Event{Kind: lock.RunEnded, Job: "j", LockID: "job-j", Fence: 3, Outcome: "failed", Err: inner})
	f.emit(lock.Event{Kind: lock.TermEnded, LockID: "a", Fence: 2, Reason: "task failed", Err: inner})
	f.emit(lock.Event{Kind: lock.TermEnded, LockID: "a", Fence: 2, Reason: "task failed", Err: fmt.Errorf("x: %w", runner.ErrStalled)})
	f.emit(lock.Event{Kind: lock.LeaseLost, LockID: "a", Fence: 2, Reason: "renewal found it taken over or expired", Err: lock.ErrLeaseLost})
	f.wantLive(true, health.CheckAbandoned, "no task abandoned")
	f.wantLive(true, health.CheckStalls, "no task stalled")
}

// A stall fails liveness until the task returned and the hold passed.
func TestLiveStalls(t *testing.T) {
	t.Parallel()
	const hold = time.Minute
	f := newFixture(t, health.WithStallHold(hold))
	stall := []lock.Event{
		{Kind: lock.TermEnded, LockID: "a", Fence: 2, Reason: "task stalled", Err: runner.ErrStalled},
		{Kind: lock.LeaseLost, LockID: "a", Fence: 2, Reason: "abandoned", Err: runner.ErrStalled},
	}
	for _, e := range stall {
		f.emit(e)
	}
	f.wantLive(false, health.CheckStalls, `task under "a" (keeper k1, fence 2) stalled 0s ago`, "it has not returned")
	// Not an abandoned task: it may still heed its cancellation.
	if rep := f.c.Live(context.Background()); !rep.Checks[health.CheckAbandoned].OK {
		t.Fatalf("a stall counted as abandonment: %+v", rep)
	}
	f.at(10 * time.Second)
	f.emit(lock.Event{Kind: lock.Released, LockID: "a", Fence: 2})
	f.wantLive(false, health.CheckStalls, "stalled 10s ago", "it returned, failing for 50s more")
	f.at(hold - time.Millisecond)
	f.wantLive(false, health.CheckStalls)
	f.at(hold)
	f.wantLive(true, health.CheckStalls, "no task stalled")

	// Past the hold but not returned: failing until it returns.
	g := newFixture(t, health.WithStallHold(0))
	g.emit(stall[0])
	g.at(time.Hour)
	g.wantLive(false, health.CheckStalls, "stalled 1h0m0s ago", "it has not returned")
	g.emit(lock.Event{Kind: lock.Released, LockID: "a", Fence: 2})
	g.wantLive(true, health.CheckStalls)
}

// fakeScheduler is a scheduler whose lag the test sets.
type fakeScheduler struct{ lag atomic.Int64 }

func (s *fakeScheduler) KeeperID() string   { return "k1" }
func (s *fakeScheduler) Lag() time.Duration { return time.Duration(s.lag.Load()) }

func TestLiveScheduler(t *testing.T) {
	t.Parallel()
	f := newFixture(t, health.WithSchedulerLagLimit(10*time.Second))
	s := &fakeScheduler{}
	f.c.WatchScheduler(s)
	f.wantLive(true, health.CheckScheduler, "loop of the scheduler of keeper k1 is 0s behind its earliest due firing")
	s.lag.Store(int64(10 * time.Second))
	f.wantLive(true, health.CheckScheduler)
	s.lag.Store(int64(10*time.Second + time.Millisecond))
	f.wantLive(false, health.CheckScheduler, "is 10.001s behind its earliest due firing, more than the limit of 10s")
	s.lag.Store(0)
	f.wantLive(true, health.CheckScheduler)
}

// fakeMigrator returns the entries the test sets, counting the reads; a
// read blocks while block is open.
type fakeMigrator struct {
	mu      sync.Mutex
	entries []migrations.Entry
	err     error
	reads   int
	block   chan struct{} // nil: no blocking
	entered chan struct{}
}

func (m *fakeMigrator) Status(ctx context.Context) ([]migrations.Entry, error) {
	m.mu.Lock()
	m.reads++
	block, entered := m.block, m.entered
	entries, err := m.entries, m.err
	m.mu.Unlock()
	if entered != nil {
		entered <- struct{}{}
	}
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return nil, fmt.Errorf("find: %w", ctx.Err())
		}
	}
	return entries, err
}

func (m *fakeMigrator) set(entries []migrations.Entry, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entries, m.err = entries, err
}

func (m *fakeMigrator) readCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reads
}

func entry(v int64, desc string, st migrations.State) migrations.Entry {
	e := migrations.Entry{Version: v, Description: desc, State: st}
	if st != migrations.StatePending {
		e.Record = &migrations.Record{Version: v, State: st}
	}
	return e
}

// Readiness fails until every migration is applied, then reads the
// status no more.
func TestReadyMigrations(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	m := &fakeMigrator{}
	f.c.WatchMigrations(m)
	ready := f.c.ReadyHandler()
	failed := entry(3, "users email", migrations.StateFailed)
	failed.Record.Error = "duplicate key"
	m.set([]migrations.Entry{
		entry(1, "lock indexes", migrations.StateApplied),
		entry(2, "run history", migrations.StatePending),
		failed,
		entry(4, "orders", migrations.StateChanged),
		entry(9, "from a newer version", migrations.StateUnknown),
	}, nil)
	f.want(ready, false, health.CheckMigrations,
		"3 of 4 migrations not applied: 2 run history (pending), 3 users email (failed: duplicate key), 4 orders (changed)")
	m.set(nil, errors.New("server selection timeout"))
	f.want(ready, false, health.CheckMigrations, "status not read: server selection timeout")
	m.set([]migrations.Entry{
		entry(1, "lock indexes", migrations.StateApplied),
		entry(2, "run history", migrations.StateRunning),
	}, nil)
	f.want(ready, false, health.CheckMigrations, "1 of 2 migrations not applied: 2 run history (running)")
	m.set([]migrations.Entry{
		entry(1, "lock indexes", migrations.StateApplied),
		entry(2, "run history", migrations.StateApplied),
		entry(9, "from a newer version", migrations.StateUnknown),
	}, nil)
	f.want(ready, true, health.CheckMigrations, "2 migrations applied")
	reads := m.readCount()
	if reads != 4 {
		t.Fatalf("%d reads, want one per probe", reads)
	}
	for range 3 {
		f.want(ready, true, health.CheckMigrations, "2 migrations applied")
	}
	if n := m.readCount(); n != reads {
		t.Fatalf("%d reads after everything was applied, want none", n-reads)
	}
	// A rollback observed: read again.
	m.set([]migrations.Entry{entry(1, "lock indexes", migrations.StateApplied), entry(2, "run history", migrations.StatePending)}, nil)
	f.emit(lock.Event{Kind: lock.MigrationApplied, Migration: "2 run history", Reason: "down"})
	f.want(ready, false, health.CheckMigrations, "2 run history (pending)")
	// Liveness does not read it.
	f.wantLive(true, health.CheckRenewals)
	if _, ok := f.c.Live(context.Background()).Checks[health.CheckMigrations]; ok {
		t.Fatal("liveness checks migrations")
	}
}

// Readiness fails while liveness does, naming both.
func TestReadyIncludesLiveness(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	m := &fakeMigrator{}
	m.set([]migrations.Entry{entry(1, "lock indexes", migrations.StateApplied)}, nil)
	f.c.WatchMigrations(m)
	f.want(f.c.ReadyHandler(), true, health.CheckMigrations)
	f.emit(lock.Event{Kind: lock.TaskAbandoned, LockID: "a", Fence: 1, Err: lock.ErrTaskDidNotStop})
	rep := f.want(f.c.ReadyHandler(), false, health.CheckAbandoned, "ignored its cancelled context")
	if !rep.Checks[health.CheckMigrations].OK || len(rep.Reasons) != 1 {
		t.Fatalf("%+v", rep)
	}
	// With no migrator watched, readiness is liveness.
	g := newFixture(t)
	g.want(g.c.ReadyHandler(), true, health.CheckRenewals)
}

// Each read is bounded by the check timeout, on the checker's clock.
func TestReadyTimeout(t *testing.T) {
	t.Parallel()
	f := newFixture(t, health.WithCheckTimeout(2*time.Second))
	m := &fakeMigrator{block: make(chan struct{}), entered: make(chan struct{}, 1)}
	f.c.WatchMigrations(m)
	done := make(chan health.Report)
	go func() { done <- f.c.Ready(context.Background()) }()
	<-m.entered
	f.clk.Advance(2 * time.Second)
	rep := <-done
	if ch := rep.Checks[health.CheckMigrations]; ch.OK || !strings.Contains(ch.Reason, "status not read within 2s") {
		t.Fatalf("%+v", rep)
	}
}

// Concurrent probes share one read.
func TestReadySharedRead(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	m := &fakeMigrator{block: make(chan struct{}), entered: make(chan struct{}, 10)}
	m.set([]migrations.Entry{entry(1, "lock indexes", migrations.StateApplied)}, nil)
	f.c.WatchMigrations(m)
	const n = 5
	done := make(chan health.Report, n)
	go func() { done <- f.c.Ready(context.Background()) }()
	<-m.entered
	for range n - 1 {
		go func() { done <- f.c.Ready(context.Background()) }()
	}
	// A probe that gives up waiting for the shared read fails on its own.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if rep := f.c.Ready(ctx); rep.OK || !strings.Contains(rep.Checks[health.CheckMigrations].Reason, "context canceled") {
		t.Fatalf("%+v", rep)
	}
	close(m.block)
	for range n {
		if rep := <-done; !rep.OK {
			t.Fatalf("%+v", rep)
		}
	}
	if got := m.readCount(); got != 1 {
		t.Fatalf("%d reads, want 1", got)
	}
}

// fakeRunner is an election whose state the test sets.
type fakeRunner struct {
	lockID, keeper string
	mu             sync.Mutex
	leader         string
	fence          uint64
}

func (r *fakeRunner) LockID() string   { return r.lockID }
func (r *fakeRunner) KeeperID() string { return r.keeper }
func (r *fakeRunner) IsLeader() bool   { r.mu.Lock(); defer r.mu.Unlock(); return r.leader == r.keeper }
func (r *fakeRunner) Leader() string   { r.mu.Lock(); defer r.mu.Unlock(); return r.leader }
func (r *fakeRunner) Fence() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leader != r.keeper {
		return 0
	}
	return r.fence
}
func (r *fakeRunner) set(leader string, fence uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leader, r.fence = leader, fence
}

func TestLeader(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := f.c.LeaderHandler()
	f.want(h, false, health.CheckLeader, "no runner watched")
	r := &fakeRunner{lockID: "billing", keeper: "k1"}
	f.c.WatchRunner(r)
	f.want(h, false, health.CheckLeader, `keeper k1 does not lead "billing": leader unknown`)
	r.set("k2", 0)
	f.want(h, false, health.CheckLeader, `keeper k1 does not lead "billing": k2 does`)
	r.set("k1", 8)
	f.want(h, true, health.CheckLeader, `keeper k1 leads "billing" (fence 8)`)
	// Every watched election must be led.
	r2 := &fakeRunner{lockID: "reports", keeper: "k1"}
	r2.set("k3", 0)
	f.c.WatchRunner(r2)
	f.want(h, false, health.CheckLeader, `keeper k1 leads "billing" (fence 8); keeper k1 does not lead "reports": k3 does`)
	// Leadership is not liveness, nor the other way round.
	f.emit(lock.Event{Kind: lock.TaskAbandoned, LockID: "x", Fence: 1, Err: lock.ErrTaskDidNotStop})
	r2.set("k1", 2)
	rep := f.want(h, true, health.CheckLeader)
	if len(rep.Checks) != 1 {
		t.Fatalf("leader report has %d checks", len(rep.Checks))
	}
}

func TestHandlers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	mux := http.NewServeMux()
	f.c.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	get := func(method, path string) (*http.Response, string) {
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}
	for path, code := range map[string]int{
		health.LivePath: 200, health.HealthzPath: 200, health.ReadyPath: 200, health.LeaderPath: 503,
	} {
		resp, body := get(http.MethodGet, path)
		if resp.StatusCode != code || resp.Header.Get("Content-Type") != "application/json" ||
			resp.Header.Get("Cache-Control") != "no-store" || !json.Valid([]byte(body)) {
			t.Errorf("GET %s: %d %v %q", path, resp.StatusCode, resp.Header, body)
		}
		if resp, body := get(http.MethodHead, path); resp.StatusCode != code || body != "" {
			t.Errorf("HEAD %s: %d %q", path, resp.StatusCode, body)
		}
		if resp, _ := get(http.MethodPost, path); resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("POST %s: %d %v", path, resp.StatusCode, resp.Header)
		}
	}
	// The body as documented: ok, reasons, checks by name with since.
	f.emit(lock.Event{Kind: lock.TaskAbandoned, LockID: "a", Fence: 4, Err: lock.ErrTaskDidNotStop})
	resp, body := get(http.MethodGet, health.LivePath)
	var raw map[string]any
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		t.Fatal(err)
	}
	checks, _ := raw["checks"].(map[string]any)
	abandoned, _ := checks["abandoned_tasks"].(map[string]any)
	renewals, _ := checks["renewals"].(map[string]any)
	reasons, _ := raw["reasons"].([]any)
	if resp.StatusCode != 503 || raw["ok"] != false || len(reasons) != 1 ||
		abandoned["ok"] != false || abandoned["since"] != "2026-01-02T03:04:05Z" ||
		renewals["ok"] != true || renewals["since"] != nil {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}
