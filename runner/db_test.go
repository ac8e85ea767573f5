package runner_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/simdb"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
)

// Timings of the database tests: a 1.5s lease, so with the scaled defaults
// the renew interval is 500ms, the renew deadline 1s and the retry period
// 100ms.
const dbTTL = 1500 * time.Millisecond

// simRTT is how long a command takes to the simulated server and back.
// The tests whose bounds are timings run on it, in a synctest bubble (see
// simTest): a loaded machine stretches round trips to the test server
// without bound, and the bubble's time only moves when every goroutine
// waits.
const simRTT = 2 * time.Millisecond

// term is one run of the task as the task itself saw it, on this process's
// clock.
type term struct {
	keeper     string
	fence      uint64
	start, end time.Time // end is zero while running
	cause      error     // context.Cause when the task's context ended
}

// cluster is n runners on one lock, each on its own client behind its own
// fault proxy, with its own session.
type cluster struct {
	t        testing.TB
	runners  []*runner.LeaderAwareRunner
	sessions []*lock.Session
	events   []*eventLog
	faults   []fault
	cancels  []context.CancelFunc
	errs     []chan error

	mu     sync.Mutex
	terms  []*term
	starts chan *term
	ends   chan *term
}

// eventLog is an observer that keeps the runner events of a session.
type eventLog struct {
	mu     sync.Mutex
	events []lock.Event
}

func (l *eventLog) Observe(e lock.Event) {
	switch e.Kind {
	case lock.TermStarted, lock.TermEnded, lock.LeaderSeen:
		l.mu.Lock()
		l.events = append(l.events, e)
		l.mu.Unlock()
	}
}

func (l *eventLog) count(kind lock.EventKind) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// fault breaks the network between one client and the server:
// *mongotest.Fault for the test server, *mongotest.SimFault for the
// simulated one.
type fault interface {
	Cut()
	Silence()
	Restore()
}

// simTest runs f in a synctest bubble, in parallel with other tests.
func simTest(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	t.Parallel()
	synctest.Test(t, f)
}

// newCluster returns n runners on the test server, each on a client of
// its own behind a fault proxy of its own.
func newCluster(t testing.TB, n int, ttl time.Duration, opts ...runner.Option) *cluster {
	t.Helper()
	name := mongotest.NewDatabase(t).Name()
	return newClusterOn(t, n, ttl, func() (*mongo.Database, fault) {
		client, fault := mongotest.NewProxiedClient(t)
		return mongotest.Database(t, client, name), fault
	}, opts...)
}

// newSimCluster returns n runners on a simulated server, each on a link
// of its own that a mongotest.SimFault breaks, whose commands take simRTT
// there and back. Call it in a synctest bubble.
func newSimCluster(t testing.TB, n int, ttl time.Duration, opts ...runner.Option) (*cluster, *simdb.Server) {
	t.Helper()
	srv := simdb.NewServer(simdb.MongoDB, 0)
	i := 0
	return newClusterOn(t, n, ttl, func() (*mongo.Database, fault) {
		f := mongotest.NewSimFault(simRTT)
		i++
		client, err := srv.NewLink(fmt.Sprintf("k%d", i-1), f.Plan).Connect(nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
		return client.Database("app"), f
	}, opts...), srv
}

func newClusterOn(t testing.TB, n int, ttl time.Duration, connect func() (*mongo.Database, fault), opts ...runner.Option) *cluster {
	t.Helper()
	c := &cluster{
		t:      t,
		starts: make(chan *term, 1000),
		ends:   make(chan *term, 1000),
	}
	for i := range n {
		c.add(i, ttl, connect, opts)
	}
	return c
}

// add gives the cluster runner i (keeper id "k<i>") with opts, on a
// Session of its own through connect.
func (c *cluster) add(i int, ttl time.Duration, connect func() (*mongo.Database, fault), opts []runner.Option) {
	t := c.t
	t.Helper()
	db, fault := connect()
	lk, err := lock.New(db, lock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	events := &eventLog{}
	session, err := lock.NewSession(lk, lock.WithKeeperID(fmt.Sprintf("k%d", i)), lock.WithObserver(events))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		fault.Restore()
		if err := session.Close(); err != nil {
			t.Errorf("close session: %v", err)
		}
	})
	r, err := runner.New(session, "leader", opts...)
	if err != nil {
		t.Fatal(err)
	}
	c.runners = append(c.runners, r)
	c.sessions = append(c.sessions, session)
	c.events = append(c.events, events)
	c.faults = append(c.faults, fault)
	c.cancels = append(c.cancels, nil)
	c.errs = append(c.errs, make(chan error, 1))
}

// timings are the session timings every runner of the cluster uses.
func (c *cluster) timings() lock.Timings { return c.sessions[0].Timings() }

// task is what every runner leads with: it records its interval.
func (c *cluster) task(keeper string) func(context.Context) error {
	return func(ctx context.Context) error {
		fence, _ := runner.FenceFrom(ctx)
		tm := &term{keeper: keeper, fence: fence, start: time.Now()}
		c.mu.Lock()
		c.terms = append(c.terms, tm)
		c.mu.Unlock()
		c.starts <- tm
		<-ctx.Done()
		c.mu.Lock()
		tm.end, tm.cause = time.Now(), context.Cause(ctx)
		c.mu.Unlock()
		c.ends <- tm
		return ctx.Err()
	}
}

// start runs runner i until stop(i) or the end of the test.
func (c *cluster) start(i int) {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancels[i] = cancel
	r := c.runners[i]
	errc := c.errs[i]
	done := make(chan struct{})
	go func() {
		defer close(done)
		errc <- r.Run(ctx, c.task(r.KeeperID()))
	}()
	c.t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			c.t.Errorf("%s: Run did not return", r.KeeperID())
		}
	})
}

func (c *cluster) startAll() {
	for i := range c.runners {
		c.start(i)
	}
}

// stopAll stops every runner and checks that no two terms overlapped.
func (c *cluster) stopAll() {
	for i := range c.runners {
		_ = c.stop(i)
	}
	c.checkNoOverlap()
}

// stop cancels runner i and returns Run's error.
func (c *cluster) stop(i int) error {
	c.cancels[i]()
	select {
	case err := <-c.errs[i]:
		return err
	case <-time.After(30 * time.Second):
		c.t.Fatalf("%s: Run did not return", c.runners[i].KeeperID())
		return nil
	}
}

func (c *cluster) index(keeper string) int {
	for i, r := range c.runners {
		if r.KeeperID() == keeper {
			return i
		}
	}
	c.t.Fatalf("no runner %q", keeper)
	return -1
}

// nextStart waits for a task to start.
func (c *cluster) nextStart(within time.Duration) *term {
	c.t.Helper()
	select {
	case tm := <-c.starts:
		return tm
	case <-time.After(within):
		c.t.Fatalf("no task started within %v", within)
		return nil
	}
}

// nextEnd waits for a task's context to end.
func (c *cluster) nextEnd(within time.Duration) *term {
	c.t.Helper()
	select {
	case tm := <-c.ends:
		return tm
	case <-time.After(within):
		c.t.Fatalf("no task stopped within %v", within)
		return nil
	}
}

// awaitEnd waits for tm's task's context to end; the ends of other terms
// that come first are skipped (their terms ended too).
func (c *cluster) awaitEnd(tm *term, within time.Duration) {
	c.t.Helper()
	timeout := time.After(within)
	for {
		select {
		case e := <-c.ends:
			if e == tm {
				return
			}
		case <-timeout:
			c.t.Fatalf("the term of %s (fence %d) did not end within %v", tm.keeper, tm.fence, within)
		}
	}
}

// checkNoOverlap asserts that no two task intervals overlap and that fences
// increase with start times.
func (c *cluster) checkNoOverlap() {
	c.t.Helper()
	c.mu.Lock()
	terms := make([]term, len(c.terms))
	for i, tm := range c.terms {
		terms[i] = *tm
	}
	c.mu.Unlock()
	slices.SortFunc(terms, func(a, b term) int { return a.start.Compare(b.start) })
	for i := 1; i < len(terms); i++ {
		prev, cur := terms[i-1], terms[i]
		if prev.end.IsZero() || cur.start.Before(prev.end) {
			c.t.Errorf("%s (fence %d) started at %v while %s (fence %d) ran until %v",
				cur.keeper, cur.fence, cur.start.Format(time.StampMicro), prev.keeper, prev.fence,
				prev.end.Format(time.StampMicro))
		}
		if cur.fence <= prev.fence {
			c.t.Errorf("fence %d of %s not above %d of %s", cur.fence, cur.keeper, prev.fence, prev.keeper)
		}
	}
	c.checkEvents(terms)
}

// checkEvents asserts that each runner reported each of its terms, all
// ended, exactly once by TermStarted and TermEnded.
func (c *cluster) checkEvents(terms []term) {
	c.t.Helper()
	for i, r := range c.runners {
		n := 0
		for _, tm := range terms {
			if tm.keeper == r.KeeperID() {
				n++
			}
		}
		if s, e := c.events[i].count(lock.TermStarted), c.events[i].count(lock.TermEnded); s != n || e != n {
			c.t.Errorf("%s: %d TermStarted and %d TermEnded events for %d terms", r.KeeperID(), s, e, n)
		}
	}
}

// Three runners on three clients: leadership moves around (tasks return,
// leaders are cut off and come back) and no two tasks ever run at once. A
// runner whose term the test ended (cut off, silenced or stopped) comes
// back only once another one leads, so leadership moves however loaded the
// machine (a loaded machine may also end terms of its own: renewals that
// take longer than the renew deadline); the waits only bound a hang.
func TestDBExactlyOneLeader(t *testing.T) {
	t.Parallel()
	const hang = time.Minute
	c := newCluster(t, 3, dbTTL)
	c.startAll()
	terms := 0
	keepers := map[string]bool{}
	// back brings back the runner whose term was ended last.
	back := func() {}
	for terms < 6 { // each way of ending a term, twice
		tm := c.nextStart(hang)
		back()
		back = func() {}
		terms++
		keepers[tm.keeper] = true
		i := c.index(tm.keeper)
		// End each term differently, in turn.
		switch terms % 3 {
		case 0, 1:
			what := "cutting"
			if terms%3 == 0 {
				c.faults[i].Cut()
			} else {
				what = "silencing"
				c.faults[i].Silence()
			}
			c.awaitEnd(tm, hang)
			c.mu.Lock()
			cause := tm.cause
			c.mu.Unlock()
			if !errors.Is(cause, lock.ErrLeaseLost) {
				t.Fatalf("after %s %s: its term ended with cause %v", what, tm.keeper, cause)
			}
			back = c.faults[i].Restore
		case 2:
			if err := c.stop(i); err != nil {
				t.Fatalf("%s: Run returned %v", tm.keeper, err)
			}
			c.awaitEnd(tm, hang)
			back = func() { c.start(i) }
		}
	}
	back()
	for i := range c.runners {
		if err := c.stop(i); err != nil {
			t.Errorf("%s: Run returned %v", c.runners[i].KeeperID(), err)
		}
	}
	c.checkNoOverlap()
	if len(keepers) < 2 {
		t.Fatalf("only %d terms by %d keepers: the test did not exercise failover", terms, len(keepers))
	}
	t.Logf("%d terms by %d keepers, no overlap", terms, len(keepers))
}

// Cutting the leader's connection: another runner starts within TTL plus a
// retry period (and round trips), after the old leader's task was
// cancelled. On the simulated server, in a synctest bubble.
func TestDBFailoverAfterCut(t *testing.T) {
	simTest(t, func(t *testing.T) {
		c, _ := newSimCluster(t, 3, dbTTL)
		c.startAll()
		leader := c.nextStart(10 * time.Second)
		tm := c.timings()
		rp := tm.RetryPeriod
		// Mid-lease, between renewals: the last one reached the server
		// before the cut.
		time.Sleep(tm.RenewInterval + tm.RenewInterval/2)
		cutAt := time.Now()
		c.faults[c.index(leader.keeper)].Cut()
		next := c.nextStart(dbTTL + rp + 5*time.Second)
		took := next.start.Sub(cutAt)
		t.Logf("failover after cut: %v (TTL %v, retry period %v, round trip %v)", took, dbTTL, rp, simRTT)
		if next.keeper == leader.keeper {
			t.Fatalf("%s led again while cut off", next.keeper)
		}
		// The lease expires a TTL after the last renewal reached the
		// server, before the cut; a campaign lands within a retry period
		// and a round trip after that, and is answered half a round trip
		// later.
		if bound := dbTTL + rp + 2*simRTT; took > bound {
			t.Errorf("failover took %v, more than TTL+retry period (%v) plus two round trips", took, dbTTL+rp)
		}
		c.mu.Lock()
		end, cause := leader.end, leader.cause
		c.mu.Unlock()
		if end.IsZero() || !errors.Is(cause, lock.ErrLeaseLost) || !end.Before(next.start) {
			t.Errorf("cut leader's task ended at %v with %v; new leader started at %v", end, cause, next.start)
		}
		// Reconnect first: a runner stopped while cut off waits out its
		// release timeout trying to release an acquisition that failed.
		c.faults[c.index(leader.keeper)].Restore()
		c.stopAll()
	})
}

// A silenced leader (connection open, nothing gets through) cancels its task
// before its lease could expire by the server's clock, and the next leader
// starts only after that. On the simulated server, in a synctest bubble.
func TestDBSilencedLeaderStepsDownFirst(t *testing.T) {
	simTest(t, func(t *testing.T) {
		c, _ := newSimCluster(t, 3, dbTTL)
		c.startAll()
		leader := c.nextStart(10 * time.Second)
		tm := c.timings()
		time.Sleep(tm.RenewInterval + tm.RenewInterval/2) // mid-lease, between renewals
		silencedAt := time.Now()
		c.faults[c.index(leader.keeper)].Silence()
		end := c.nextEnd(dbTTL + 5*time.Second)
		next := c.nextStart(dbTTL + 5*time.Second)
		if end.keeper != leader.keeper || !errors.Is(end.cause, lock.ErrLeaseLost) {
			t.Fatalf("first to stop: %s with cause %v; want %s, lock.ErrLeaseLost", end.keeper, end.cause, leader.keeper)
		}
		rd := tm.RenewDeadline
		t.Logf("silenced at 0; old leader cancelled at %v (renew deadline %v); new leader started at %v (TTL %v)",
			end.end.Sub(silencedAt), rd, next.start.Sub(silencedAt), dbTTL)
		if !end.end.Before(next.start) {
			t.Fatalf("new leader %s started at %v, before the silenced leader's task was cancelled at %v",
				next.keeper, next.start, end.end)
		}
		// The old leader stops trusting at the renew deadline of its last
		// renewal, which was sent before the silence.
		if d := end.end.Sub(silencedAt); d > rd {
			t.Errorf("silenced leader cancelled %v after the silence, later than the renew deadline %v", d, rd)
		}
		c.faults[c.index(leader.keeper)].Restore()
		c.stopAll()
	})
}

// Stopping the leader hands over within one retry period (plus the round
// trips of the release and of the campaign that wins). On the simulated
// server, in a synctest bubble.
func TestDBGracefulHandover(t *testing.T) {
	simTest(t, func(t *testing.T) {
		c, _ := newSimCluster(t, 3, dbTTL)
		c.startAll()
		leader := c.nextStart(10 * time.Second)
		rp := c.timings().RetryPeriod
		i := c.index(leader.keeper)
		stoppedAt := time.Now()
		if err := c.stop(i); err != nil {
			t.Fatalf("Run returned %v", err)
		}
		next := c.nextStart(5 * time.Second)
		took := next.start.Sub(stoppedAt)
		t.Logf("handover after graceful stop: %v (retry period %v, round trip %v)", took, rp, simRTT)
		if bound := rp + 2*simRTT; took > bound {
			t.Errorf("handover took %v, more than a retry period (%v) plus two round trips", took, rp)
		}
		if c.runners[i].IsLeader() {
			t.Error("stopped runner still leader")
		}
		for j := range c.runners {
			if j != i {
				_ = c.stop(j)
			}
		}
		c.checkNoOverlap()
	})
}

// A server outage longer than the renew deadline: the leader steps down,
// and once the server is back leadership resumes without restarting the
// runners.
func TestDBServerOutage(t *testing.T) {
	// Not parallel: it stops the server for everyone.
	if mongotest.Backend() != mongotest.BackendFerretDB {
		t.Skip("needs the embedded server")
	}
	mongotest.Exclusive(t)
	c := newCluster(t, 3, dbTTL)
	c.startAll()
	leader := c.nextStart(10 * time.Second)
	stoppedAt := time.Now()
	mongotest.StopServer(t)
	end := c.nextEnd(dbTTL + 5*time.Second)
	if end.keeper != leader.keeper || !errors.Is(end.cause, lock.ErrLeaseLost) {
		t.Fatalf("%s stopped with cause %v; want %s, lock.ErrLeaseLost", end.keeper, end.cause, leader.keeper)
	}
	t.Logf("leader stepped down %v after the server stopped", end.end.Sub(stoppedAt))
	// Stay down past the TTL, so the lease lapses by any clock.
	time.Sleep(dbTTL + 500*time.Millisecond - time.Since(stoppedAt))
	for _, r := range c.runners {
		if r.IsLeader() {
			t.Fatalf("%s is leader while the server is down", r.KeeperID())
		}
	}
	select {
	case tm := <-c.starts:
		t.Fatalf("%s started leading while the server was down", tm.keeper)
	default:
	}
	restartedAt := time.Now()
	mongotest.RestartServer(t)
	next := c.nextStart(20 * time.Second)
	t.Logf("%s leads %v after the restart", next.keeper, next.start.Sub(restartedAt))
	c.stopAll()
}

// A runner whose session and store read a clock an hour off keep one term
// going, renewed in time, and stop it cleanly: every deadline is read on
// that clock and timers run for durations, never for instants compared with
// the system clock. Scheduling an instant of the skewed clock on the system
// clock would, an hour ahead, renew an hour late (the lease lapses and
// another keeper takes it); an hour behind, fire every timer at once. On
// the simulated server, in a synctest bubble: on the test server, a loaded
// machine could make renewals late by itself.
func TestDBSkewedClockKeepsTerm(t *testing.T) {
	t.Parallel()
	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		t.Run(fmt.Sprintf("skew=%v", skew), func(t *testing.T) {
			simTest(t, func(t *testing.T) {
				srv := simdb.NewServer(simdb.MongoDB, 0)
				connect := func(name string) *mongo.Database {
					client, err := srv.NewLink(name, mongotest.NewSimFault(simRTT).Plan).Connect(nil)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
					return client.Database("app")
				}
				lk, err := lock.New(connect("skewed"), lock.WithTTL(dbTTL), lock.WithClock(mongotest.SkewedClock(skew)))
				if err != nil {
					t.Fatal(err)
				}
				events := &eventLog{}
				session, err := lock.NewSession(lk, lock.WithObserver(events))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = session.Close() }) // after Run's cleanup
				r, err := runner.New(session, "leader")
				if err != nil {
					t.Fatal(err)
				}
				var terms atomic.Int32
				started := make(chan struct{}, 100)
				stop, _, _ := goRun(t, r, func(ctx context.Context) error {
					terms.Add(1)
					started <- struct{}{}
					<-ctx.Done()
					time.Sleep(dbTTL / 10) // well within the 10s grace period
					return ctx.Err()
				})
				select {
				case <-started:
				case <-time.After(dbTTL + 5*time.Second):
					t.Fatal("no term started")
				}
				time.Sleep(3 * dbTTL)

				other, err := lock.New(connect("other"), lock.WithTTL(dbTTL))
				if err != nil {
					t.Fatal(err)
				}
				acq, err := other.AcquireLocks(context.Background(), "other", "leader")
				if err != nil || len(acq.Granted) != 0 {
					t.Errorf("after 3 TTLs another keeper acquired the lock (%+v, %v): the lease was not renewed in time", acq, err)
				}
				if n := terms.Load(); n != 1 {
					t.Errorf("%d terms in 3 TTLs, want 1", n)
				}
				if err := stop(); err != nil {
					t.Errorf("Run returned %v", err)
				}
				if s, e := events.count(lock.TermStarted), events.count(lock.TermEnded); s != 1 || e != 1 {
					t.Errorf("%d TermStarted and %d TermEnded events for one term", s, e)
				}
			})
		})
	}
}

// TestDBFailoverGap: TermStarted reports the failover gap on the server's
// clock, from the previous holder's last renewal to the new term's start,
// as computed independently from the lock document.
func TestDBFailoverGap(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := mongotest.NewDatabase(t)
	crashed, err := lock.New(db, lock.WithTTL(dbTTL))
	if err != nil {
		t.Fatal(err)
	}
	// The previous leader takes the lock and dies: no renewal, no release.
	a, err := crashed.AcquireLocks(ctx, "crashed", "leader")
	if err != nil || len(a.Granted) != 1 {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	before, err := crashed.Holder(ctx, "leader")
	if err != nil {
		t.Fatal(err)
	}
	l, err := lock.New(mongotest.Database(t, mongotest.NewClient(t), db.Name()), lock.WithTTL(dbTTL))
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan lock.Event, 16)
	s, err := lock.NewSession(l, lock.WithObserver(lock.ObserverFunc(func(e lock.Event) {
		if e.Kind == lock.TermStarted {
			events <- e
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := runner.New(s, "leader")
	if err != nil {
		t.Fatal(err)
	}
	ran, err := r.RunTaskOnLeader(ctx, func(context.Context) error { return nil })
	for !ran && err == nil {
		ran, err = r.RunTaskOnLeader(ctx, func(context.Context) error { return nil })
	}
	if err != nil {
		t.Fatal(err)
	}
	var e lock.Event
	select {
	case e = <-events:
	default:
		t.Fatal("no TermStarted event")
	}
	after, err := l.Holder(ctx, "leader")
	if err != nil {
		t.Fatal(err)
	}
	want := after.AcquiredAt.Sub(before.RenewedAt)
	if e.Gap != want || want < dbTTL {
		t.Fatalf("failover gap %v, want %v (the new term's start minus the last renewal, at least the TTL %v)", e.Gap, want, dbTTL)
	}
}
