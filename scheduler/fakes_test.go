package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/lock"
)

// fakeLocks is a lock.Store that keeps leases in memory, with the semantics
// of lock.Locker. Its clock is the test's: the real clock, whose time is
// fake inside a synctest bubble.
type fakeLocks struct {
	clock clockwork.Clock
	ttl   time.Duration

	mu        sync.Mutex
	leases    map[string]fakeLease
	fence     uint64
	renewErr  error // returned by Renew while set
	renewals  int
	releases  int
	acquireOK int
	// onAcquire, if set, is called by AcquireLocks for each lock, with
	// its id, before anything else: a test can let time pass there.
	onAcquire func(id string)
	// onRenew, if set, is called by Renew before anything else; a non-nil
	// error is returned. A test can make a renewal hang until ctx is done.
	onRenew func(ctx context.Context) error
	// releaseFailures is how many of the next releases fail (without
	// releasing).
	releaseFailures int
}

var _ lock.Store = (*fakeLocks)(nil)

type fakeLease struct {
	keeper  string
	fence   uint64
	expires time.Time
}

func newFakeLocks(ttl time.Duration) *fakeLocks {
	return &fakeLocks{clock: clockwork.NewRealClock(), ttl: ttl, leases: map[string]fakeLease{}}
}

func (l *fakeLocks) TTL() time.Duration     { return l.ttl }
func (l *fakeLocks) Clock() clockwork.Clock { return l.clock }
func (l *fakeLocks) now() time.Time         { return l.clock.Now() }

func (l *fakeLocks) AcquireLocks(_ context.Context, keeper string, ids ...string) (lock.Acquisition, error) {
	var a lock.Acquisition
	for _, id := range ids {
		g, ok := l.acquire(id, keeper)
		if ok {
			a.Granted = append(a.Granted, g)
		} else {
			a.Refused = append(a.Refused, id)
		}
	}
	return a, nil
}

func (l *fakeLocks) acquire(id, keeper string) (lock.Grant, bool) {
	l.mu.Lock()
	hook := l.onAcquire
	sent := l.now() // the deadline counts from the sending
	l.mu.Unlock()
	if hook != nil {
		hook(id)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if cur, ok := l.leases[id]; ok && cur.keeper != keeper && now.Before(cur.expires) {
		return lock.Grant{}, false
	}
	l.fence++
	l.acquireOK++
	l.leases[id] = fakeLease{keeper: keeper, fence: l.fence, expires: sent.Add(l.ttl)}
	return lock.Grant{LockID: id, KeeperID: keeper, Fence: l.fence, AcquiredAt: now,
		Deadline: sent.Add(l.ttl), Sent: sent}, true
}

func (l *fakeLocks) Renew(ctx context.Context, keeper string, ids ...string) (lock.Renewal, error) {
	l.mu.Lock()
	l.renewals++
	hook := l.onRenew
	sent := l.now()
	l.mu.Unlock()
	if hook != nil {
		if err := hook(ctx); err != nil {
			return lock.Renewal{}, err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.renewErr != nil {
		return lock.Renewal{}, l.renewErr
	}
	now := l.now()
	r := lock.Renewal{Deadline: sent.Add(l.ttl)}
	for _, id := range ids {
		if cur, ok := l.leases[id]; ok && cur.keeper == keeper && now.Before(cur.expires) {
			cur.expires = now.Add(l.ttl)
			l.leases[id] = cur
			r.Held = append(r.Held, id)
		} else {
			r.Lost = append(r.Lost, id)
		}
	}
	return r, nil
}

func (l *fakeLocks) ReleaseTerms(_ context.Context, keeper string, terms ...lock.Term) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releases++
	if l.releaseFailures > 0 {
		l.releaseFailures--
		return 0, fmt.Errorf("release %v: %w", terms, errBoom)
	}
	n := 0
	for _, t := range terms {
		id := t.LockID
		if cur, ok := l.leases[id]; ok && cur.keeper == keeper && (t.Fence == 0 || t.Fence == cur.fence) {
			delete(l.leases, id)
			n++
		}
	}
	return n, nil
}

func (l *fakeLocks) Holder(_ context.Context, id string) (lock.Holder, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur, ok := l.leases[id]; ok && l.now().Before(cur.expires) {
		return lock.Holder{LockID: id, KeeperID: cur.keeper, Fence: cur.fence, ExpiresAt: cur.expires}, nil
	}
	return lock.Holder{}, fmt.Errorf("holder of %q: %w", id, lock.ErrNotHeld)
}

func (l *fakeLocks) setRenewErr(err error) {
	l.mu.Lock()
	l.renewErr = err
	l.mu.Unlock()
}

// take makes keeper hold id, as another instance would.
func (l *fakeLocks) take(id, keeper string) {
	l.mu.Lock()
	l.fence++
	l.leases[id] = fakeLease{keeper: keeper, fence: l.fence, expires: l.now().Add(l.ttl)}
	l.mu.Unlock()
}

// drop releases id whoever holds it, as its holder would.
func (l *fakeLocks) drop(id string) {
	l.mu.Lock()
	delete(l.leases, id)
	l.mu.Unlock()
}

func (l *fakeLocks) holder(id string) string {
	h, err := l.Holder(context.Background(), id)
	if err != nil {
		return ""
	}
	return h.KeeperID
}

func (l *fakeLocks) counts() (acquired, renewals, releases int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acquireOK, l.renewals, l.releases
}

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

// rig is a Scheduler on fakes, with a real Session, in a synctest bubble:
// its clock is the real clock, whose time only moves when every goroutine
// of the test waits for it.
type rig struct {
	t       *testing.T
	locks   *fakeLocks
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
	return rigOn(t, newFakeLocks(ttl), sopts, opts...)
}

// rigOn is newRigWith on locks.
func rigOn(t *testing.T, locks *fakeLocks, sopts []lock.SessionOption, opts ...Option) *rig {
	t.Helper()
	if !locks.now().Equal(epoch) {
		t.Fatalf("a rig is made at the start of a synctest bubble, not at %v", locks.now())
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
