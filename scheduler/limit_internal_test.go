package scheduler

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
)

// blockingStore's settle waits until released, counting the calls in it.
type blockingStore struct {
	store
	mu       sync.Mutex
	in, most int
	release  chan struct{}
}

func (b *blockingStore) settle(ctx context.Context, w *work) (bool, error) {
	b.mu.Lock()
	b.in++
	b.most = max(b.most, b.in)
	b.mu.Unlock()
	<-b.release
	b.mu.Lock()
	b.in--
	b.mu.Unlock()
	return true, nil
}

// TestWritesOfOneSchedulerBounded: a thousand firings settling at once (a
// Stop) send at most MaxConcurrentWrites commands at a time, so that they
// leave connections of the pool to the Session's keep-alive; the others
// wait their turn, and a waiter whose context ends gives up.
func TestWritesOfOneSchedulerBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &blockingStore{release: make(chan struct{})}
		s := limitedStore{store: b, slots: make(limiter, MaxConcurrentWrites)}
		var wg sync.WaitGroup
		for range 1000 {
			wg.Go(func() { _, _ = s.settle(context.Background(), &work{}) })
		}
		synctest.Wait()
		if b.in != MaxConcurrentWrites {
			t.Fatalf("%d settles in flight, want %d", b.in, MaxConcurrentWrites)
		}
		ctx, cancel := context.WithCancel(context.Background())
		gaveUp := make(chan error, 1)
		go func() { _, err := s.settle(ctx, &work{}); gaveUp <- err }()
		synctest.Wait()
		cancel()
		if err := <-gaveUp; err != context.Canceled {
			t.Fatalf("a waiter whose context ended: %v", err)
		}
		close(b.release)
		wg.Wait()
		if b.most != MaxConcurrentWrites {
			t.Fatalf("at most %d settles in flight, want %d", b.most, MaxConcurrentWrites)
		}
	})
}
