package lock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
)

// BenchmarkMutexLockRelease: as BenchmarkAcquireRelease, with the pair a
// user of a Session writes: Mutex.Lock (uncontended, so one attempt) and
// Mutex.ReleaseLock, against the raw driver upsert+delete (goal: ratio <=
// 1.10).
func BenchmarkMutexLockRelease(b *testing.B) {
	benchAgainstRaw(b, func(db *mongo.Database) func(id string) {
		l, err := lock.New(db)
		if err != nil {
			b.Fatal(err)
		}
		s := newSession(b, l)
		mutexes := make(map[string]*lock.Mutex, len(benchIDs)+1)
		for _, id := range append(benchIDs, "warm") {
			mutexes[id] = newMutex(b, s, id)
		}
		ctx := context.Background()
		pair := func(id string) {
			m := mutexes[id]
			if _, err := m.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := m.ReleaseLock(ctx); err != nil {
				b.Fatal(err)
			}
		}
		pair("warm") // the clock estimate
		return pair
	})
}

// BenchmarkKeepAlive: the keep-alive of a Session holding n locks renews
// them all with one store call; the baseline renews each with its own
// Lease.Renew (a sample of a hundred per round), interleaved in the same
// loop. Reported per lock. The
// Locker's clock is a fake one, advanced by the renew interval to start
// each keep-alive round on demand (so no round overlaps the baseline);
// the round trips themselves are real.
func BenchmarkKeepAlive(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("locks=%d", n), func(b *testing.B) {
			clk := clockwork.NewFakeClockAt(time.Now())
			l, ids := manyLocks(b, n, 1000, "FerretDB evaluates $in without an index", lock.WithClock(clk))
			const ri = time.Millisecond // of the fake clock
			var counting atomic.Bool
			var renewed atomic.Int64
			round := make(chan struct{}, 1)
			s := newSession(b, l, lock.WithRenewInterval(ri), lock.WithObserver(lock.ObserverFunc(func(e lock.Event) {
				if e.Kind == lock.Renewed && counting.Load() && renewed.Add(1) == int64(n) {
					round <- struct{}{}
				}
			})))
			ctx := context.Background()
			taken, err := s.AcquireLocks(ctx, ids...)
			if err != nil || len(taken.Leases) != n {
				b.Fatalf("took %d of %d: %v", len(taken.Leases), n, err)
			}
			keepAlive := func() time.Duration {
				// The keep-alive waits for its next round.
				if err := clk.BlockUntilContext(ctx, 1); err != nil {
					b.Fatal(err)
				}
				renewed.Store(0)
				counting.Store(true)
				start := time.Now()
				clk.Advance(ri)
				<-round
				took := time.Since(start)
				counting.Store(false)
				return took
			}
			// One Renew per lock costs the same for each lock: time a
			// rotating sample of them (a round of a thousand takes 40s
			// on FerretDB).
			sample := min(n, 100)
			single := func(i int) time.Duration {
				start := time.Now()
				for j := range sample {
					if err := taken.Leases[(i*sample+j)%n].Renew(ctx); err != nil {
						b.Fatal(err)
					}
				}
				return time.Since(start)
			}
			var batchedTime, singleTime time.Duration
			for i := 0; b.Loop(); i++ {
				if i%2 == 0 {
					batchedTime += keepAlive()
					singleTime += single(i)
				} else {
					singleTime += single(i)
					batchedTime += keepAlive()
				}
			}
			for _, lease := range taken.Leases {
				if err := lease.Err(); err != nil {
					b.Fatalf("lease %s: %v", lease.LockID(), err)
				}
			}
			reportBatched(b, n, batchedTime, singleTime*time.Duration(n/sample))
		})
	}
}

// BenchmarkObserverOverhead interleaves an acquire+release loop of a
// Session without observers and of one with a no-op observer, on the test
// database and on an in-memory store (where nothing hides the cost of
// building events), and reports their ratio (goal: no measurable
// difference).
func BenchmarkObserverOverhead(b *testing.B) {
	stores := []struct {
		name  string
		store func(b *testing.B) lock.Store
		pairs int // per iteration
	}{
		{"db", func(b *testing.B) lock.Store {
			ls, _ := newLockers(b, 1)
			return ls[0]
		}, 1},
		{"memory", func(*testing.B) lock.Store {
			f := newMemStore(lock.DefaultTTL, locktest.WithoutCallLog())
			return f
		}, 1000},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			store := st.store(b)
			none := newSession(b, store)
			nop := newSession(b, store, lock.WithObserver(lock.ObserverFunc(func(lock.Event) {})))
			ctx := context.Background()
			loop := func(s *lock.Session) time.Duration {
				m := newMutex(b, s, "o-"+s.KeeperID())
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
			loop(none) // the clock estimate
			loop(nop)
			var noneTime, nopTime time.Duration
			for i := 0; b.Loop(); i++ {
				if i%2 == 0 {
					noneTime += loop(none)
					nopTime += loop(nop)
				} else {
					nopTime += loop(nop)
					noneTime += loop(none)
				}
			}
			pairs := float64(b.N * st.pairs)
			b.ReportMetric(float64(noneTime.Nanoseconds())/pairs, "none-ns/pair")
			b.ReportMetric(float64(nopTime.Nanoseconds())/pairs, "nop-ns/pair")
			b.ReportMetric(float64(nopTime)/float64(noneTime), "nop/none")
		})
	}
}

// BenchmarkHandover: a waiter in Mutex.Lock takes the lock after its
// holder releases it. The handover time runs from the return of the
// holder's ReleaseLock to the return of the waiter's Lock, reported in
// milliseconds and as a fraction of the retry period (the longest pause of
// a waiter in another Session; one in the holder's Session is woken by the
// release). The holder keeps the lock for three to four retry periods, so
// the waiter is in a pause of the full retry period, at a random phase.
func BenchmarkHandover(b *testing.B) {
	for _, sessions := range []string{"other-session", "same-session"} {
		b.Run(sessions, func(b *testing.B) {
			ls, _ := newLockers(b, 2, lock.WithTTL(1500*time.Millisecond))
			hs := newSession(b, ls[0])
			ws := hs
			if sessions == "other-session" {
				ws = newSession(b, ls[1])
			}
			rp := ws.Timings().RetryPeriod
			holder, waiter := newMutex(b, hs, "h"), newMutex(b, ws, "h")
			ctx := context.Background()
			var total, worst time.Duration
			for b.Loop() {
				mustLock(b, ctx, holder)
				got := make(chan time.Time, 1)
				go func() {
					if _, err := waiter.Lock(ctx); err != nil {
						b.Error(err)
					}
					got <- time.Now()
				}()
				time.Sleep(3*rp + rand.N(rp))
				if err := holder.ReleaseLock(ctx); err != nil {
					b.Fatal(err)
				}
				released := time.Now()
				took := (<-got).Sub(released)
				total += took
				worst = max(worst, took)
				if err := waiter.ReleaseLock(ctx); err != nil {
					b.Fatal(err)
				}
			}
			mean := total / time.Duration(b.N)
			b.ReportMetric(float64(mean.Microseconds())/1e3, "handover-ms")
			b.ReportMetric(float64(mean)/float64(rp), "handover/retry")
			b.ReportMetric(float64(worst)/float64(rp), "worst/retry")
		})
	}
}
