package runner_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
	"github.com/mongolock/mongolock/runner"
)

// Timings of the fast tests: lock.DefaultTTL and the session's defaults
// for it.
const (
	fTTL = lock.DefaultTTL              // 30s
	fRI  = lock.DefaultRenewInterval    // 10s
	fRD  = lock.DefaultRenewDeadline    // 20s
	fRP  = lock.DefaultRetryPeriod      // 2s
	fRT  = lock.DefaultReleaseTimeout   // 5s
	fB1  = lock.DefaultRetryPeriod / 16 // the session's first pause between release attempts
)

const lockName = "leader"

// harness is one clock and one in-memory store shared by runners, each on
// its own real lock.Session. It runs inside a synctest bubble: synctest.Wait
// tells when every goroutine (runners, keep-alives, tasks) is parked, so the
// test moves the clock only then, and timers are armed at the instants the
// code computed.
type harness struct {
	t    *testing.T
	clk  clockwork.Clock
	fake *clockwork.FakeClock // nil on the bubble's clock
	f    *logStore
}

// fast runs f in a synctest bubble with a new harness on a fake clock.
func fast(t *testing.T, f func(t *testing.T, h *harness)) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		clk := clockwork.NewFakeClockAt(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
		withHarness(t, &harness{t: t, clk: clk, fake: clk, f: newLogStore(clk)}, f)
	})
}

// fastOnBubbleClock is fast on the clock of the synctest bubble (the
// system clock's API, fake time): timers fire at their exact instants as
// the test sleeps. It is for tests of the session's release retries, which
// cannot retry on a clockwork fake clock before the release timeout: the
// session checks its timeout context with Err, and clockwork's fake
// contexts block in Err until they are done.
func fastOnBubbleClock(t *testing.T, f func(t *testing.T, h *harness)) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		clk := clockwork.NewRealClock()
		withHarness(t, &harness{t: t, clk: clk, f: newLogStore(clk)}, f)
	})
}

func withHarness(t *testing.T, h *harness, f func(t *testing.T, h *harness)) {
	// Runs last: whatever a test injected, sessions close cleanly.
	t.Cleanup(h.f.reset)
	f(t, h)
}

// newSession returns a session of keeper on the harness's store, observed
// by rec if not nil, and closed at the end of the test.
func (h *harness) newSession(keeper string, rec *recorder, opts ...lock.SessionOption) *lock.Session {
	h.t.Helper()
	all := []lock.SessionOption{lock.WithKeeperID(keeper)}
	if rec != nil {
		all = append(all, lock.WithObserver(rec))
	}
	s, err := lock.NewSession(h.f, append(all, opts...)...)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		h.f.reset()
		if err := s.Close(); err != nil {
			h.t.Errorf("close session %s: %v", keeper, err)
		}
	})
	return s
}

func (h *harness) newRunner(keeper string, opts ...runner.Option) (*runner.LeaderAwareRunner, *recorder) {
	h.t.Helper()
	rec := &recorder{f: h.f, name: keeper}
	r, err := runner.New(h.newSession(keeper, rec), lockName, append(rec.options(), opts...)...)
	if err != nil {
		h.t.Fatal(err)
	}
	return r, rec
}

// settle waits until every other goroutine of the test is parked.
func (h *harness) settle() { synctest.Wait() }

// advanceTo moves the fake clock to at, once everything is parked, and
// waits for what that set off.
func (h *harness) advanceTo(at time.Time) {
	h.t.Helper()
	h.settle()
	d := at.Sub(h.clk.Now())
	if d < 0 {
		h.t.Fatalf("advanceTo %v: clock is already at %v", at, h.clk.Now())
	}
	if h.fake != nil {
		h.fake.Advance(d)
	} else {
		time.Sleep(d) // every timer on the way fires at its instant
	}
	h.settle()
}

// advance moves the fake clock by d (advanceTo).
func (h *harness) advance(d time.Duration) { h.advanceTo(h.clk.Now().Add(d)) }

// recorder counts callbacks, notes them in the fake's sequence, and is the
// observer of its runner's session.
type recorder struct {
	f       *logStore
	name    string
	mu      sync.Mutex
	started []uint64
	stopped int
	leaders []string
	events  []lock.Event
}

func (c *recorder) Observe(e lock.Event) {
	c.mu.Lock()
	c.events = append(c.events, e)
	c.mu.Unlock()
}

func (c *recorder) options() []runner.Option {
	return []runner.Option{
		runner.OnStartedLeading(func(fence uint64) {
			c.mu.Lock()
			c.started = append(c.started, fence)
			c.mu.Unlock()
			c.f.note("started:" + c.name)
		}),
		runner.OnStoppedLeading(func() {
			c.mu.Lock()
			c.stopped++
			c.mu.Unlock()
			c.f.note("stopped:" + c.name)
		}),
		runner.OnNewLeader(func(id string) {
			c.mu.Lock()
			c.leaders = append(c.leaders, id)
			c.mu.Unlock()
		}),
	}
}

// eventsOf returns the events of kind so far.
func (c *recorder) eventsOf(kind lock.EventKind) []lock.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []lock.Event
	for _, e := range c.events {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// wantLeaders checks, once everything is parked, that OnNewLeader saw
// exactly want, in order, and LeaderSeen reported each once.
func (c *recorder) wantLeaders(t *testing.T, want ...string) {
	t.Helper()
	synctest.Wait()
	c.mu.Lock()
	got := slices.Clone(c.leaders)
	c.mu.Unlock()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: OnNewLeader saw %v, want %v", c.name, got, want)
	}
	var seen []string
	for _, e := range c.eventsOf(lock.LeaderSeen) {
		seen = append(seen, e.Leader)
		if e.LockID != lockName || e.KeeperID != c.name {
			t.Fatalf("%s: LeaderSeen %+v: wrong lock or keeper", c.name, e)
		}
	}
	if !slices.Equal(seen, want) {
		t.Fatalf("%s: LeaderSeen events %v, want %v", c.name, seen, want)
	}
}

// wantCounts checks, once everything is parked, the callbacks so far, and
// that TermStarted and TermEnded fired exactly as often, with the same
// fences.
func (c *recorder) wantCounts(t *testing.T, started, stopped int) {
	t.Helper()
	synctest.Wait()
	c.mu.Lock()
	fences, p := slices.Clone(c.started), c.stopped
	c.mu.Unlock()
	if len(fences) != started || p != stopped {
		t.Fatalf("%s: OnStartedLeading %d times, OnStoppedLeading %d times; want %d and %d",
			c.name, len(fences), p, started, stopped)
	}
	begun, ended := c.eventsOf(lock.TermStarted), c.eventsOf(lock.TermEnded)
	if len(begun) != started || len(ended) != stopped {
		t.Fatalf("%s: %d TermStarted and %d TermEnded events; want %d and %d", c.name, len(begun), len(ended), started, stopped)
	}
	for i, e := range begun {
		if e.Fence != fences[i] || e.LockID != lockName || e.KeeperID != c.name || e.Remaining <= 0 {
			t.Fatalf("%s: TermStarted %+v; want fence %d, lock %s, a positive Remaining", c.name, e, fences[i], lockName)
		}
	}
	for i, e := range ended {
		if e.Fence != fences[i] || e.LockID != lockName || e.Reason == "" || e.Took < 0 {
			t.Fatalf("%s: TermEnded %+v; want fence %d and a reason", c.name, e, fences[i])
		}
	}
}

// lastEnd returns the last TermEnded event.
func (c *recorder) lastEnd(t *testing.T) lock.Event {
	t.Helper()
	ended := c.eventsOf(lock.TermEnded)
	if len(ended) == 0 {
		t.Fatalf("%s: no TermEnded event", c.name)
	}
	return ended[len(ended)-1]
}

// wantEnd checks the last TermEnded event's reason and error.
func (c *recorder) wantEnd(t *testing.T, reason string, is error) lock.Event {
	t.Helper()
	e := c.lastEnd(t)
	if e.Reason != reason || (is == nil) != (e.Err == nil) || (is != nil && !errors.Is(e.Err, is)) {
		t.Fatalf("%s: TermEnded reason %q err %v; want %q, %v", c.name, e.Reason, e.Err, reason, is)
	}
	return e
}

// run is one execution of a probe's task.
type run struct {
	ctx   context.Context
	fence uint64
	stop  chan error    // makes the task return this
	beat  chan struct{} // makes the task call Heartbeat, then answers
	done  chan struct{} // closed when the task returned

	// Set before done is closed.
	cause       error     // context.Cause when the task saw its context end
	cancelledAt time.Time // fake clock then
}

// probe is a task that reports each run and returns when told, or when its
// context ends unless stubborn.
type probe struct {
	clk      clockwork.Clock
	f        *logStore
	name     string
	stubborn bool
	runs     chan *run
}

func (h *harness) probe(name string) *probe {
	return &probe{clk: h.clk, f: h.f, name: name, runs: make(chan *run, 100)}
}

func (p *probe) task(ctx context.Context) error {
	fence, _ := runner.FenceFrom(ctx)
	rn := &run{ctx: ctx, fence: fence,
		stop: make(chan error, 1), beat: make(chan struct{}), done: make(chan struct{})}
	p.f.note("task-start:" + p.name)
	p.runs <- rn
	defer func() {
		p.f.note("task-return:" + p.name)
		close(rn.done)
	}()
	ctxDone := ctx.Done()
	if p.stubborn {
		ctxDone = nil
	}
	for {
		select {
		case <-ctxDone:
			rn.cause, rn.cancelledAt = context.Cause(ctx), p.clk.Now()
			return ctx.Err()
		case err := <-rn.stop:
			return err
		case <-rn.beat:
			runner.Heartbeat(ctx)
			rn.beat <- struct{}{}
		}
	}
}

func (p *probe) next(t *testing.T) *run {
	t.Helper()
	select {
	case rn := <-p.runs:
		return rn
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: task did not start", p.name)
		return nil
	}
}

func (rn *run) heartbeat(t *testing.T) {
	t.Helper()
	select {
	case rn.beat <- struct{}{}:
		<-rn.beat
	case <-rn.done:
		t.Fatalf("heartbeat: task already returned (cause %v)", rn.cause)
	case <-time.After(5 * time.Second):
		t.Fatal("heartbeat: task not listening")
	}
}

func (rn *run) wait(t *testing.T) {
	t.Helper()
	select {
	case <-rn.done:
	case <-time.After(5 * time.Second):
		t.Fatal("task did not return")
	}
}

// running asserts the task's context has not ended.
func (rn *run) running(t *testing.T) {
	t.Helper()
	if err := rn.ctx.Err(); err != nil {
		t.Fatalf("task context ended: %v (cause %v)", err, context.Cause(rn.ctx))
	}
}

// goRun starts r.Run. stop cancels it and returns its error; cancel only
// cancels it; errc receives the error if stop is not used. Cleanup cancels
// Run and waits for it.
func goRun(t *testing.T, r *runner.LeaderAwareRunner, task func(context.Context) error) (stop func() error, cancel context.CancelFunc, errc chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc = make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		errc <- r.Run(ctx, task)
	}()
	stop = func() error {
		cancel()
		return waitErr(t, errc)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Error("Run still running at cleanup")
		}
	})
	return stop, cancel, errc
}

func waitErr(t *testing.T, errc chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// returned reports, once everything is parked, whether Run returned.
func returned(errc chan error) bool {
	synctest.Wait()
	return len(errc) > 0
}

// wantOrder checks that each of want occurs in seq, in that order.
func wantOrder(t *testing.T, seq []string, want ...string) {
	t.Helper()
	pos := -1
	for _, w := range want {
		i := slices.Index(seq[pos+1:], w)
		if i < 0 {
			t.Fatalf("sequence %v: %q missing or out of order (want order %v)", seq, w, want)
		}
		pos += 1 + i
	}
}

// Operations of the store, as the tests name them.
const (
	opAcquire = locktest.OpAcquire
	opRenew   = locktest.OpRenew
	opRelease = locktest.OpRelease
	opHolder  = locktest.OpHolder
)

// call is one completed store call for one lock, as the tests read it.
type call struct {
	op     locktest.Op
	keeper string    // for opHolder, the holder found
	start  time.Time // store clock when the call began
	end    time.Time // store clock when it returned
	ok     bool      // acquired / renewed / released / found
	err    error
	fence  uint64 // of the term acquired, released (if named) or found
}

// logStore is the harness's locktest.Store with what the runner tests read
// of it: each operation's completed calls in a channel (next, none), and
// one sequence of calls and the tests' notes (callbacks, task starts and
// returns) in the order they happened.
type logStore struct {
	*locktest.Store
	mu     sync.Mutex
	seq    []string
	events map[locktest.Op]chan call
}

func newLogStore(clk clockwork.Clock, opts ...locktest.Option) *logStore {
	f := &logStore{
		Store:  locktest.New(append([]locktest.Option{locktest.WithClock(clk), locktest.WithTTL(fTTL)}, opts...)...),
		events: make(map[locktest.Op]chan call),
	}
	for _, op := range []locktest.Op{opAcquire, opRenew, opRelease, opHolder} {
		f.events[op] = make(chan call, 1000)
	}
	f.AfterCall(f.record)
	return f
}

// record logs c, one call per lock.
func (f *logStore) record(c locktest.Call) {
	for i, id := range c.LockIDs {
		r := call{op: c.Op, keeper: c.KeeperID, start: c.Start, end: c.End, err: c.Err}
		switch c.Op {
		case opAcquire:
			for _, g := range c.Acquisition.Granted {
				if g.LockID == id {
					r.ok, r.fence = true, g.Fence
				}
			}
		case opRenew:
			r.ok = slices.Contains(c.Renewal.Held, id)
		case opRelease:
			r.ok, r.fence = c.Released > 0, c.Terms[i].Fence
		case opHolder:
			r.ok, r.keeper, r.fence = c.Err == nil, c.Holder.KeeperID, c.Holder.Fence
		}
		f.mu.Lock()
		f.seq = append(f.seq, string(r.op)+":"+r.keeper)
		f.mu.Unlock()
		f.events[c.Op] <- r
	}
}

// reset removes the tests' faults and hooks, so that sessions close
// cleanly.
func (f *logStore) reset() {
	f.BeforeCall(nil)
	f.Restore()
}

func (f *logStore) note(s string) {
	f.mu.Lock()
	f.seq = append(f.seq, s)
	f.mu.Unlock()
}

func (f *logStore) sequence() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.seq)
}

// count returns how many calls of op (by keeper, if not empty) completed.
func (f *logStore) count(op locktest.Op, keeper string) int {
	n := 0
	for _, c := range f.Calls(op) {
		if !c.End.IsZero() && (keeper == "" || c.KeeperID == keeper) {
			n++
		}
	}
	return n
}

// next waits for the next completed call of op. In a synctest bubble the
// 5s pass at once if nothing else can happen.
func (f *logStore) next(t testing.TB, op locktest.Op) call {
	t.Helper()
	select {
	case c := <-f.events[op]:
		return c
	case <-time.After(5 * time.Second):
		t.Fatalf("no %s call", op)
		return call{}
	}
}

// none asserts that no call of op completed since the last next.
func (f *logStore) none(t testing.TB, op locktest.Op) {
	t.Helper()
	select {
	case c := <-f.events[op]:
		t.Fatalf("unexpected %s call %+v", op, c)
	default:
	}
}
