package lock_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/simdb"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
)

// newMemStore returns an in-memory store for the timing tests of
// Sessions. Create it inside a synctest bubble: its clock is the real one,
// which there reads the bubble's fake time, so pauses are measured exactly
// and time jumps whenever every goroutine waits.
func newMemStore(ttl time.Duration, opts ...locktest.Option) *locktest.Store {
	return locktest.New(append([]locktest.Option{locktest.WithTTL(ttl)}, opts...)...)
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

// mustLock takes m's lock, failing the test if it is refused.
func mustLock(t testing.TB, ctx context.Context, m *lock.Mutex) *lock.Lease {
	t.Helper()
	var l *lock.Lease
	ok, err := tryAgainOnError(ctx, func() (ok bool, err error) { l, ok, err = m.AcquireLock(ctx); return ok, err })
	if err != nil || !ok {
		t.Fatalf("acquire %q: ok=%v err=%v", m.LockID(), ok, err)
	}
	return l
}

// tryAgainOnError calls acquire, a single acquisition, up to three times
// while it fails with an error rather than a refusal: an acquisition is
// bounded by the renew deadline (two thirds of a second at a TTL of 1s),
// which a loaded machine can exceed (TestSemaphoreLapsedSlotTaken failed
// so under -race in a clean-clone .ci/run: "read the server's clock:
// context deadline exceeded"). Its outcome is then unknown, never a
// success; the next attempt takes the lock again if the first took it
// (the Session's own lease).
func tryAgainOnError(ctx context.Context, acquire func() (bool, error)) (bool, error) {
	var ok bool
	var err error
	for try := 0; try < 3 && ctx.Err() == nil; try++ {
		if ok, err = acquire(); err == nil {
			break
		}
	}
	return ok, err
}

// simRTT is how long a command of simPlan takes to the simulated server
// and back.
const simRTT = 2 * time.Millisecond

// simPlan gives every command a round trip of simRTT, half each way.
func simPlan(bson.D) simdb.Fate { return simdb.Fate{Send: simRTT / 2, Reply: simRTT / 2} }

// simLocker returns a Locker, with opts, on database "app" of the
// simulated server srv, through a link of its own called name whose
// commands meet plan (nil: no delay, no fault), connected with co (nil for
// none). For tests in a testing/synctest bubble: the server's clock and
// the link's delays are the bubble's time. Its client is disconnected at
// cleanup.
func simLocker(t testing.TB, srv *simdb.Server, name string, plan simdb.Plan, co *options.ClientOptions, opts ...lock.Option) (*lock.Locker, *simdb.Link, *mongo.Database) {
	t.Helper()
	link := srv.NewLink(name, plan)
	client, err := link.Connect(co)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	db := client.Database("app")
	l, err := lock.New(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l, link, db
}
