package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/simdb"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/scheduler"
)

// instance is one process of a cluster: its own client, clock, Locker,
// Session and Scheduler.
type instance struct {
	keeper  string
	off     time.Duration
	db      *mongo.Database
	locker  *lock.Locker
	session *lock.Session
	s       *scheduler.Scheduler
	events  *eventLog
	fault   fault // nil unless proxied or simulated
}

// fault breaks the network between one instance and the server:
// *mongotest.Fault for the test server, *mongotest.SimFault for the
// simulated one.
type fault interface {
	Cut()
	Silence()
	Restore()
}

type clusterConfig struct {
	skews   []time.Duration
	ttl     time.Duration
	proxied bool // the test breaks the instances' connections
	// sim, if set, is the simulated server the instances use (in a
	// synctest bubble), each through a link a mongotest.SimFault breaks,
	// whose commands take simRTT there and back.
	sim  *simdb.Server
	opts []scheduler.Option
}

// simRTT is how long a command takes to the simulated server and back.
const simRTT = 2 * time.Millisecond

// simTest runs f in a synctest bubble, in parallel with other tests, with
// a new simulated server. The tests whose checks are timings, or need
// every lease renewed in time, run there: a loaded machine stretches round
// trips to the test server without bound, and the bubble's time only
// moves when every goroutine waits.
func simTest(t *testing.T, f func(t *testing.T, srv *simdb.Server)) {
	t.Helper()
	t.Parallel()
	synctest.Test(t, func(t *testing.T) { f(t, simdb.NewServer(simdb.MongoDB, 0)) })
}

// newCluster makes one instance per skew on database dbName. Each is
// stopped, and its Session closed, at the end of the test if the test did
// not do it.
func newCluster(t *testing.T, dbName string, cc clusterConfig) []*instance {
	t.Helper()
	out := make([]*instance, len(cc.skews))
	for i, off := range cc.skews {
		in := &instance{keeper: string(rune('A' + i)), off: off, events: &eventLog{}}
		switch {
		case cc.sim != nil:
			f := mongotest.NewSimFault(simRTT)
			client, err := cc.sim.NewLink(in.keeper, f.Plan).Connect(nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
			in.db, in.fault = client.Database(dbName), f
		case cc.proxied:
			client, f := mongotest.NewProxiedClient(t)
			in.db, in.fault = mongotest.Database(t, client, dbName), f
		default:
			in.db = mongotest.Database(t, mongotest.NewClient(t), dbName)
		}
		log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel).With().Str("instance", in.keeper).Logger()
		var err error
		// The clock is given once, to the Locker; the Session and the
		// Scheduler use it.
		in.locker, err = lock.New(in.db, lock.WithTTL(cc.ttl), lock.WithClock(mongotest.SkewedClock(off)))
		if err != nil {
			t.Fatal(err)
		}
		in.session, err = lock.NewSession(in.locker, lock.WithKeeperID(in.keeper), lock.WithReleaseTimeout(time.Second),
			lock.WithSessionLogger(log), lock.WithObserver(in.events))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := in.session.Close(); err != nil && !cc.proxied {
				t.Errorf("close session of %s: %v", in.keeper, err)
			}
		})
		opts := append([]scheduler.Option{scheduler.WithOpTimeout(time.Second)}, cc.opts...)
		in.s, err = scheduler.New(in.db, in.session, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stopAll(t, in) })
		out[i] = in
	}
	return out
}

// eventLog keeps the scheduler's events of one instance.
type eventLog struct {
	mu     sync.Mutex
	events []lock.Event
	hook   func(lock.Event) // if set, called with each, synchronously
}

func (l *eventLog) Observe(e lock.Event) {
	if e.Job == "" {
		return // the Session's own
	}
	l.mu.Lock()
	l.events = append(l.events, e)
	hook := l.hook
	l.mu.Unlock()
	if hook != nil {
		hook(e)
	}
}

// onEvent sets a function called with every later event, on the goroutine
// that emits it: between a claim and what follows it, for FiringClaimed.
func (l *eventLog) onEvent(fn func(lock.Event)) {
	l.mu.Lock()
	l.hook = fn
	l.mu.Unlock()
}

func (l *eventLog) snapshot() []lock.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

func startAll(t *testing.T, ins ...*instance) {
	t.Helper()
	for _, in := range ins {
		if err := in.s.Start(); err != nil {
			t.Fatal(err)
		}
	}
}

// stopAll stops the instances concurrently and checks that Stop returned.
func stopAll(t *testing.T, ins ...*instance) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, in := range ins {
		wg.Go(func() {
			if err := in.s.Stop(ctx); err != nil {
				t.Errorf("stop %s: %v", in.keeper, err)
			}
		})
	}
	wg.Wait()
}

// assertNoLocks checks that no job lock is held by anyone.
func assertNoLocks(t *testing.T, in *instance, jobs ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, j := range jobs {
		h, err := in.locker.Holder(ctx, in.s.LockID(j))
		if !errors.Is(err, lock.ErrNotHeld) && !h.Expired {
			t.Errorf("lock of %q after Stop: %+v, %v", j, h, err)
		}
	}
}

// entry is a run as the job itself saw it, in real time.
type entry struct {
	job        string
	scheduled  time.Time
	keeper     string
	fence      uint64
	start, end time.Time
	cause      error // of the job's context when it returned
}

// ledger records every run of every job in the test process.
type ledger struct {
	mu      sync.Mutex
	entries []*entry
}

func (l *ledger) begin(ctx context.Context, job string) *entry {
	run, _ := scheduler.RunFromContext(ctx)
	e := &entry{job: job, scheduled: run.Scheduled, keeper: run.Keeper, fence: run.Fence, start: time.Now()}
	l.mu.Lock()
	l.entries = append(l.entries, e)
	l.mu.Unlock()
	return e
}

func (l *ledger) end(ctx context.Context, e *entry) {
	l.mu.Lock()
	e.end, e.cause = time.Now(), context.Cause(ctx)
	l.mu.Unlock()
}

func (l *ledger) snapshot() []entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]entry, len(l.entries))
	for i, e := range l.entries {
		out[i] = *e
	}
	return out
}

func (l *ledger) find(pred func(entry) bool) (entry, bool) {
	for _, e := range l.snapshot() {
		if pred(e) {
			return e, true
		}
	}
	return entry{}, false
}

// waitFor polls the ledger until pred matches an entry.
func (l *ledger) waitFor(t *testing.T, within time.Duration, what string, pred func(entry) bool) entry {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if e, ok := l.find(pred); ok {
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; runs: %v", within, what, l.snapshot())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e entry) String() string {
	return fmt.Sprintf("%s@%s by %s [%s..%s] %v", e.job, e.scheduled.Format("15:04:05.000"), e.keeper,
		e.start.Format("15:04:05.000"), e.end.Format("15:04:05.000"), e.cause)
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// onceEach fails t for every firing the ledger's entries ran twice, and
// returns them by firing (job@scheduled).
func onceEach(t *testing.T, entries []entry) map[string]entry {
	t.Helper()
	seen := map[string]entry{}
	for _, e := range entries {
		key := e.job + "@" + e.scheduled.Format(time.RFC3339Nano)
		if prev, dup := seen[key]; dup {
			t.Errorf("firing ran twice: %v and %v", prev, e)
		}
		seen[key] = e
	}
	return seen
}

// ledgerJobs are the jobs of the cluster tests: name to spec.
var ledgerJobs = map[string]string{"every": "@every 1s", "even": "*/2 * * * * *"}

// newLedgerCluster is the cluster of the ledger tests: three instances on
// dbName (of srv, if not nil) whose clocks are -400ms, 0 and +400ms off,
// a TTL of 2s, with the jobs of addLedgerJobs writing to the ledger.
func newLedgerCluster(t *testing.T, dbName string, srv *simdb.Server) ([]*instance, *ledger) {
	t.Helper()
	ins := newCluster(t, dbName, clusterConfig{sim: srv,
		skews: []time.Duration{-400 * time.Millisecond, 0, 400 * time.Millisecond},
		ttl:   2 * time.Second,
	})
	led := &ledger{}
	addLedgerJobs(t, led, ins)
	return ins, led
}

// addLedgerJobs adds to every instance the two jobs of the cluster tests,
// "every" (@every 1s) and "even" (*/2 * * * * *), which take a millisecond
// and write what ran to led.
func addLedgerJobs(t *testing.T, led *ledger, ins []*instance) {
	t.Helper()
	for _, in := range ins {
		for name, spec := range ledgerJobs {
			err := in.s.AddJob(name, spec, func(ctx context.Context) error {
				e := led.begin(ctx, name)
				time.Sleep(time.Millisecond) // the job's work
				led.end(ctx, e)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestClusterRunsEveryFiringOnce runs three instances whose clocks are
// -400ms, 0 and +400ms off, with the same two jobs that take a millisecond.
// Every firing while all were up must run exactly once, and none ever twice.
// On the simulated server, in a synctest bubble.
func TestClusterRunsEveryFiringOnce(t *testing.T) {
	simTest(t, func(t *testing.T, srv *simdb.Server) {
		ins, led := newLedgerCluster(t, "app", srv)
		startAll(t, ins...)
		allUp := time.Now()
		<-time.After(9 * time.Second)
		down := time.Now()
		stopAll(t, ins...)

		entries := led.snapshot()
		seen := onceEach(t, entries)
		perKeeper := map[string]int{}
		for _, e := range entries {
			perKeeper[e.keeper]++
			if e.cause != nil {
				t.Errorf("run cancelled: %v", e)
			}
		}
		// Firings every instance was up for, at every instance's (skewed) time.
		from, to := allUp.Add(500*time.Millisecond), down.Add(-500*time.Millisecond)
		expected := 0
		for name, spec := range ledgerJobs {
			period := time.Second
			if spec != "@every 1s" {
				period = 2 * time.Second
			}
			for f := from.Truncate(period).Add(period); f.Before(to); f = f.Add(period) {
				expected++
				if _, ok := seen[name+"@"+f.Format(time.RFC3339Nano)]; !ok {
					t.Errorf("firing %s@%s did not run", name, f.Format("15:04:05"))
				}
			}
		}
		if expected < 10 {
			t.Fatalf("only %d firings in the window; the test ran too short", expected)
		}
		t.Logf("%d runs (%d firings in the full window), per keeper %v", len(entries), expected, perKeeper)

		// MongoDB agrees with the ledger.
		ctx := testCtx(t, 20*time.Second)
		for name := range ledgerJobs {
			hist, err := ins[0].s.History(ctx, name, 0)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, h := range hist {
				e, ok := seen[name+"@"+h.Scheduled.Format(time.RFC3339Nano)]
				if !ok || e.keeper != h.Keeper || e.fence != h.Fence || h.Outcome != scheduler.OutcomeSucceeded {
					t.Errorf("history %+v, ledger %v", h, e)
				}
				n++
			}
			var inLedger int
			for _, e := range entries {
				if e.job == name {
					inLedger++
				}
			}
			if n != inLedger {
				t.Errorf("%s: %d runs in history, %d in the ledger", name, n, inLedger)
			}
		}
		infos, err := ins[1].s.Jobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range infos {
			if in.LastRun == nil || in.LastRun.Outcome != scheduler.OutcomeSucceeded || in.LastClaimed.Before(in.LastRun.Scheduled) {
				t.Errorf("Jobs: %+v %+v", in, in.LastRun)
			}
		}
		assertEvents(t, ins, entries)
		assertNoLocks(t, ins[0], "every", "even")
	})
}

// TestClusterNeverRunsAFiringTwice runs the cluster of
// TestClusterRunsEveryFiringOnce on the test server, until ten runs: no
// firing ran twice, no two instances claimed one, and what the server
// recorded is what ran. Only what holds however loaded the machine is
// checked: there, renewals may take longer than a lease's renew deadline,
// and a firing may then be skipped (its record in the history says so) or
// a run cut short.
func TestClusterNeverRunsAFiringTwice(t *testing.T) {
	t.Parallel()
	ins, led := newLedgerCluster(t, mongotest.NewDatabase(t).Name(), nil)
	startAll(t, ins...)
	led.waitFor(t, 2*time.Minute, "ten runs", func(entry) bool { return len(led.snapshot()) >= 10 })
	stopAll(t, ins...)

	entries := led.snapshot()
	seen := onceEach(t, entries)
	ctx := testCtx(t, time.Minute)
	for name := range ledgerJobs {
		hist, err := ins[0].s.History(ctx, name, 0)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, h := range hist {
			if h.Outcome == scheduler.OutcomeSkipped {
				continue // firings not run (on a loaded machine, say)
			}
			if h.Outcome == scheduler.OutcomeFailed && strings.HasPrefix(h.Error, "not run: ") {
				// Spent (the package doc: a start whose reply was lost, or
				// a lease lost before the call): never run.
				if e, ok := seen[name+"@"+h.Scheduled.Format(time.RFC3339Nano)]; ok {
					t.Errorf("history %+v says not run, ledger %v", h, e)
				}
				continue
			}
			if e, ok := seen[name+"@"+h.Scheduled.Format(time.RFC3339Nano)]; !ok || e.keeper != h.Keeper || e.fence != h.Fence {
				t.Errorf("history %+v, ledger %v", h, e)
			}
			n++
		}
		inLedger := 0
		for _, e := range entries {
			if e.job == name {
				inLedger++
			}
		}
		if n != inLedger {
			t.Errorf("%s: %d runs in history, %d in the ledger", name, n, inLedger)
		}
	}
	claims := map[string][]string{}
	for _, in := range ins {
		for _, e := range in.events.snapshot() {
			if e.Kind == lock.FiringClaimed {
				key := e.Job + "@" + e.Scheduled.Format(time.RFC3339Nano)
				claims[key] = append(claims[key], in.keeper)
			}
		}
	}
	for key, by := range claims {
		if len(by) > 1 {
			t.Errorf("firing %s claimed by %v", key, by)
		}
	}
	t.Logf("%d runs, %d firings claimed", len(entries), len(claims))
}

// assertEvents checks the scheduler's events of a cluster against the
// runs the jobs saw: each firing is claimed by at most one instance; each
// run starts and ends once, on its keeper, with its fence; and each
// instance reports each firing it tried exactly once as lost, skipped or
// ended.
func assertEvents(t *testing.T, ins []*instance, entries []entry) {
	t.Helper()
	type firingID struct {
		job string
		at  int64
	}
	idOf := func(job string, f time.Time) firingID { return firingID{job, f.UnixNano()} }
	claims := map[firingID][]string{}
	started := map[firingID][]lock.Event{}
	ended := map[firingID][]lock.Event{}
	for _, in := range ins {
		ends := map[firingID]int{}
		for _, e := range in.events.snapshot() {
			id := idOf(e.Job, e.Scheduled)
			if e.KeeperID != in.keeper || e.LockID != in.s.LockID(e.Job) || e.At.IsZero() {
				t.Errorf("%s: event %v %+v", in.keeper, e.Kind, e)
			}
			switch e.Kind {
			case lock.FiringClaimed:
				claims[id] = append(claims[id], in.keeper)
			case lock.RunStarted:
				started[id] = append(started[id], e)
			case lock.RunEnded:
				ended[id] = append(ended[id], e)
				ends[id]++
			case lock.FiringLost, lock.FiringSkipped:
				ends[id]++
			}
		}
		for id, n := range ends {
			if n != 1 {
				t.Errorf("%s: firing %s@%s reported %d times", in.keeper, id.job, time.Unix(0, id.at).Format("15:04:05.000"), n)
			}
		}
	}
	for id, by := range claims {
		if len(by) > 1 {
			t.Errorf("firing %s@%s claimed by %v", id.job, time.Unix(0, id.at).Format("15:04:05.000"), by)
		}
	}
	for _, e := range entries {
		id := idOf(e.job, e.scheduled)
		s, en := started[id], ended[id]
		if len(s) != 1 || len(en) != 1 || s[0].KeeperID != e.keeper || s[0].Fence != e.fence || en[0].Fence != e.fence ||
			en[0].Outcome != string(scheduler.OutcomeSucceeded) || en[0].Err != nil || !slices.Equal(claims[id], []string{e.keeper}) {
			t.Errorf("run %v: claimed by %v, started %+v, ended %+v", e, claims[id], s, en)
		}
		delete(started, id)
	}
	for id, s := range started {
		t.Errorf("run started with no run seen: %s@%v %+v", id.job, time.Unix(0, id.at), s)
	}
}

// TestLongJobRunsOnceAcrossCluster runs a job for three lease TTLs: it must
// keep its lease, and no instance may start the job meanwhile.
// On the simulated server, in a synctest bubble.
func TestLongJobRunsOnceAcrossCluster(t *testing.T) {
	simTest(t, func(t *testing.T, srv *simdb.Server) {
		const ttl = time.Second
		dbName := "app"
		ins := newCluster(t, dbName, clusterConfig{sim: srv,
			skews: []time.Duration{-300 * time.Millisecond, 0, 300 * time.Millisecond},
			ttl:   ttl,
		})
		var led ledger
		var long atomic.Bool
		for _, in := range ins {
			err := in.s.AddJob("long", "@every 1s", func(ctx context.Context) error {
				e := led.begin(ctx, "long")
				defer led.end(ctx, e)
				if long.CompareAndSwap(false, true) {
					select {
					case <-time.After(3 * ttl):
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		startAll(t, ins...)
		first := led.waitFor(t, 5*time.Second, "the long run", func(e entry) bool { return true })
		byKeeper := map[string]*instance{}
		for _, in := range ins {
			byKeeper[in.keeper] = in
		}
		// While it runs, its lock stays with its keeper.
		ctx := testCtx(t, 30*time.Second)
		for time.Since(first.start) < 3*ttl-200*time.Millisecond {
			h, err := ins[0].locker.Holder(ctx, ins[0].s.LockID("long"))
			if err != nil || h.KeeperID != first.keeper || h.Fence != first.fence {
				t.Fatalf("holder during the long run: %+v %v, want %s with fence %d", h, err, first.keeper, first.fence)
			}
			<-time.After(100 * time.Millisecond)
		}
		longRun := led.waitFor(t, 5*time.Second, "the long run to end", func(e entry) bool {
			return e.scheduled.Equal(first.scheduled) && !e.end.IsZero()
		})
		next := led.waitFor(t, 3*time.Second, "the run after", func(e entry) bool { return e.scheduled.After(first.scheduled) })
		stopAll(t, ins...)

		if longRun.cause != nil || longRun.end.Sub(longRun.start) < 3*ttl {
			t.Fatalf("long run %v: cut short", longRun)
		}
		for _, e := range led.snapshot() {
			if e.scheduled.Equal(longRun.scheduled) {
				continue
			}
			if !e.start.After(longRun.end) {
				t.Errorf("%v started during the long run %v", e, longRun)
			}
		}
		// Firings during the run were skipped, the first one after it ran.
		if next.scheduled.Before(longRun.end.Add(-time.Second)) || next.start.Sub(longRun.end) > 2500*time.Millisecond {
			t.Errorf("next run %v after long run %v", next, longRun)
		}
		assertNoLocks(t, ins[0], "long")
	})
}

// TestKilledInstanceFailsOver cuts the connection of the instance running a
// job: its job is cancelled before its lease could expire, and a later
// firing runs on another instance.
// On the simulated server, in a synctest bubble.
func TestKilledInstanceFailsOver(t *testing.T) {
	simTest(t, func(t *testing.T, srv *simdb.Server) {
		const ttl = time.Second
		dbName := "app"
		ins := newCluster(t, dbName, clusterConfig{sim: srv, skews: []time.Duration{0, 0, 0}, ttl: ttl, proxied: true})
		var led ledger
		release := make(chan struct{})
		for _, in := range ins {
			err := in.s.AddJob("work", "@every 1s", func(ctx context.Context) error {
				e := led.begin(ctx, "work")
				defer led.end(ctx, e)
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-release:
					return nil
				}
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		startAll(t, ins...)
		first := led.waitFor(t, 5*time.Second, "a run", func(e entry) bool { return true })
		var victim *instance
		for _, in := range ins {
			if in.keeper == first.keeper {
				victim = in
			}
		}
		cutAt := time.Now()
		victim.fault.Cut()
		next := led.waitFor(t, 6*time.Second, "a run elsewhere", func(e entry) bool { return e.keeper != victim.keeper })
		cancelled := led.waitFor(t, time.Second, "the victim's run to end", func(e entry) bool {
			return e.scheduled.Equal(first.scheduled) && !e.end.IsZero()
		})
		close(release)
		stopAll(t, ins...)

		if !errors.Is(cancelled.cause, lock.ErrLeaseLost) {
			t.Errorf("victim's run %v: cause %v, want lock.ErrLeaseLost", cancelled, cancelled.cause)
		}
		// Its last renewal was sent before the cut: it is cancelled at that
		// renewal's renew deadline, a safety margin before anyone may take
		// over.
		if !cancelled.end.Before(next.start) || cancelled.end.Sub(cutAt) > victim.session.Timings().RenewDeadline {
			t.Errorf("victim's run %v cancelled too late: cut at %s, next run %v", cancelled, cutAt.Format("15:04:05.000"), next)
		}
		for _, e := range led.snapshot() {
			if e.keeper == victim.keeper && e.start.After(cutAt) {
				t.Errorf("victim ran %v after it was cut", e)
			}
		}
		if next.fence <= first.fence || !next.scheduled.After(first.scheduled) {
			t.Errorf("next run %v (fence %d) after %v (fence %d)", next, next.fence, first, first.fence)
		}
		for _, in := range ins {
			if in != victim {
				assertNoLocks(t, in, "work")
				break
			}
		}
	})
}

// TestClaimTakenOver: the instance that claimed a firing stalls between its
// claim and the run's start (its connection goes silent: as a process
// paused, or cut off), or stops cleanly there. Another instance takes the
// claim over once the claimant's presence lease lapsed, or at once after
// its clean stop, and runs the firing, late; the claimant, when it
// resumes, does not run it too. Clocks are 400ms apart either way (they
// decide nothing: firings fall due by the server's clock). A starts alone,
// so that it claims first; B once A claimed. On the simulated server, in a
// synctest bubble.
func TestClaimTakenOver(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		stall bool // else stop
	}{{"claimant stalls", true}, {"claimant stops", false}} {
		t.Run(tc.name, func(t *testing.T) {
			simTest(t, func(t *testing.T, srv *simdb.Server) {
				const ttl = time.Second
				const every = 5 * time.Second
				dbName := "app"
				ins := newCluster(t, dbName, clusterConfig{skews: []time.Duration{400 * time.Millisecond, -400 * time.Millisecond},
					ttl: ttl, proxied: true, sim: srv})
				a, b := ins[0], ins[1]
				var led ledger
				for _, in := range ins {
					if err := in.s.AddJob("report", "@every 5s", func(ctx context.Context) error {
						led.end(ctx, led.begin(ctx, "report"))
						return nil
					}); err != nil {
						t.Fatal(err)
					}
				}
				claimed := make(chan time.Time, 1)
				resume := make(chan struct{})
				var once sync.Once
				a.events.onEvent(func(e lock.Event) {
					if e.Kind != lock.FiringClaimed {
						return
					}
					once.Do(func() {
						claimed <- e.Scheduled
						if !tc.stall {
							go func() { _ = a.s.Stop(context.Background()) }()
							return
						}
						// As a paused process: nothing of A reaches the
						// server, and this firing goes on, to take the lock
						// and record the start, only once A resumes.
						a.fault.Silence()
						<-resume
						a.fault.Restore()
					})
				})
				startAll(t, a)
				var f time.Time
				select {
				case f = <-claimed:
				case <-time.After(3 * every):
					t.Fatal("A claimed nothing")
				}
				stalledAt := time.Now()
				startAll(t, b)
				ran := led.waitFor(t, 4*every, "the firing taken over", func(e entry) bool { return e.scheduled.Equal(f) })
				late := ran.start.Sub(stalledAt)
				t.Logf("firing %s claimed by A, run by %s %v after A stalled", f.Format("15:04:05"), ran.keeper, late.Round(time.Millisecond))
				// The documented bound: a TTL after the last renewal (none
				// after the stall), a poll interval, the lock package's
				// margins; a clean stop needs no TTL.
				bound := 2*ttl + 2*b.session.Timings().RenewInterval
				if !tc.stall {
					bound -= ttl
				}
				if ran.keeper != b.keeper || late > bound {
					t.Errorf("taken-over firing ran by %s after %v, want by B within %v", ran.keeper, late, bound)
				}
				if tc.stall {
					close(resume)
					// A resumes, takes the lock and tries to record the start:
					// the claim is not its own any more.
					deadline := time.Now().Add(4 * ttl)
					for !slices.ContainsFunc(a.events.snapshot(), func(e lock.Event) bool {
						return e.Scheduled.Equal(f) && e.Kind == lock.FiringSkipped
					}) && time.Now().Before(deadline) {
						time.Sleep(20 * time.Millisecond)
					}
					var reason string
					for _, e := range a.events.snapshot() {
						if e.Scheduled.Equal(f) && e.Kind == lock.FiringSkipped {
							reason = e.Reason
						}
					}
					if reason != scheduler.ReasonTakenOver {
						t.Errorf("A's firing ended with %q, want %q", reason, scheduler.ReasonTakenOver)
					}
				}
				stopAll(t, ins...)
				n := 0
				for _, e := range led.snapshot() {
					if e.scheduled.Equal(f) {
						n++
					}
				}
				if n != 1 {
					t.Errorf("firing %s ran %d times: %v", f.Format("15:04:05"), n, led.snapshot())
				}
				var taken bool
				for _, e := range b.events.snapshot() {
					taken = taken || e.Kind == lock.FiringTakenOver && e.Scheduled.Equal(f) && e.Leader == a.keeper
				}
				if !taken {
					t.Errorf("B reported no FiringTakenOver of %s from A", f.Format("15:04:05"))
				}
				for _, e := range a.events.snapshot() {
					if e.Scheduled.Equal(f) && e.Kind == lock.RunStarted {
						t.Errorf("A started the firing it lost: %+v", e)
					}
				}
			})
		})
	}
}

// TestOutcomesPersisted checks what a panic, an error, a success and Stop
// leave in MongoDB, and that the lock is released each time.
// On the simulated server, in a synctest bubble: the run that waits for
// Stop must keep its lease until then.
func TestOutcomesPersisted(t *testing.T) {
	simTest(t, func(t *testing.T, srv *simdb.Server) {
		dbName := "app"
		in := newCluster(t, dbName, clusterConfig{sim: srv, skews: []time.Duration{0}, ttl: time.Second})[0]
		var led ledger
		var n atomic.Int32
		err := in.s.AddJob("j", "@every 1s", func(ctx context.Context) error {
			e := led.begin(ctx, "j")
			defer led.end(ctx, e)
			switch n.Add(1) {
			case 1:
				panic("kaboom")
			case 2:
				return errors.New("boom")
			case 3:
				return nil
			}
			<-ctx.Done() // until Stop
			return ctx.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx := testCtx(t, 30*time.Second)
		if err := in.s.EnsureIndexes(ctx); err != nil {
			t.Fatal(err)
		}
		if err := in.s.EnsureIndexes(ctx); err != nil {
			t.Fatalf("EnsureIndexes again: %v", err)
		}
		startAll(t, in)
		led.waitFor(t, 8*time.Second, "the fourth run", func(e entry) bool { return len(led.snapshot()) == 4 })
		stopAll(t, in)

		hist, err := in.s.History(ctx, "j", 0)
		if err != nil || len(hist) != 4 {
			t.Fatalf("history: %+v %v", hist, err)
		}
		slices.Reverse(hist)
		for i, want := range []struct {
			outcome scheduler.Outcome
			text    string
		}{
			{scheduler.OutcomeFailed, "kaboom"},
			{scheduler.OutcomeFailed, "boom"},
			{scheduler.OutcomeSucceeded, ""},
			{scheduler.OutcomeFailed, scheduler.ErrStopped.Error()},
		} {
			h := hist[i]
			if h.Outcome != want.outcome || !strings.Contains(h.Error, want.text) || (want.text == "" && h.Error != "") ||
				h.Keeper != "A" || h.Start.IsZero() || h.End.Before(h.Start) {
				t.Errorf("run %d: %+v, want %s %q", i+1, h, want.outcome, want.text)
			}
		}
		recs, _, err := scheduler.LoadRecords(ctx, in.db.Collection(scheduler.DefaultJobsCollection))
		if err != nil || len(recs) != 1 || recs[0].LastRun == nil || *recs[0].LastRun != hist[3] && recs[0].LastRun.Scheduled != hist[3].Scheduled {
			t.Fatalf("records %+v %v", recs, err)
		}
		if lr := recs[0].LastRun; lr.Outcome != scheduler.OutcomeFailed || !strings.Contains(lr.Error, "stopped") {
			t.Errorf("last run %+v", lr)
		}
		assertNoLocks(t, in, "j")
	})
}

// TestPurgeHistory keeps one second of history and purges it.
// On the simulated server, in a synctest bubble.
func TestPurgeHistory(t *testing.T) {
	simTest(t, func(t *testing.T, srv *simdb.Server) {
		dbName := "app"
		in := newCluster(t, dbName, clusterConfig{sim: srv, skews: []time.Duration{0}, ttl: time.Second,
			opts: []scheduler.Option{scheduler.WithHistory(time.Second)}})[0]
		var led ledger
		_ = in.s.AddJob("j", "@every 1s", func(ctx context.Context) error { led.end(ctx, led.begin(ctx, "j")); return nil })
		startAll(t, in)
		led.waitFor(t, 5*time.Second, "a run", func(entry) bool { return true })
		stopAll(t, in)
		ctx := testCtx(t, 20*time.Second)
		deadline := time.Now().Add(5 * time.Second)
		total := 0
		for {
			n, err := in.s.PurgeHistory(ctx)
			if err != nil {
				t.Fatal(err)
			}
			total += n
			hist, err := in.s.History(ctx, "j", 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(hist) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("history not purged: %+v", hist)
			}
			<-time.After(200 * time.Millisecond)
		}
		if total == 0 {
			t.Fatal("nothing purged")
		}
		// The last run stays in the job document.
		infos, err := in.s.Jobs(ctx)
		if err != nil || infos[0].LastRun == nil {
			t.Fatalf("Jobs after purge: %+v %v", infos, err)
		}
	})
}
