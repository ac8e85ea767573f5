package metrics

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/scheduler"
)

// BenchmarkObserve is the cost of one event, by the events of a lock's
// life, a renewal, a firing and a term; "parallel" renews from every CPU
// at once.
func BenchmarkObserve(b *testing.B) {
	at := time.Now()
	sequences := []struct {
		name   string
		events func(i int) []lock.Event
	}{
		{"acquired+released", func(i int) []lock.Event {
			return []lock.Event{
				{Kind: lock.Acquired, KeeperID: "k", LockID: "a", Fence: uint64(i), Took: time.Millisecond},
				{Kind: lock.Released, KeeperID: "k", LockID: "a", Fence: uint64(i), Took: time.Millisecond},
			}
		}},
		{"renewed", func(int) []lock.Event {
			return []lock.Event{{Kind: lock.Renewed, KeeperID: "k", LockID: "a", Fence: 1, Took: time.Millisecond}}
		}},
		{"firing", func(int) []lock.Event {
			return []lock.Event{
				{Kind: lock.RunStarted, Job: "j", Scheduled: at, Lateness: time.Millisecond, Attempt: 1},
				{Kind: lock.RunEnded, Job: "j", Scheduled: at, At: at, Took: time.Second, Outcome: string(scheduler.OutcomeSucceeded)},
			}
		}},
		{"term", func(i int) []lock.Event {
			return []lock.Event{
				{Kind: lock.TermStarted, KeeperID: "k", LockID: "e", Fence: uint64(i), Gap: time.Second},
				{Kind: lock.TermEnded, KeeperID: "k", LockID: "e", Fence: uint64(i)},
			}
		}},
	}
	for _, seq := range sequences {
		b.Run(seq.name, func(b *testing.B) {
			m := newMetrics(b)
			n := len(seq.events(0))
			evs := make([][]lock.Event, 1024)
			for i := range evs {
				evs[i] = seq.events(i)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				for _, e := range evs[i%len(evs)] {
					m.Observe(e)
				}
				i++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
		})
	}
	b.Run("renewed/parallel", func(b *testing.B) {
		m := newMetrics(b)
		e := lock.Event{Kind: lock.Renewed, KeeperID: "k", LockID: "a", Fence: 1, Took: time.Millisecond}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m.Observe(e)
			}
		})
	})
}

// BenchmarkSessionWithMetrics interleaves acquire+release loops of three
// Sessions on one store: without observers, with a no-op observer and
// with a Metrics, on the test database and on an in-memory store (where
// nothing hides the cost of the events), and reports the cost per pair
// and the ratios to the Session without observers.
func BenchmarkSessionWithMetrics(b *testing.B) {
	stores := []struct {
		name  string
		store func(b *testing.B) lock.Store
		pairs int // per iteration
	}{
		{"db", func(b *testing.B) lock.Store {
			return newLocker(b, nil, mongotest.NewDatabase(b).Name())
		}, 1},
		{"memory", func(*testing.B) lock.Store { return newMemStore() }, 1000},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			store := st.store(b)
			newS := func(obs ...lock.Observer) *lock.Session {
				opts := []lock.SessionOption{}
				for _, o := range obs {
					opts = append(opts, lock.WithObserver(o))
				}
				s, err := lock.NewSession(store, opts...)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = s.Close() })
				return s
			}
			sessions := []*lock.Session{newS(), newS(lock.ObserverFunc(func(lock.Event) {})), newS(newMetrics(b))}
			ctx := context.Background()
			loop := func(s *lock.Session) time.Duration {
				m := mutex(b, s, "o-"+s.KeeperID())
				start := time.Now()
				for range st.pairs {
					if _, ok, err := m.AcquireLock(ctx); !ok || err != nil {
						b.Fatal(ok, err)
					}
					if err := m.ReleaseLock(ctx); err != nil {
						b.Fatal(err)
					}
				}
				return time.Since(start)
			}
			for _, s := range sessions {
				loop(s) // the clock estimate
			}
			took := make([]time.Duration, len(sessions))
			for i := 0; b.Loop(); i++ {
				for j := range sessions {
					k := (i + j) % len(sessions) // rotate the order
					took[k] += loop(sessions[k])
				}
			}
			pairs := float64(b.N * st.pairs)
			b.ReportMetric(float64(took[0].Nanoseconds())/pairs, "none-ns/pair")
			b.ReportMetric(float64(took[1].Nanoseconds())/pairs, "nop-ns/pair")
			b.ReportMetric(float64(took[2].Nanoseconds())/pairs, "metrics-ns/pair")
			b.ReportMetric(float64(took[1])/float64(took[0]), "nop/none")
			b.ReportMetric(float64(took[2])/float64(took[0]), "metrics/none")
		})
	}
}

// memStore is an in-memory lock.Store on the real clock.
type memStore struct {
	clock clockwork.Clock
	mu    sync.Mutex
	locks map[string]lock.Grant
	fence uint64
}

var _ lock.Store = (*memStore)(nil)

func newMemStore() *memStore {
	return &memStore{clock: clockwork.NewRealClock(), locks: make(map[string]lock.Grant)}
}

func (f *memStore) AcquireLocks(_ context.Context, keeper string, ids ...string) (lock.Acquisition, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	var a lock.Acquisition
	for _, id := range ids {
		if g, ok := f.locks[id]; ok && g.KeeperID != keeper && now.Before(g.Deadline) {
			a.Refused = append(a.Refused, id)
			continue
		}
		f.fence++
		g := lock.Grant{LockID: id, KeeperID: keeper, Fence: f.fence, AcquiredAt: now, Deadline: now.Add(lock.DefaultTTL), Sent: now}
		f.locks[id] = g
		a.Granted = append(a.Granted, g)
	}
	return a, nil
}

func (f *memStore) Renew(_ context.Context, keeper string, ids ...string) (lock.Renewal, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	r := lock.Renewal{Deadline: now.Add(lock.DefaultTTL)}
	for _, id := range ids {
		if g, ok := f.locks[id]; ok && g.KeeperID == keeper && now.Before(g.Deadline) {
			g.Deadline = r.Deadline
			f.locks[id] = g
			r.Held = append(r.Held, id)
		} else {
			r.Lost = append(r.Lost, id)
		}
	}
	return r, nil
}

func (f *memStore) ReleaseTerms(_ context.Context, keeper string, terms ...lock.Term) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, t := range terms {
		if g, ok := f.locks[t.LockID]; ok && g.KeeperID == keeper && (t.Fence == 0 || t.Fence == g.Fence) {
			delete(f.locks, t.LockID)
			n++
		}
	}
	return n, nil
}

func (f *memStore) Holder(_ context.Context, id string) (lock.Holder, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := f.locks[id]
	if !ok {
		return lock.Holder{LockID: id}, lock.ErrNotHeld
	}
	return lock.Holder{LockID: id, KeeperID: g.KeeperID, Fence: g.Fence, AcquiredAt: g.AcquiredAt}, nil
}

func (f *memStore) TTL() time.Duration     { return lock.DefaultTTL }
func (f *memStore) Clock() clockwork.Clock { return f.clock }
