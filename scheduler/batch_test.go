package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jonboulle/clockwork"
)

// Concurrent requests share commands, one command per key at a time, and
// each request gets its own result. (On a fake clock, which never moves
// here, no command ever stalls.)
func TestBatcherGroupsConcurrentRequests(t *testing.T) {
	var inFlight [2]atomic.Int32
	var mu sync.Mutex
	var sizes []int
	b := newBatcher(clockwork.NewFakeClock(), time.Minute, func(_ context.Context, key int, reqs []int) ([]string, error) {
		if n := inFlight[key].Add(1); n != 1 {
			t.Errorf("%d commands in flight for key %d", n, key)
		}
		defer inFlight[key].Add(-1)
		mu.Lock()
		sizes = append(sizes, len(reqs))
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		out := make([]string, len(reqs))
		for i, r := range reqs {
			out[i] = fmt.Sprint(key, "/", r)
		}
		return out, nil
	})
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Go(func() {
			key := i % 2
			res, err := b.submit(context.Background(), key, i)
			if want := fmt.Sprint(key, "/", i); err != nil || res != want {
				t.Errorf("request %d: %q, %v; want %q", i, res, err, want)
			}
		})
	}
	wg.Wait()
	total, most := 0, 0
	for _, n := range sizes {
		total += n
		most = max(most, n)
	}
	if total != 400 {
		t.Errorf("commands carried %d requests, want 400", total)
	}
	if most < 2 {
		t.Errorf("no command carried more than one request (%d commands)", len(sizes))
	}
	if len(b.queues) != 0 {
		t.Errorf("%d queues left", len(b.queues))
	}
	t.Logf("400 requests in %d commands, the largest of %d", len(sizes), most)
}

// A request whose context ends while it waits is withdrawn: it is in no
// command. One already in a command waits for its result.
func TestBatcherWithdrawsAbandonedRequests(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var sent []int
	b := newBatcher(clockwork.NewFakeClock(), time.Minute, func(_ context.Context, _ int, reqs []int) ([]int, error) {
		mu.Lock()
		sent = append(sent, reqs...)
		mu.Unlock()
		if reqs[0] == 1 {
			<-release
		}
		return reqs, nil
	})
	first := make(chan error, 1)
	go func() {
		_, err := b.submit(context.Background(), 0, 1)
		first <- err
	}()
	// Wait for request 1 to be in flight, then queue 2 (abandoned) and 3.
	for {
		mu.Lock()
		n := len(sent)
		mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	abandoned := make(chan error, 1)
	go func() {
		_, err := b.submit(ctx, 0, 2)
		abandoned <- err
	}()
	third := make(chan int, 1)
	go func() {
		r, _ := b.submit(context.Background(), 0, 3)
		third <- r
	}()
	for {
		b.mu.Lock()
		n := len(b.queues[0].pending)
		b.mu.Unlock()
		if n == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-abandoned; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned request: %v", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if r := <-third; r != 3 {
		t.Fatalf("third request got %d", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(sent) != "[1 3]" {
		t.Fatalf("sent %v, want [1 3]: the abandoned request must not be sent", sent)
	}
}

// An error reaches every request of its command; a short result list is an
// error, not a panic.
func TestBatcherErrors(t *testing.T) {
	boom := errors.New("boom")
	b := newBatcher(clockwork.NewRealClock(), time.Minute, func(_ context.Context, key int, reqs []int) ([]int, error) {
		if key == 0 {
			return nil, boom
		}
		return reqs[1:], nil
	})
	if _, err := b.submit(context.Background(), 0, 1); !errors.Is(err, boom) {
		t.Errorf("got %v, want boom", err)
	}
	if _, err := b.submit(context.Background(), 1, 1); err == nil {
		t.Error("a missing result was not an error")
	}
}

// The command sent by a request whose deadline passes meanwhile goes on
// for the others in it (its own caller gets the result too: it was sent);
// cancelling that request's context (the scheduler stopping) cancels it.
func TestBatcherCommandContext(t *testing.T) {
	release := make(chan struct{})
	b := newBatcher(clockwork.NewFakeClock(), time.Minute, func(ctx context.Context, _ int, reqs []int) ([]int, error) {
		if reqs[0] == 0 {
			<-release
			return reqs, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(150 * time.Millisecond):
			return reqs, nil
		}
	})
	queued := func(n int) {
		for {
			b.mu.Lock()
			q := b.queues[0]
			got := q != nil && len(q.pending) == n
			b.mu.Unlock()
			if got {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	first := make(chan error, 1)
	go func() { _, err := b.submit(context.Background(), 0, 0); first <- err }()
	queued(0)
	// A (50ms deadline) then B (none) queue behind the first command; A
	// sends the second, which outlives A's deadline.
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	errA, errB := make(chan error, 1), make(chan error, 1)
	go func() { _, err := b.submit(short, 0, 1); errA <- err }()
	queued(1)
	go func() { _, err := b.submit(context.Background(), 0, 2); errB <- err }()
	queued(2)
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-errB; err != nil {
		t.Errorf("B failed with the deadline of the request that sent its command: %v", err)
	}
	if err := <-errA; err != nil {
		t.Errorf("A, whose command was sent: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := b.submit(ctx, 0, 3); done <- err }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled command: %v, want context.Canceled", err)
		}
	case <-time.After(100 * time.Millisecond):
		t.Error("cancelling the sender's context did not cancel its command")
	}
}

// A request whose context ends just as it is made head of the queue still
// sends the next command: the queue is never left busy with nobody to send.
func TestBatcherHeadCancelledAtHandover(t *testing.T) {
	b := newBatcher(clockwork.NewRealClock(), time.Minute, func(ctx context.Context, _ int, reqs []int) ([]int, error) {
		if reqs[0] < 0 {
			<-ctx.Done() // released below by cancelling
		}
		return reqs, nil
	})
	for i := range 300 {
		blockCtx, unblock := context.WithCancel(context.Background())
		go func() { _, _ = b.submit(blockCtx, 0, -1) }()
		for {
			b.mu.Lock()
			busy := b.queues[0] != nil
			b.mu.Unlock()
			if busy {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
		ctx, cancel := context.WithCancel(context.Background())
		waiting := make(chan struct{})
		go func() {
			close(waiting)
			_, _ = b.submit(ctx, 0, 1)
		}()
		<-waiting
		time.Sleep(100 * time.Microsecond)
		// Race the handover to request 1 against its cancellation.
		go unblock()
		cancel()
		res := make(chan int, 1)
		go func() {
			r, _ := b.submit(context.Background(), 0, 2)
			res <- r
		}()
		select {
		case <-res:
		case <-time.After(2 * time.Second):
			t.Fatalf("iteration %d: a request waited forever on a queue with no head", i)
		}
	}
}

// A command that stalls does not hold back the requests after it: once it
// has been out for the stall, the next goes beside it, and at most
// maxInFlight commands of a key are out at once; a fresh command still
// holds them.
func TestBatcherStalledCommandDoesNotHoldOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var inFlight, most atomic.Int32
		b := newBatcher(clockwork.NewRealClock(), time.Minute, func(_ context.Context, _ int, reqs []int) ([]int, error) {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			if reqs[0] < 0 {
				<-release // stalls
			}
			return reqs, nil
		})
		var wg sync.WaitGroup
		defer wg.Wait()
		defer close(release)
		submit := func(req int) <-chan time.Duration {
			took := make(chan time.Duration, 1)
			began := time.Now()
			wg.Go(func() {
				if r, err := b.submit(context.Background(), 0, req); r != req || err != nil {
					t.Errorf("request %d: %d, %v", req, r, err)
				}
				took <- time.Since(began)
			})
			return took
		}
		submit(-1)
		time.Sleep(10 * time.Millisecond)
		next := submit(1)
		synctest.Wait()
		if len(next) != 0 {
			t.Fatal("a request went beside a command out for 10ms")
		}
		if d := <-next; d != minStall-10*time.Millisecond {
			t.Errorf("the request beside a stalled command took %v, want the stall (%v) less the 10ms it came after", d, minStall)
		}
		for i := 2; i <= maxInFlight; i++ {
			submit(-i)
			time.Sleep(minStall + time.Millisecond)
		}
		last := submit(maxInFlight + 1)
		time.Sleep(time.Hour)
		if len(last) != 0 || most.Load() != maxInFlight {
			t.Errorf("%d commands out at once, want at most %d", most.Load(), maxInFlight)
		}
	})
}

// The stall follows the typical reply, not the slow ones it is for: one
// slow reply among fast ones leaves it at its least, so that the next slow
// command holds nobody back either; a server whose replies are all slow
// raises it. A command cut off by its timeout is no reply.
func TestBatcherStallFollowsTypicalReply(t *testing.T) {
	b := newBatcher(clockwork.NewRealClock(), time.Minute, func(context.Context, int, []int) ([]int, error) { return nil, nil })
	if got := b.stall(); got != minStall {
		t.Errorf("no replies yet: stall %v, want %v", got, minStall)
	}
	for range 50 {
		b.took(5 * time.Millisecond)
	}
	b.took(5 * time.Second)
	if got := b.stall(); got != minStall {
		t.Errorf("one 5s reply among 5ms ones: stall %v, want %v", got, minStall)
	}
	for range replySamples {
		b.took(300 * time.Millisecond)
	}
	if got := b.stall(); got != 1200*time.Millisecond {
		t.Errorf("replies of 300ms: stall %v, want four of them", got)
	}

	synctest.Test(t, func(t *testing.T) {
		b := newBatcher(clockwork.NewRealClock(), time.Second, func(ctx context.Context, _ int, reqs []int) ([]int, error) {
			<-ctx.Done() // never answered
			return reqs, nil
		})
		if _, err := b.submit(context.Background(), 0, 1); err != nil {
			t.Fatal(err)
		}
		if b.sampled != 0 {
			t.Errorf("a command cut off by its timeout counted as a reply of %v", b.replies[0])
		}
	})
}
