package runner_test

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

// Operation names a fakeStore records.
const (
	opAcquire = "acquire"
	opRenew   = "renew"
	opRelease = "release"
	opHolder  = "holder"
)

// call is one operation of one lock on a fakeStore, recorded when it
// completes.
type call struct {
	op     string
	keeper string
	start  time.Time // fake clock when the call began
	end    time.Time // fake clock when it returned
	ok     bool      // acquired / renewed / released / found
	err    error
	fence  uint64
}

type fakeDoc struct {
	keeper  string
	fence   uint64
	renewed time.Time
}

// fakeStore is an in-memory lock.Store on a fake clock, with faults
// injected by a hook. Leases expire TTL after their last acquire or renew,
// as with package lock; a grant's or renewal's Deadline is the call's start
// plus TTL minus cut. Tests wrap it in a real lock.Session.
type fakeStore struct {
	clock clockwork.Clock
	ttl   time.Duration

	mu    sync.Mutex
	cut   time.Duration // Deadline = start + ttl - cut
	docs  map[string]*fakeDoc
	fence uint64
	hook  func(ctx context.Context, op, keeper string) error
	calls []call
	seq   []string // ops and notes, in order

	events map[string]chan call
}

var _ lock.Store = (*fakeStore)(nil)

func newFake(clk clockwork.Clock, ttl time.Duration) *fakeStore {
	f := &fakeStore{
		clock:  clk,
		ttl:    ttl,
		cut:    time.Millisecond,
		docs:   make(map[string]*fakeDoc),
		fence:  1000,
		events: make(map[string]chan call),
	}
	for _, op := range []string{opAcquire, opRenew, opRelease, opHolder} {
		f.events[op] = make(chan call, 1000)
	}
	return f
}

// setHook installs a function called before every operation. A non-nil error
// is returned by the operation, which then does nothing.
func (f *fakeStore) setHook(h func(ctx context.Context, op, keeper string) error) {
	f.mu.Lock()
	f.hook = h
	f.mu.Unlock()
}

// failOps makes every operation in ops fail with err.
func (f *fakeStore) failOps(err error, ops ...string) {
	f.setHook(func(_ context.Context, op, _ string) error {
		if slices.Contains(ops, op) {
			return err
		}
		return nil
	})
}

func (f *fakeStore) note(s string) {
	f.mu.Lock()
	f.seq = append(f.seq, s)
	f.mu.Unlock()
}

func (f *fakeStore) sequence() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.seq...)
}

func (f *fakeStore) count(op, keeper string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c.op == op && (keeper == "" || c.keeper == keeper) {
			n++
		}
	}
	return n
}

// steal gives lockID to keeper, as if it had taken over an expired lease.
func (f *fakeStore) steal(lockID, keeper string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fence++
	f.docs[lockID] = &fakeDoc{keeper: keeper, fence: f.fence, renewed: f.clock.Now()}
}

func (f *fakeStore) before(ctx context.Context, op, keeper string) (time.Time, error) {
	start := f.clock.Now()
	f.mu.Lock()
	h := f.hook
	f.mu.Unlock()
	if h != nil {
		return start, h(ctx, op, keeper)
	}
	return start, nil
}

// record must be called with f.mu held.
func (f *fakeStore) record(c call) {
	c.end = f.clock.Now()
	f.calls = append(f.calls, c)
	f.seq = append(f.seq, c.op+":"+c.keeper)
	f.events[c.op] <- c
}

func (f *fakeStore) live(d *fakeDoc, now time.Time) bool {
	return d != nil && now.Sub(d.renewed) < f.ttl
}

func (f *fakeStore) TTL() time.Duration { return f.ttl }

func (f *fakeStore) Clock() clockwork.Clock { return f.clock }

func (f *fakeStore) AcquireLocks(ctx context.Context, keeperID string, lockIDs ...string) (lock.Acquisition, error) {
	start, err := f.before(ctx, opAcquire, keeperID)
	f.mu.Lock()
	defer f.mu.Unlock()
	var a lock.Acquisition
	for _, id := range lockIDs {
		c := call{op: opAcquire, keeper: keeperID, start: start, err: err}
		if err == nil {
			now := f.clock.Now()
			d := f.docs[id]
			if d != nil && d.keeper != keeperID && f.live(d, now) {
				a.Refused = append(a.Refused, id)
			} else {
				f.fence++
				f.docs[id] = &fakeDoc{keeper: keeperID, fence: f.fence, renewed: now}
				c.ok, c.fence = true, f.fence
				a.Granted = append(a.Granted, lock.Grant{
					LockID: id, KeeperID: keeperID, Fence: f.fence,
					AcquiredAt: now, Deadline: start.Add(f.ttl - f.cut), Sent: start,
				})
			}
		}
		f.record(c)
	}
	if err != nil {
		return lock.Acquisition{}, err
	}
	return a, nil
}

func (f *fakeStore) Renew(ctx context.Context, keeperID string, lockIDs ...string) (lock.Renewal, error) {
	start, err := f.before(ctx, opRenew, keeperID)
	f.mu.Lock()
	defer f.mu.Unlock()
	r := lock.Renewal{Deadline: start.Add(f.ttl - f.cut)}
	for _, id := range lockIDs {
		c := call{op: opRenew, keeper: keeperID, start: start, err: err}
		if err == nil {
			d := f.docs[id]
			if d != nil && d.keeper == keeperID && f.live(d, f.clock.Now()) {
				d.renewed = f.clock.Now()
				r.Held = append(r.Held, id)
				c.ok, c.fence = true, d.fence
			} else {
				r.Lost = append(r.Lost, id)
			}
		}
		f.record(c)
	}
	if err != nil {
		return lock.Renewal{}, err
	}
	return r, nil
}

func (f *fakeStore) ReleaseTerms(ctx context.Context, keeperID string, terms ...lock.Term) (int, error) {
	start, err := f.before(ctx, opRelease, keeperID)
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, t := range terms {
		id := t.LockID
		c := call{op: opRelease, keeper: keeperID, start: start, err: err}
		if d := f.docs[id]; err == nil && d != nil && d.keeper == keeperID && (t.Fence == 0 || t.Fence == d.fence) {
			delete(f.docs, id)
			c.ok, c.fence = true, d.fence
			n++
		}
		f.record(c)
	}
	if err != nil {
		return 0, err
	}
	return n, nil
}

func (f *fakeStore) Holder(ctx context.Context, lockID string) (lock.Holder, error) {
	start, err := f.before(ctx, opHolder, "")
	f.mu.Lock()
	defer f.mu.Unlock()
	c := call{op: opHolder, start: start, err: err}
	defer func() { f.record(c) }()
	if err != nil {
		return lock.Holder{}, err
	}
	d := f.docs[lockID]
	if !f.live(d, f.clock.Now()) {
		c.err = fmt.Errorf("holder of %q: %w", lockID, lock.ErrNotHeld)
		return lock.Holder{}, c.err
	}
	c.ok, c.keeper, c.fence = true, d.keeper, d.fence
	return lock.Holder{LockID: lockID, KeeperID: d.keeper, Fence: d.fence, RenewedAt: d.renewed,
		ExpiresAt: d.renewed.Add(f.ttl)}, nil
}

// next waits for the next completed call of op. In a synctest bubble the
// 5s pass at once if nothing else can happen.
func (f *fakeStore) next(t testing.TB, op string) call {
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
func (f *fakeStore) none(t testing.TB, op string) {
	t.Helper()
	select {
	case c := <-f.events[op]:
		t.Fatalf("unexpected %s call %+v", op, c)
	default:
	}
}
