package runner_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
)

// Timings of the database tests: a 1.5s lease, so with the scaled defaults
// the renew interval is 500ms, the renew deadline 1s and the retry period
// 100ms.
const dbTTL = 1500 * time.Millisecond

// rttSlack is added to bounds that end with a round trip to the database:
// one command through the serializing proxy on a busy, shared machine.
const rttSlack = 300 * time.Millisecond

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
	faults   []*mongotest.Fault
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

func newCluster(t testing.TB, n int, ttl time.Duration, opts ...runner.Option) *cluster {
	t.Helper()
	name := mongotest.NewDatabase(t).Name()
	c := &cluster{
		t:      t,
		starts: make(chan *term, 1000),
		ends:   make(chan *term, 1000),
	}
	for i := range n {
		client, fault := mongotest.NewProxiedClient(t)
		lk, err := lock.New(mongotest.Database(t, client, name), lock.WithTTL(ttl))
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
	return c
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
// leaders are cut off and come back) and no two tasks ever run at once.
func TestDBExactlyOneLeader(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, dbTTL)
	c.startAll()
	terms := 0
	keepers := map[string]bool{}
	for terms < 6 { // each way of ending a term, twice
		tm := c.nextStart(dbTTL + 5*time.Second)
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
			end := c.nextEnd(dbTTL + 5*time.Second)
			if end.keeper != tm.keeper || !errors.Is(end.cause, lock.ErrLeaseLost) {
				t.Fatalf("after %s %s: %s stopped with cause %v", what, tm.keeper, end.keeper, end.cause)
			}
			c.faults[i].Restore()
		case 2:
			if err := c.stop(i); err != nil {
				t.Fatalf("%s: Run returned %v", tm.keeper, err)
			}
			if end := c.nextEnd(time.Second); end.keeper != tm.keeper {
				t.Fatalf("stopping %s stopped %s", tm.keeper, end.keeper)
			}
			c.start(i)
		}
	}
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
// retry period, after the old leader's task was cancelled.
func TestDBFailoverAfterCut(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, dbTTL)
	c.startAll()
	leader := c.nextStart(10 * time.Second)
	rp := c.timings().RetryPeriod
	time.Sleep(dbTTL / 3) // not synchronisation: the cut comes mid-lease, after a renewal
	cutAt := time.Now()
	c.faults[c.index(leader.keeper)].Cut()
	next := c.nextStart(dbTTL + rp + 5*time.Second)
	took := next.start.Sub(cutAt)
	t.Logf("failover after cut: %v (TTL %v, retry period %v)", took, dbTTL, rp)
	if next.keeper == leader.keeper {
		t.Fatalf("%s led again while cut off", next.keeper)
	}
	if took > dbTTL+rp+rttSlack {
		t.Errorf("failover took %v, more than TTL+retry period (%v) plus %v", took, dbTTL+rp, rttSlack)
	}
	c.mu.Lock()
	end, cause := leader.end, leader.cause
	c.mu.Unlock()
	if end.IsZero() || !errors.Is(cause, lock.ErrLeaseLost) || !end.Before(next.start) {
		t.Errorf("cut leader's task ended at %v with %v; new leader started at %v", end, cause, next.start)
	}
	// Reconnect first: a runner stopped while cut off waits out its release
	// timeout trying to release an acquisition that failed.
	c.faults[c.index(leader.keeper)].Restore()
	c.stopAll()
}

// A silenced leader (connection open, nothing gets through) cancels its task
// before its lease could expire by the server's clock, and the next leader
// starts only after that.
func TestDBSilencedLeaderStepsDownFirst(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, dbTTL)
	c.startAll()
	leader := c.nextStart(10 * time.Second)
	time.Sleep(dbTTL / 3) // not synchronisation: the silence comes mid-lease
	silencedAt := time.Now()
	c.faults[c.index(leader.keeper)].Silence()
	end := c.nextEnd(dbTTL + 5*time.Second)
	next := c.nextStart(dbTTL + 5*time.Second)
	if end.keeper != leader.keeper || !errors.Is(end.cause, lock.ErrLeaseLost) {
		t.Fatalf("first to stop: %s with cause %v; want %s, lock.ErrLeaseLost", end.keeper, end.cause, leader.keeper)
	}
	rd := c.timings().RenewDeadline
	t.Logf("silenced at 0; old leader cancelled at %v (renew deadline %v); new leader started at %v (TTL %v)",
		end.end.Sub(silencedAt), rd, next.start.Sub(silencedAt), dbTTL)
	if !end.end.Before(next.start) {
		t.Fatalf("new leader %s started at %v, before the silenced leader's task was cancelled at %v",
			next.keeper, next.start, end.end)
	}
	// The old leader stops trusting within the renew deadline of its last
	// renewal, which was sent before the silence.
	if d := end.end.Sub(silencedAt); d > rd+rttSlack {
		t.Errorf("silenced leader cancelled %v after the silence, later than the renew deadline %v", d, rd)
	}
	c.faults[c.index(leader.keeper)].Restore()
	c.stopAll()
}

// Stopping the leader hands over within one retry period (plus the round
// trip of the release).
func TestDBGracefulHandover(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, dbTTL)
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
	t.Logf("handover after graceful stop: %v (retry period %v)", took, rp)
	if took > rp+rttSlack {
		t.Errorf("handover took %v, more than a retry period (%v) plus %v", took, rp, rttSlack)
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
// another keeper takes it); an hour behind, fire every timer at once.
func TestDBSkewedClockKeepsTerm(t *testing.T) {
	t.Parallel()
	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		t.Run(fmt.Sprintf("skew=%v", skew), func(t *testing.T) {
			t.Parallel()
			db := mongotest.NewDatabase(t)
			lk, err := lock.New(db, lock.WithTTL(dbTTL), lock.WithClock(mongotest.SkewedClock(skew)))
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

			other, err := lock.New(db, lock.WithTTL(dbTTL))
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
