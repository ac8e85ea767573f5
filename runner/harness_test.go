package runner_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/mongolock/mongolock/runner"
)

// Timings of the fast tests: lock.DefaultTTL and the defaults for it.
const (
	fTTL = 30 * time.Second
	fRI  = runner.DefaultRenewInterval // 10s
	fRD  = runner.DefaultRenewDeadline // 20s
	fRP  = runner.DefaultRetryPeriod   // 2s
)

const lockName = "leader"

// harness is one fake clock and one fakeLocker shared by runners.
type harness struct {
	t   *testing.T
	clk *clockwork.FakeClock
	f   *fakeLocker
}

func newHarness(t *testing.T) *harness {
	clk := clockwork.NewFakeClockAt(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	return &harness{t: t, clk: clk, f: newFake(clk, fTTL)}
}

// recorder counts callbacks and notes them in the fake's sequence.
type recorder struct {
	f       *fakeLocker
	name    string
	mu      sync.Mutex
	started []uint64
	stopped int
	leaders []string
	logs    chan string
	changed chan struct{} // signalled after each callback
}

func (c *recorder) options() []runner.Option {
	return []runner.Option{
		runner.OnStartedLeading(func(fence uint64) {
			c.mu.Lock()
			c.started = append(c.started, fence)
			c.mu.Unlock()
			c.signal()
			c.f.note("started:" + c.name)
		}),
		runner.OnStoppedLeading(func() {
			c.mu.Lock()
			c.stopped++
			c.mu.Unlock()
			c.signal()
			c.f.note("stopped:" + c.name)
		}),
		runner.OnNewLeader(func(id string) {
			c.mu.Lock()
			c.leaders = append(c.leaders, id)
			c.mu.Unlock()
			c.signal()
		}),
	}
}

func (c *recorder) signal() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

func (c *recorder) counts() (started, stopped int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.started), c.stopped
}

func (c *recorder) seenLeaders() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.leaders...)
}

// wantLeaders waits up to a second (real time) for OnNewLeader to have
// seen exactly want, in order.
func (c *recorder) wantLeaders(t *testing.T, want ...string) {
	t.Helper()
	deadline := time.After(time.Second)
	for {
		got := c.seenLeaders()
		if slices.Equal(got, want) {
			return
		}
		select {
		case <-c.changed:
		case <-deadline:
			t.Fatalf("%s: OnNewLeader saw %v, want %v", c.name, got, want)
		}
	}
}

// wantCounts checks the callbacks so far, allowing up to a second (real
// time) for callbacks that are due to arrive: a task can see its context end
// before OnStoppedLeading has run.
func (c *recorder) wantCounts(t *testing.T, started, stopped int) {
	t.Helper()
	deadline := time.After(time.Second)
	for {
		s, p := c.counts()
		if s == started && p == stopped {
			return
		}
		if s > started || p > stopped {
			t.Fatalf("%s: OnStartedLeading %d times, OnStoppedLeading %d times; want %d and %d",
				c.name, s, p, started, stopped)
		}
		select {
		case <-c.changed:
		case <-deadline:
			t.Fatalf("%s: OnStartedLeading %d times, OnStoppedLeading %d times; want %d and %d",
				c.name, s, p, started, stopped)
		}
	}
}

// logWatch passes a runner's log lines to the test log and their messages
// to a channel, so tests can wait for the runner to have done something.
type logWatch struct {
	tw   zerolog.TestWriter
	msgs chan string
}

func (w *logWatch) Write(p []byte) (int, error) {
	var line struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(p, &line) == nil {
		select {
		case w.msgs <- line.Message:
		default: // nobody is watching
		}
	}
	return w.tw.Write(p)
}

// waitLog waits for the runner to log msg, skipping other lines.
func (c *recorder) waitLog(t *testing.T, msg string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case m := <-c.logs:
			if m == msg {
				return
			}
		case <-deadline:
			t.Fatalf("%s did not log %q within 5s (real time)", c.name, msg)
		}
	}
}

func (h *harness) newRunner(keeper string, opts ...runner.Option) (*runner.LeaderAwareRunner, *recorder) {
	h.t.Helper()
	rec := &recorder{f: h.f, name: keeper, logs: make(chan string, 10000), changed: make(chan struct{}, 1)}
	log := zerolog.New(&logWatch{tw: zerolog.NewTestWriter(h.t), msgs: rec.logs}).Level(zerolog.DebugLevel)
	all := append([]runner.Option{runner.WithClock(h.clk), runner.WithLogger(log)}, rec.options()...)
	r, err := runner.New(h.f, lockName, keeper, append(all, opts...)...)
	if err != nil {
		h.t.Fatal(err)
	}
	return r, rec
}

// advanceTo moves the fake clock to at.
func (h *harness) advanceTo(at time.Time) {
	h.t.Helper()
	d := at.Sub(h.clk.Now())
	if d < 0 {
		h.t.Fatalf("advanceTo %v: clock is already at %v", at, h.clk.Now())
	}
	h.clk.Advance(d)
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
	f        *fakeLocker
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
		t.Fatalf("%s: task did not start within 5s (real time)", p.name)
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
		t.Fatal("task did not return within 5s (real time)")
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
		case <-time.After(5 * time.Second):
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
		t.Fatal("Run did not return within 5s (real time)")
		return nil
	}
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
