package scheduler

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
)

// fakeStore keeps claims and runs in memory, with the semantics of
// mongoStore.
type fakeStore struct {
	mu      sync.Mutex
	last    map[string]time.Time
	by      map[string]string
	run     map[string]*Run
	hist    []Run
	clock   clockwork.Clock
	onClaim func(job string, f time.Time) // called after a successful claim
	// onStart, if set, is called by start first: start applies the write
	// only if it says so, then returns its error if non-nil (a write that
	// failed, or that went through but whose reply was lost).
	onStart     func(ctx context.Context, r Run) (applied bool, err error)
	onHistory   func(r Run) // called by addHistory
	histWrites  int
	finishCalls int
}

func newFakeStore(clk clockwork.Clock) *fakeStore {
	return &fakeStore{last: map[string]time.Time{}, by: map[string]string{}, run: map[string]*Run{}, clock: clk}
}

func (s *fakeStore) claim(_ context.Context, job, _ string, f time.Time, keeper string) (bool, error) {
	s.mu.Lock()
	if last, ok := s.last[job]; ok && !last.Before(f) {
		s.mu.Unlock()
		return false, nil
	}
	s.last[job], s.by[job] = f, keeper
	hook := s.onClaim
	s.mu.Unlock()
	if hook != nil {
		hook(job, f)
	}
	return true, nil
}

func (s *fakeStore) start(ctx context.Context, r Run) (time.Time, bool, error) {
	s.mu.Lock()
	hook := s.onStart
	s.mu.Unlock()
	apply := func() (time.Time, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		cur := s.run[r.Job]
		if cur != nil && !cur.Scheduled.Before(r.Scheduled) &&
			!(cur.Scheduled.Equal(r.Scheduled) && cur.Keeper == r.Keeper && cur.Fence == r.Fence) {
			return time.Time{}, false
		}
		r.Start = s.clock.Now()
		s.run[r.Job] = &r
		return r.Start, true
	}
	if hook == nil {
		start, ok := apply()
		return start, ok, nil
	}
	var start time.Time
	ok := false
	applied, err := hook(ctx, r)
	if applied {
		start, ok = apply()
	}
	if err != nil {
		return time.Time{}, false, err
	}
	return start, ok, nil
}

func (s *fakeStore) finish(_ context.Context, r Run) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finishCalls++
	r.End = s.clock.Now()
	if cur := s.run[r.Job]; cur != nil && cur.Scheduled.Equal(r.Scheduled) && cur.Keeper == r.Keeper {
		s.run[r.Job] = &r
		return true, nil
	}
	return false, nil
}

func (s *fakeStore) addHistory(_ context.Context, r Run) error {
	s.mu.Lock()
	hook := s.onHistory
	s.mu.Unlock()
	if hook != nil {
		hook(r)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.histWrites++
	r.End = s.clock.Now()
	s.hist = append(s.hist, r)
	return nil
}

func (s *fakeStore) records(_ context.Context, names []string) ([]Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Record
	for _, n := range names {
		if last, ok := s.last[n]; ok {
			rec := Record{Name: n, LastClaimed: last, ClaimedBy: s.by[n]}
			if r := s.run[n]; r != nil {
				c := *r
				rec.LastRun = &c
			}
			out = append(out, rec)
		}
	}
	return out, nil
}

func (s *fakeStore) history(_ context.Context, job string, limit int) ([]Run, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Run
	for _, r := range s.hist {
		if r.Job == job {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Scheduled.After(out[k].Scheduled) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func (s *fakeStore) runs() []Run {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Run(nil), s.hist...)
}

// rig is a Scheduler on a fake store of claims and runs and an in-memory
// lock store, with a real Session, in a synctest bubble: its clock is the
// real clock, whose time only moves when every goroutine of the test waits
// for it.
type rig struct {
	t       *testing.T
	locks   *locktest.Store
	store   *fakeStore
	session *lock.Session
	obs     *recorder
	s       *Scheduler
}

// epoch is when every synctest bubble starts: a whole minute, so that
// firings are easy to reason about.
var epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// newRig makes a rig in the current synctest bubble, at its start. Its
// Scheduler is stopped and its Session closed when the test ends.
func newRig(t *testing.T, ttl time.Duration, opts ...Option) *rig {
	t.Helper()
	return newRigWith(t, ttl, nil, opts...)
}

// newRigWith is newRig with options for the Session.
func newRigWith(t *testing.T, ttl time.Duration, sopts []lock.SessionOption, opts ...Option) *rig {
	t.Helper()
	return rigOn(t, locktest.New(locktest.WithTTL(ttl)), sopts, opts...)
}

// rigOn is newRigWith on locks.
func rigOn(t *testing.T, locks *locktest.Store, sopts []lock.SessionOption, opts ...Option) *rig {
	t.Helper()
	if now := locks.Clock().Now(); !now.Equal(epoch) {
		t.Fatalf("a rig is made at the start of a synctest bubble, not at %v", now)
	}
	r := &rig{t: t, locks: locks, obs: newRecorder()}
	r.store = newFakeStore(r.locks.Clock())
	var err error
	r.session, err = lock.NewSession(r.locks,
		append([]lock.SessionOption{lock.WithKeeperID("me"), lock.WithObserver(r.obs)}, sopts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.session.Close() }) // after the Scheduler stopped
	cfg, err := buildConfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	r.s, err = newScheduler(r.store, r.session, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = r.s.Stop(ctx)
	})
	return r
}

// lockCounts returns how many locks the lock store granted, and how many
// renew and release calls it got.
func (r *rig) lockCounts() (acquired, renewals, releases int) {
	for _, c := range r.locks.Calls(locktest.OpAcquire) {
		acquired += len(c.Acquisition.Granted)
	}
	return acquired, len(r.locks.Calls(locktest.OpRenew)), len(r.locks.Calls(locktest.OpRelease))
}

// onCall runs fn at the start of every lock store call of op.
func (r *rig) onCall(op locktest.Op, fn func(ctx context.Context) error) {
	r.locks.BeforeCall(func(ctx context.Context, c locktest.Call) error {
		if c.Op != op {
			return nil
		}
		return fn(ctx)
	})
}

func (r *rig) busy() bool {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	for _, j := range r.s.order {
		if j.busy {
			return true
		}
	}
	return false
}

// idle checks that no firing is in progress once every goroutine waits:
// for the clock, or for something that will never come.
func (r *rig) idle() {
	r.t.Helper()
	synctest.Wait()
	if r.busy() {
		r.t.Fatalf("a firing is still in progress at %v", time.Since(epoch))
	}
}

// stop stops the Scheduler and closes the Session, and fails the test if
// either fails.
func (r *rig) stop() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.s.Stop(ctx); err != nil {
		r.t.Fatal(err)
	}
	if err := r.session.Close(); err != nil {
		r.t.Fatal(err)
	}
}

// recorder is an Observer that keeps every event, and passes each on to
// whoever waits for one (next).
type recorder struct {
	mu      sync.Mutex
	events  []lock.Event
	dropped bool // an event was not passed on: c was full
	c       chan lock.Event
}

func newRecorder() *recorder { return &recorder{c: make(chan lock.Event, 10000)} }

func (o *recorder) Observe(e lock.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, e)
	select {
	case o.c <- e:
	default:
		o.dropped = true
	}
}

// all returns the events of kinds (every event if none), in order.
func (o *recorder) all(kinds ...lock.EventKind) []lock.Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []lock.Event
	for _, e := range o.events {
		if len(kinds) == 0 || slices.Contains(kinds, e.Kind) {
			out = append(out, e)
		}
	}
	return out
}

// firingEvents returns the scheduler's events, those that name a job.
func (o *recorder) firingEvents() []lock.Event {
	return o.all(lock.FiringClaimed, lock.FiringLost, lock.FiringSkipped, lock.RunStarted, lock.RunEnded)
}

// next waits, letting time pass, for the next event of one of kinds.
func (r *rig) next(kinds ...lock.EventKind) lock.Event {
	r.t.Helper()
	timeout := time.After(10 * time.Minute)
	for {
		select {
		case e := <-r.obs.c:
			if slices.Contains(kinds, e.Kind) {
				return e
			}
		case <-timeout:
			r.obs.mu.Lock()
			dropped := r.obs.dropped
			r.obs.mu.Unlock()
			r.t.Fatalf("no %v event within 10 minutes (events dropped: %v)", kinds, dropped)
		}
	}
}

// end waits, letting time pass, for the event that ends a firing's try
// here: FiringLost, FiringSkipped or RunEnded.
func (r *rig) end() lock.Event {
	r.t.Helper()
	return r.next(lock.FiringLost, lock.FiringSkipped, lock.RunEnded)
}

// recv waits for a value from c, letting time pass.
func recv[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Minute):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

var errBoom = errors.New("boom")
