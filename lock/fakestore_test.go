package lock_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/lock"
)

// fakeStore is an in-memory lock.Store for the timing tests of Sessions.
// Create it inside a synctest bubble: its clock is the real one, which
// there reads the bubble's fake time, so pauses are measured exactly and
// time jumps whenever every goroutine waits.
type fakeStore struct {
	ttl   time.Duration
	clock clockwork.Clock

	mu    sync.Mutex
	locks map[string]fakeLock
	fence uint64
	calls []fakeCall
	hooks map[string]func(ctx context.Context, ids []string) error
	// unrecorded: calls are not kept (benchmarks).
	unrecorded bool
}

type fakeLock struct {
	keeper  string
	fence   uint64
	renewed time.Time
}

// fakeCall is one store call, as sent.
type fakeCall struct {
	op     string // "acquire", "renew", "release"
	at     time.Time
	keeper string
	ids    []string
}

var _ lock.Store = (*fakeStore)(nil)

func newFakeStore(ttl time.Duration) *fakeStore {
	return &fakeStore{
		ttl:   ttl,
		clock: clockwork.NewRealClock(),
		locks: make(map[string]fakeLock),
		hooks: make(map[string]func(context.Context, []string) error),
	}
}

// hook runs fn at the start of each op ("acquire", "renew", "release"),
// before anything is written; an error fails the call. nil removes it.
func (f *fakeStore) hook(op string, fn func(ctx context.Context, ids []string) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hooks[op] = fn
}

// begin records a call and runs its hook.
func (f *fakeStore) begin(ctx context.Context, op, keeperID string, ids []string) (time.Time, error) {
	f.mu.Lock()
	sent := f.clock.Now()
	if !f.unrecorded {
		f.calls = append(f.calls, fakeCall{op: op, at: sent, keeper: keeperID, ids: slices.Clone(ids)})
	}
	h := f.hooks[op]
	f.mu.Unlock()
	if h != nil {
		if err := h(ctx, ids); err != nil {
			return sent, err
		}
	}
	if ctx.Err() != nil {
		return sent, context.Cause(ctx) // as the Locker reports it: a timeout is a timeout
	}
	return sent, nil
}

func (f *fakeStore) live(l fakeLock, now time.Time) bool { return now.Sub(l.renewed) < f.ttl }

func (f *fakeStore) AcquireLocks(ctx context.Context, keeperID string, lockIDs ...string) (lock.Acquisition, error) {
	sent, err := f.begin(ctx, "acquire", keeperID, lockIDs)
	if err != nil {
		return lock.Acquisition{}, fmt.Errorf("fake acquire: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	var a lock.Acquisition
	for _, id := range lockIDs {
		if l, ok := f.locks[id]; ok && l.keeper != keeperID && f.live(l, now) {
			a.Refused = append(a.Refused, id)
			continue
		}
		f.fence++
		f.locks[id] = fakeLock{keeper: keeperID, fence: f.fence, renewed: now}
		a.Granted = append(a.Granted, lock.Grant{LockID: id, KeeperID: keeperID, Fence: f.fence,
			AcquiredAt: now, Deadline: sent.Add(f.ttl), Sent: sent})
	}
	return a, nil
}

func (f *fakeStore) Renew(ctx context.Context, keeperID string, lockIDs ...string) (lock.Renewal, error) {
	sent, err := f.begin(ctx, "renew", keeperID, lockIDs)
	if err != nil {
		return lock.Renewal{}, fmt.Errorf("fake renew: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	r := lock.Renewal{Deadline: sent.Add(f.ttl)}
	for _, id := range lockIDs {
		if l, ok := f.locks[id]; ok && l.keeper == keeperID && f.live(l, now) {
			l.renewed = now
			f.locks[id] = l
			r.Held = append(r.Held, id)
		} else {
			r.Lost = append(r.Lost, id)
		}
	}
	return r, nil
}

func (f *fakeStore) ReleaseTerms(ctx context.Context, keeperID string, terms ...lock.Term) (int, error) {
	lockIDs := make([]string, len(terms))
	for i, t := range terms {
		lockIDs[i] = t.LockID
	}
	if _, err := f.begin(ctx, "release", keeperID, lockIDs); err != nil {
		return 0, fmt.Errorf("fake release: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, t := range terms {
		id := t.LockID
		if l, ok := f.locks[id]; ok && l.keeper == keeperID && (t.Fence == 0 || t.Fence == l.fence) {
			delete(f.locks, id)
			n++
		}
	}
	return n, nil
}

func (f *fakeStore) Holder(_ context.Context, lockID string) (lock.Holder, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.locks[lockID]
	if !ok || !f.live(l, f.clock.Now()) {
		return lock.Holder{}, fmt.Errorf("holder of %q: %w", lockID, lock.ErrNotHeld)
	}
	return lock.Holder{LockID: lockID, KeeperID: l.keeper, Fence: l.fence, RenewedAt: l.renewed, ExpiresAt: l.renewed.Add(f.ttl)}, nil
}

func (f *fakeStore) TTL() time.Duration     { return f.ttl }
func (f *fakeStore) Clock() clockwork.Clock { return f.clock }

// holder returns the keeper holding id by the store's clock, "" if none.
func (f *fakeStore) holder(id string) string {
	h, err := f.Holder(context.Background(), id)
	if err != nil {
		return ""
	}
	return h.KeeperID
}

// put makes keeperID hold id from now on, as another process would.
func (f *fakeStore) put(id, keeperID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fence++
	f.locks[id] = fakeLock{keeper: keeperID, fence: f.fence, renewed: f.clock.Now()}
}

// drop deletes id whoever holds it (ForceRelease).
func (f *fakeStore) drop(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.locks, id)
}

// callsOf returns the calls of op so far.
func (f *fakeStore) callsOf(op string) []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeCall
	for _, c := range f.calls {
		if c.op == op {
			out = append(out, c)
		}
	}
	return out
}

// blockUntilDone is a hook of a call that hangs until its context ends,
// as one to a silenced server does.
func blockUntilDone(ctx context.Context, _ []string) error {
	<-ctx.Done()
	return context.Cause(ctx)
}

// recorder is an Observer keeping every event.
type recorder struct {
	mu     sync.Mutex
	events []lock.Event
	notify chan struct{}
}

func newRecorder() *recorder { return &recorder{notify: make(chan struct{}, 1)} }

func (r *recorder) Observe(e lock.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// all returns the events so far.
func (r *recorder) all() []lock.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// of returns the events of kind so far, for lockID if it is not empty.
func (r *recorder) of(kind lock.EventKind, lockID string) []lock.Event {
	var out []lock.Event
	for _, e := range r.all() {
		if e.Kind == kind && (lockID == "" || e.LockID == lockID) {
			out = append(out, e)
		}
	}
	return out
}

// reset forgets the events so far.
func (r *recorder) reset() {
	r.mu.Lock()
	r.events = nil
	r.mu.Unlock()
}

// await waits, in real time, until ok holds for the events or within
// passes.
func (r *recorder) await(t testing.TB, within time.Duration, what string, ok func([]lock.Event) bool) {
	t.Helper()
	timeout := time.NewTimer(within)
	defer timeout.Stop()
	for !ok(r.all()) {
		select {
		case <-r.notify:
		case <-timeout.C:
			t.Fatalf("no %s within %v; events: %v", what, within, kinds(r.all()))
		}
	}
}

func kinds(events []lock.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = fmt.Sprintf("%s %s", e.Kind, e.LockID)
		if e.Err != nil {
			out[i] += fmt.Sprintf(" (%v)", e.Err)
		}
	}
	return out
}

// newSession returns a Session on store, closed at cleanup (checking that
// Close succeeds).
func newSession(t testing.TB, store lock.Store, opts ...lock.SessionOption) *lock.Session {
	t.Helper()
	s, err := lock.NewSession(store, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close session: %v", err)
		}
	})
	return s
}

// newMutex returns a Mutex on id, failing the test on an error.
func newMutex(t testing.TB, s *lock.Session, id string) *lock.Mutex {
	t.Helper()
	m, err := s.Mutex(id)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// mustLock takes m's lock with one attempt, failing the test if it cannot.
func mustLock(t testing.TB, ctx context.Context, m *lock.Mutex) *lock.Lease {
	t.Helper()
	l, ok, err := m.AcquireLock(ctx)
	if err != nil || !ok {
		t.Fatalf("acquire %q: ok=%v err=%v", m.LockID(), ok, err)
	}
	return l
}
