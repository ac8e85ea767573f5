package runner_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/simdb"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
)

// newSimCandidates is newSimCluster with options of each runner's own:
// runner i gets opts[i].
func newSimCandidates(t testing.TB, ttl time.Duration, opts ...[]runner.Option) *cluster {
	t.Helper()
	srv := simdb.NewServer(simdb.MongoDB, 0)
	i := 0
	return newClusterEach(t, ttl, func() (*mongo.Database, fault) {
		f := mongotest.NewSimFault(simRTT)
		i++
		client, err := srv.NewLink(fmt.Sprintf("k%d", i-1), f.Plan).Connect(nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
		return client.Database("app"), f
	}, opts)
}

// newClusterEach is newClusterOn with len(opts) runners, runner i with
// opts[i].
func newClusterEach(t testing.TB, ttl time.Duration, connect func() (*mongo.Database, fault), opts [][]runner.Option) *cluster {
	t.Helper()
	c := newClusterOn(t, 0, ttl, connect)
	for i, o := range opts {
		c.add(i, ttl, connect, o)
	}
	return c
}

// noStart asserts that no task starts within d.
func (c *cluster) noStart(d time.Duration, why string) {
	c.t.Helper()
	var after <-chan time.Time
	if d > 0 {
		after = time.After(d)
	}
	select {
	case tm := <-c.starts:
		c.t.Fatalf("%s: %s started a term (fence %d)", why, tm.keeper, tm.fence)
	case <-after:
	default:
		if d > 0 {
			select {
			case tm := <-c.starts:
				c.t.Fatalf("%s: %s started a term (fence %d)", why, tm.keeper, tm.fence)
			case <-after:
			}
		}
	}
}

func TestCandidateOptions(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	lk, err := lock.New(db)
	if err != nil {
		t.Fatal(err)
	}
	s, err := lock.NewSession(lk)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tc := range []struct {
		name string
		opts []runner.Option
		want string
	}{
		{"observer with priority", []runner.Option{runner.WithNeverLead(), runner.WithPriority(1)}, "WithNeverLead and WithPriority"},
		{"zero grace", []runner.Option{runner.WithPreferenceGrace(0)}, "WithPreferenceGrace"},
		{"negative grace", []runner.Option{runner.WithPreferenceGrace(-time.Second)}, "WithPreferenceGrace"},
	} {
		_, err := runner.New(s, "leader", tc.opts...)
		if !errors.Is(err, runner.ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalidOption naming %s", tc.name, err, tc.want)
		}
	}
	// A store that cannot list candidates is refused a priority.
	fs, err := lock.NewSession(newLogStore(s.Clock()))
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	if _, err := runner.New(fs, "leader", runner.WithPriority(1)); !errors.Is(err, runner.ErrInvalidOption) || !strings.Contains(err.Error(), "LocksWithPrefix") {
		t.Errorf("priority on a store that cannot list: %v, want ErrInvalidOption naming LocksWithPrefix", err)
	}
}

func TestParseCandidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		id   string
		ok   bool
		want runner.Candidate
	}{
		{runner.CandidatePrefix("a/b") + "12/k1", true, runner.Candidate{LockID: "a/b", KeeperID: "k1", Priority: 12}},
		{runner.CandidatePrefix("x") + "-3/host/7", true, runner.Candidate{LockID: "x", KeeperID: "host/7", Priority: -3}},
		{"x@candidate/", false, runner.Candidate{}},
		{"x@candidate/p/k", false, runner.Candidate{}},
		{"x@candidate/1/", false, runner.Candidate{}},
		{"@candidate/1/k", false, runner.Candidate{}},
		{"plain", false, runner.Candidate{}},
	} {
		got, ok := runner.ParseCandidate(lock.Holder{LockID: tc.id})
		if ok != tc.ok || got != tc.want {
			t.Errorf("ParseCandidate(%q) = %+v, %v; want %+v, %v", tc.id, got, ok, tc.want, tc.ok)
		}
	}
}

// An observer never leads, even alone, and reports the leader once there
// is one. On the simulated server, in a synctest bubble.
func TestDBObserverNeverLeads(t *testing.T) {
	simTest(t, func(t *testing.T) {
		var mu sync.Mutex
		var seen []string
		c := newSimCandidates(t, dbTTL,
			[]runner.Option{runner.WithNeverLead(), runner.OnNewLeader(func(id string) {
				mu.Lock()
				seen = append(seen, id)
				mu.Unlock()
			})},
			nil)
		obs := c.runners[0]
		c.start(0)
		c.noStart(5*dbTTL, "an observer alone")
		if obs.IsLeader() || obs.Leader() != "" {
			t.Fatalf("observer alone: IsLeader %v, Leader %q", obs.IsLeader(), obs.Leader())
		}
		// RunTaskOnLeader is refused as well (Run is running: ErrBusy);
		// Run returns nil when stopped.
		if err := c.stop(0); err != nil {
			t.Fatalf("observer's Run: %v", err)
		}
		if ran, err := obs.RunTaskOnLeader(context.Background(), func(context.Context) error {
			t.Error("an observer ran a task")
			return nil
		}); ran || err != nil {
			t.Fatalf("observer's RunTaskOnLeader: ran=%v err=%v", ran, err)
		}
		c.start(0)
		c.start(1)
		tm := c.nextStart(5 * time.Second)
		if tm.keeper != "k1" {
			t.Fatalf("%s led", tm.keeper)
		}
		time.Sleep(2 * c.timings().RetryPeriod)
		if got := obs.Leader(); got != "k1" {
			t.Fatalf("observer: Leader %q, want k1", got)
		}
		mu.Lock()
		got := slices.Clone(seen)
		mu.Unlock()
		if !slices.Equal(got, []string{"k1"}) {
			t.Fatalf("observer: OnNewLeader saw %v, want [k1]", got)
		}
		c.stopAll()
	})
}

// A higher-priority candidate takes over once it has waited the grace,
// and only then: the leader's task is told why and returns before the new
// leader starts. On the simulated server, in a synctest bubble.
func TestDBPreferredCandidateAfterGrace(t *testing.T) {
	simTest(t, func(t *testing.T) {
		const grace = 2 * time.Second
		c := newSimCandidates(t, dbTTL,
			[]runner.Option{runner.WithPriority(1), runner.WithPreferenceGrace(grace)},
			[]runner.Option{runner.WithPriority(5), runner.WithPreferenceGrace(grace)})
		rp := c.timings().RetryPeriod
		c.start(0)
		first := c.nextStart(5 * time.Second)
		if first.keeper != "k0" {
			t.Fatalf("%s led first", first.keeper)
		}
		time.Sleep(grace) // k0's term is old enough: the candidate's wait counts
		c.start(1)
		waitFrom := time.Now()
		c.noStart(grace-2*rp, "before the grace")
		next := c.nextStart(grace + 5*rp)
		took := next.start.Sub(waitFrom)
		t.Logf("preferred candidate led %v after it began to wait (grace %v, retry period %v)", took, grace, rp)
		if next.keeper != "k1" || took < grace || took > grace+4*rp {
			t.Fatalf("%s led %v after k1 began to wait; want k1 within [%v, %v]", next.keeper, took, grace, grace+4*rp)
		}
		c.mu.Lock()
		cause, end := first.cause, first.end
		c.mu.Unlock()
		if !errors.Is(cause, runner.ErrSteppedDown) || errors.Is(cause, lock.ErrLeaseLost) ||
			!strings.Contains(cause.Error(), "preferred candidate k1 (priority 5)") {
			t.Fatalf("k0's task ended with cause %v; want ErrSteppedDown naming k1", cause)
		}
		if end.IsZero() || end.After(next.start) {
			t.Fatalf("k0's task ended at %v, the next began at %v", end, next.start)
		}
		// The lower one never takes it back while the preferred one leads.
		c.noStart(3*grace, "while the preferred candidate leads")
		c.stopAll()
	})
}

// Equal priorities never swap, however long the other waits.
func TestDBEqualPrioritiesNeverSwap(t *testing.T) {
	simTest(t, func(t *testing.T) {
		const grace = time.Second
		o := []runner.Option{runner.WithPriority(3), runner.WithPreferenceGrace(grace)}
		c := newSimCandidates(t, dbTTL, o, o, o)
		c.start(0)
		if tm := c.nextStart(5 * time.Second); tm.keeper != "k0" {
			t.Fatalf("%s led first", tm.keeper)
		}
		c.start(1)
		c.start(2)
		c.noStart(6*grace, "equal priorities")
		c.stopAll()
	})
}

// A preferred candidate that comes and goes cannot make leadership flap:
// one that never waits the grace through never takes over, and one that
// takes over and leaves again at once takes over at most once a grace.
func TestDBFlappingCandidateBounded(t *testing.T) {
	simTest(t, func(t *testing.T) {
		const grace = 2 * time.Second
		c := newSimCandidates(t, dbTTL,
			[]runner.Option{runner.WithPriority(0), runner.WithPreferenceGrace(grace)},
			[]runner.Option{runner.WithPriority(9), runner.WithPreferenceGrace(grace)})
		c.start(0)
		if tm := c.nextStart(5 * time.Second); tm.keeper != "k0" {
			t.Fatalf("%s led first", tm.keeper)
		}
		// Up for less than the grace, down, up again: never long enough.
		for range 6 {
			c.start(1)
			time.Sleep(grace * 3 / 4)
			if err := c.stop(1); err != nil {
				t.Fatalf("k1: %v", err)
			}
			time.Sleep(grace / 10)
		}
		c.noStart(0, "a candidate that never waited the grace")

		// Now it stays until it leads, then leaves at once, and comes
		// back: every takeover is a grace after the one before.
		const window = 6 * grace
		from := time.Now()
		var takeovers []time.Time
		c.start(1)
		for time.Since(from) < window {
			select {
			case tm := <-c.starts:
				if tm.keeper != "k1" {
					t.Fatalf("%s started while k1 waited", tm.keeper)
				}
				takeovers = append(takeovers, tm.start)
				if err := c.stop(1); err != nil {
					t.Fatalf("k1: %v", err)
				}
				if back := c.nextStart(5 * time.Second); back.keeper != "k0" {
					t.Fatalf("%s led after k1 left", back.keeper)
				}
				c.start(1)
			case <-time.After(window):
			}
		}
		t.Logf("%d preference handovers in %v (grace %v): %v", len(takeovers), window, grace, takeovers)
		if len(takeovers) < 2 || len(takeovers) > int(window/grace)+1 {
			t.Fatalf("%d handovers in %v with grace %v", len(takeovers), window, grace)
		}
		for i := 1; i < len(takeovers); i++ {
			if d := takeovers[i].Sub(takeovers[i-1]); d < grace {
				t.Errorf("handovers %v apart, less than the grace %v", d, grace)
			}
		}
		c.stopAll()
	})
}

// Stepping down waits for the work: across a Resign, a preference
// handover and a stop, no second leader's task starts while the first
// still runs, though each task takes a while to wind down once told. On
// the test server: k0 and k1 take turns through RunTaskOnLeader and
// Resign; k2 (priority 0) leads under Run until k3 (priority 5) has waited
// the grace; then k3 stops and k2 leads again.
func TestDBSteppingDownWaitsForTheTask(t *testing.T) {
	t.Parallel()
	const (
		linger = 200 * time.Millisecond // how long a task winds down
		grace  = 500 * time.Millisecond
		hang   = 30 * time.Second
	)
	name := mongotest.NewDatabase(t).Name()
	c := newClusterEach(t, dbTTL, func() (*mongo.Database, fault) {
		client, fault := mongotest.NewProxiedClient(t)
		return mongotest.Database(t, client, name), fault
	}, [][]runner.Option{
		nil, nil,
		{runner.WithPriority(0), runner.WithPreferenceGrace(grace)},
		{runner.WithPriority(5), runner.WithPreferenceGrace(grace)},
	})
	task := func(keeper string) func(context.Context) error {
		return func(ctx context.Context) error {
			fence, _ := runner.FenceFrom(ctx)
			tm := &term{keeper: keeper, fence: fence, start: time.Now()}
			c.mu.Lock()
			c.terms = append(c.terms, tm)
			c.mu.Unlock()
			c.starts <- tm
			<-ctx.Done()
			time.Sleep(linger) // the work winds down
			c.mu.Lock()
			tm.end, tm.cause = time.Now(), context.Cause(ctx)
			c.mu.Unlock()
			c.ends <- tm
			return ctx.Err()
		}
	}
	// runTasks calls RunTaskOnLeader on runner i until ctx ends.
	var wg sync.WaitGroup
	defer wg.Wait()
	runTasks := func(ctx context.Context, i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := c.runners[i]
			for ctx.Err() == nil {
				if _, err := r.RunTaskOnLeader(ctx, task(r.KeeperID())); err != nil && ctx.Err() == nil {
					t.Errorf("%s: RunTaskOnLeader: %v", r.KeeperID(), err)
					return
				}
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
	}
	wantStart := func(keeper string) *term {
		t.Helper()
		tm := c.nextStart(hang)
		if tm.keeper != keeper {
			t.Fatalf("%s started, want %s", tm.keeper, keeper)
		}
		return tm
	}

	// Resign, while k0's task runs: it is told why, and the lock goes once
	// it returned.
	res0 := make(chan error, 1)
	go func() {
		_, err := c.runners[0].RunTaskOnLeader(context.Background(), task("k0"))
		res0 <- err
	}()
	first := wantStart("k0")
	ctx1, stop1 := context.WithCancel(context.Background())
	defer stop1()
	runTasks(ctx1, 1)
	time.Sleep(5 * c.timings().RetryPeriod) // k1 campaigns, refused
	if err := c.runners[0].Resign(context.Background()); err != nil {
		t.Fatalf("k0: Resign: %v", err)
	}
	c.mu.Lock()
	cause, end := first.cause, first.end
	c.mu.Unlock()
	if end.IsZero() || !errors.Is(cause, runner.ErrSteppedDown) {
		t.Fatalf("Resign returned with k0's task ended at %v, cause %v; want ended, ErrSteppedDown", end, cause)
	}
	if err := waitErr(t, res0); !errors.Is(err, context.Canceled) {
		t.Fatalf("k0: RunTaskOnLeader returned %v, want the task's context.Canceled", err)
	}
	wantStart("k1")
	stop1()
	wg.Wait()
	if err := c.runners[1].Resign(context.Background()); err != nil {
		t.Fatalf("k1: Resign: %v", err)
	}

	// A preference handover.
	c.start(2)
	low := wantStart("k2")
	c.start(3)
	wantStart("k3")
	c.mu.Lock()
	cause = low.cause
	c.mu.Unlock()
	if !errors.Is(cause, runner.ErrSteppedDown) || !strings.Contains(cause.Error(), "k3") {
		t.Fatalf("k2's task ended with %v, want ErrSteppedDown naming k3", cause)
	}

	// A stop.
	if err := c.stop(3); err != nil {
		t.Fatalf("k3: Run: %v", err)
	}
	wantStart("k2")
	if err := c.stop(2); err != nil {
		t.Fatalf("k2: Run: %v", err)
	}
	c.checkNoOverlap()
	c.mu.Lock()
	defer c.mu.Unlock()
	t.Logf("%d terms, none overlapping, each task winding down for %v", len(c.terms), linger)
}

// A leader whose task ignores the step-down for its grace period is not
// released under the running task: the task is abandoned (Run returns
// ErrTaskDidNotStop, as when stopped), its lease is left to lapse, and only
// then does the preferred candidate lead. On the simulated server, in a
// synctest bubble.
func TestDBStubbornTaskLapsesOnStepDown(t *testing.T) {
	simTest(t, func(t *testing.T) {
		const (
			grace    = time.Second
			taskStop = 300 * time.Millisecond // the runner's grace period
			ignores  = 3 * time.Second        // how long the task ignores its context
		)
		c := newSimCandidates(t, dbTTL,
			[]runner.Option{runner.WithPriority(0), runner.WithPreferenceGrace(grace), runner.WithGracePeriod(taskStop)},
			[]runner.Option{runner.WithPriority(1), runner.WithPreferenceGrace(grace)})
		cancelled := make(chan time.Time, 1)
		returned := make(chan struct{})
		errc := make(chan error, 1)
		go func() {
			errc <- c.runners[0].Run(context.Background(), func(ctx context.Context) error {
				defer close(returned)
				c.starts <- &term{keeper: "k0", start: time.Now()}
				<-ctx.Done()
				cancelled <- time.Now()
				if !errors.Is(context.Cause(ctx), runner.ErrSteppedDown) {
					t.Errorf("k0's task cancelled with %v, want ErrSteppedDown", context.Cause(ctx))
				}
				time.Sleep(ignores)
				return nil
			})
		}()
		c.nextStart(5 * time.Second)
		time.Sleep(grace)
		c.start(1)
		var at time.Time
		select {
		case at = <-cancelled:
		case <-time.After(10 * grace):
			t.Fatal("k0 did not step down")
		}
		if err := waitErr(t, errc); !errors.Is(err, runner.ErrTaskDidNotStop) {
			t.Fatalf("k0's Run returned %v, want ErrTaskDidNotStop", err)
		}
		next := c.nextStart(10 * time.Second)
		took := next.start.Sub(at)
		t.Logf("k1 led %v after k0's task was told to stop (its grace %v, TTL %v)", took, taskStop, dbTTL)
		// Abandoned taskStop after the step-down and no longer renewed, its
		// lease lapses a TTL after its last renewal, at most a renew
		// interval before: it was not released under the running task.
		if lapse := taskStop + dbTTL - c.timings().RenewInterval; next.keeper != "k1" || took < lapse {
			t.Fatalf("%s led %v after the step-down; want k1, once the lease lapsed (%v)", next.keeper, took, lapse)
		}
		<-returned
		if err := c.stop(1); err != nil {
			t.Fatalf("k1: Run: %v", err)
		}
	})
}
