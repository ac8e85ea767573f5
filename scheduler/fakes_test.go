package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/lock"
)

// fakeLocker keeps leases in memory, timed by a fake clock, with the
// semantics of lock.Locker.
type fakeLocker struct {
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

type fakeLease struct {
	keeper  string
	expires time.Time
}

func newFakeLocker(clk clockwork.Clock, ttl time.Duration) *fakeLocker {
	return &fakeLocker{clock: clk, ttl: ttl, leases: map[string]fakeLease{}}
}

func (l *fakeLocker) TTL() time.Duration { return l.ttl }

func (l *fakeLocker) AcquireLocks(ctx context.Context, keeper string, ids ...string) (lock.Acquisition, error) {
	var a lock.Acquisition
	for _, id := range ids {
		lease, ok := l.acquire(id, keeper)
		if ok {
			a.Leases = append(a.Leases, lease)
		} else {
			a.Refused = append(a.Refused, id)
		}
	}
	return a, nil
}

func (l *fakeLocker) acquire(id, keeper string) (lock.Lease, bool) {
	l.mu.Lock()
	hook := l.onAcquire
	sent := l.clock.Now() // the deadline counts from the sending
	l.mu.Unlock()
	if hook != nil {
		hook(id)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	if cur, ok := l.leases[id]; ok && cur.keeper != keeper && now.Before(cur.expires) {
		return lock.Lease{}, false
	}
	l.fence++
	l.acquireOK++
	l.leases[id] = fakeLease{keeper: keeper, expires: sent.Add(l.ttl)}
	return lock.Lease{LockID: id, KeeperID: keeper, Fence: l.fence, Deadline: sent.Add(l.ttl)}, true
}

func (l *fakeLocker) Renew(ctx context.Context, keeper string, ids ...string) (lock.Renewal, error) {
	l.mu.Lock()
	l.renewals++
	hook := l.onRenew
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
	now := l.clock.Now()
	r := lock.Renewal{Deadline: now.Add(l.ttl)}
	for _, id := range ids {
		if cur, ok := l.leases[id]; ok && cur.keeper == keeper && now.Before(cur.expires) {
			l.leases[id] = fakeLease{keeper: keeper, expires: now.Add(l.ttl)}
			r.Held = append(r.Held, id)
		} else {
			r.Lost = append(r.Lost, id)
		}
	}
	return r, nil
}

func (l *fakeLocker) ReleaseLocks(_ context.Context, keeper string, ids ...string) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releases++
	if l.releaseFailures > 0 {
		l.releaseFailures--
		return 0, fmt.Errorf("release %q: %w", ids, errBoom)
	}
	n := 0
	for _, id := range ids {
		if cur, ok := l.leases[id]; ok && cur.keeper == keeper {
			delete(l.leases, id)
			n++
		}
	}
	return n, nil
}

func (l *fakeLocker) setRenewErr(err error) {
	l.mu.Lock()
	l.renewErr = err
	l.mu.Unlock()
}

// take makes keeper hold id, as another instance would.
func (l *fakeLocker) take(id, keeper string) {
	l.mu.Lock()
	l.leases[id] = fakeLease{keeper: keeper, expires: l.clock.Now().Add(l.ttl)}
	l.mu.Unlock()
}

// drop releases id whoever holds it, as its holder would.
func (l *fakeLocker) drop(id string) {
	l.mu.Lock()
	delete(l.leases, id)
	l.mu.Unlock()
}

func (l *fakeLocker) holder(id string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur, ok := l.leases[id]; ok && l.clock.Now().Before(cur.expires) {
		return cur.keeper
	}
	return ""
}

func (l *fakeLocker) counts() (acquired, renewals, releases int) {
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

// rig is a Scheduler on fakes driven by a fake clock.
type rig struct {
	t      *testing.T
	clock  *clockwork.FakeClock
	locker *fakeLocker
	store  *fakeStore
	s      *Scheduler
}

// epoch is a whole minute, so that firings are easy to reason about.
var epoch = time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)

func newRig(t *testing.T, ttl time.Duration, opts ...Option) *rig {
	t.Helper()
	clk := clockwork.NewFakeClockAt(epoch)
	r := &rig{t: t, clock: clk, locker: newFakeLocker(clk, ttl), store: newFakeStore(clk)}
	cfg, err := buildConfig(append([]Option{WithClock(clk)}, opts...))
	if err != nil {
		t.Fatal(err)
	}
	r.s, err = newScheduler(r.store, r.locker, "me", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// settle waits until n timers are armed: with the scheduler's loop and
// every run's supervisor parked, nothing moves until the clock does.
func (r *rig) settle(n int) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.clock.BlockUntilContext(ctx, n); err != nil {
		r.t.Fatalf("waiting for %d timers: %v", n, err)
	}
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

// stepWhileBusy advances the clock by step whenever n timers are armed,
// while a firing is in progress, and returns the clock's reading once none
// is. It fails the test if the clock would pass limit.
func (r *rig) stepWhileBusy(n int, step time.Duration, limit time.Time) time.Time {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.busy() {
		if time.Now().After(deadline) {
			r.t.Fatalf("firing still in progress at %v", r.clock.Now().Sub(epoch))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := r.clock.BlockUntilContext(ctx, n)
		cancel()
		if err != nil || !r.busy() {
			continue // the firing may have ended instead
		}
		if !r.clock.Now().Add(step).Before(limit) {
			r.t.Fatalf("firing still in progress at %v", r.clock.Now().Sub(epoch))
		}
		r.clock.Advance(step)
	}
	return r.clock.Now()
}

// advanceTo settles n timers, then moves the clock to t.
func (r *rig) advanceTo(n int, t time.Time) {
	r.t.Helper()
	r.settle(n)
	if d := t.Sub(r.clock.Now()); d > 0 {
		r.clock.Advance(d)
	}
}

func (r *rig) stop() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.s.Stop(ctx); err != nil {
		r.t.Fatal(err)
	}
}

// recv waits for a value from c.
func recv[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

var errBoom = errors.New("boom")
