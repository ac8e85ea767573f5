package lock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
)

// BenchmarkSemaphoreLockRelease interleaves, in one loop, a Semaphore's
// Lock+ReleaseLock pair with a Mutex's (the baseline) on the same Session
// and server, and reports the cost of each, their ratio and the commands
// per semaphore pair (the keep-alive renews on a client of its own, not
// counted). held is how many of the n=4 slots another Session holds: 0,
// the first slot tried is free (one findAndModify, as a Mutex); 3, one
// slot is free, so most attempts find their first slot held and read the
// slots before taking the free one.
func BenchmarkSemaphoreLockRelease(b *testing.B) {
	const n = 4
	for _, held := range []int{0, n - 1} {
		b.Run(fmt.Sprintf("held=%d_of_%d", held, n), func(b *testing.B) {
			client, counter := mongotest.CountingClient(b)
			dbName := newDB(b)
			ka := mongotest.Database(b, mongotest.NewClient(b), dbName)
			l, err := lock.New(mongotest.Database(b, client, dbName), lock.WithTTL(30*time.Second), lock.WithKeepAliveDatabase(ka))
			if err != nil {
				b.Fatal(err)
			}
			s, other := newSession(b, l), newSession(b, l)
			ctx := context.Background()
			for range held {
				if _, err := newSemaphore(b, other, "pool", n).Lock(ctx); err != nil {
					b.Fatal(err)
				}
			}
			sem := newSemaphore(b, s, "pool", n)
			mu := newMutex(b, s, "mutex")
			semPair := func() {
				if _, err := sem.Lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := sem.ReleaseLock(ctx); err != nil {
					b.Fatal(err)
				}
			}
			mutexPair := func() {
				if _, err := mu.Lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := mu.ReleaseLock(ctx); err != nil {
					b.Fatal(err)
				}
			}
			semPair() // the deployment, the clock
			mutexPair()
			var semTook, mutexTook time.Duration
			var cmds int
			for i := 0; b.Loop(); i++ {
				// Alternate which goes first so neither gains from the
				// other's warm caches.
				for j := range 2 {
					start := time.Now()
					if (i+j)%2 == 0 {
						counter.Reset()
						semPair()
						semTook += time.Since(start)
						cmds += counter.Total()
					} else {
						mutexPair()
						mutexTook += time.Since(start)
					}
				}
			}
			nf := float64(b.N)
			b.ReportMetric(float64(semTook.Microseconds())/nf, "sem-µs/pair")
			b.ReportMetric(float64(mutexTook.Microseconds())/nf, "mutex-µs/pair")
			b.ReportMetric(float64(semTook)/float64(mutexTook), "sem/mutex")
			b.ReportMetric(float64(cmds)/nf, "sem-cmds/pair")
		})
	}
}
