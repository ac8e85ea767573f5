package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
)

// watching ranges over l.Watch(ctx, id) in a goroutine of its own and
// passes each Holder on; stop ends the range and waits for it.
type watching struct {
	ch     chan lock.Holder
	cancel context.CancelFunc
	done   chan struct{}
}

func watch(t testing.TB, l *lock.Locker, id string) *watching {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	seq, err := l.Watch(ctx, id)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w := &watching{ch: make(chan lock.Holder), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for h := range seq {
			select {
			case w.ch <- h:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *watching) stop() {
	w.cancel()
	<-w.done
}

// await returns the first Holder the watcher sees that ok accepts, within
// 10s of real time.
func (w *watching) await(t testing.TB, what string, ok func(lock.Holder) bool) lock.Holder {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case h := <-w.ch:
			if ok(h) {
				return h
			}
		case <-timeout.C:
			t.Fatalf("watcher never saw %s", what)
		}
	}
}

func heldBy(kid string) func(lock.Holder) bool {
	return func(h lock.Holder) bool { return h.KeeperID == kid && !h.Expired && !h.Released }
}

// TestWatchChanges: a watcher sees every change of the holder, in order:
// none, an acquisition, a value, a release, a lease that lapsed, a
// takeover.
func TestWatchChanges(t *testing.T) {
	t.Parallel()
	ls, db := newLockers(t, 2, lock.WithTTL(lock.MinTTL))
	a, b := ls[0], ls[1]
	w, err := lock.New(db, lock.WithWatchPeriod(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 30*time.Second)
	ws := watch(t, w, "leader")
	ws.await(t, "no document", func(h lock.Holder) bool {
		return h.LockID == "leader" && h.KeeperID == "" && !h.Released && h.Fence == 0
	})

	g := mustAcquire(t, ctx, a, "leader", "a")
	h := ws.await(t, "a's acquisition", heldBy("a"))
	if h.Fence != g.Fence {
		t.Fatalf("fence %d, want %d", h.Fence, g.Fence)
	}
	if err := a.SetValue(ctx, "a", lock.Term{LockID: "leader", Fence: g.Fence}, []byte("a:80")); err != nil {
		t.Fatal(err)
	}
	ws.await(t, "a's value", func(h lock.Holder) bool { return string(h.Value) == "a:80" })
	if err := releaseOne(ctx, a, "leader", "a"); err != nil {
		t.Fatal(err)
	}
	ws.await(t, "the release", func(h lock.Holder) bool { return h.Released && h.Value == nil })

	g = mustAcquire(t, ctx, a, "leader", "a")
	ws.await(t, "a's second term", func(h lock.Holder) bool { return heldBy("a")(h) && h.Fence == g.Fence })
	ws.await(t, "a's lease lapsing", func(h lock.Holder) bool { return h.KeeperID == "a" && h.Expired })
	var gb lock.Grant
	for {
		var ok bool
		if gb, ok, err = acquireOne(ctx, b, "leader", "b"); err != nil {
			t.Fatal(err)
		} else if ok {
			break
		}
		time.Sleep(10 * time.Millisecond) //nolint:forbidigo // b's estimate of the server's clock must pass a's TTL
	}
	h = ws.await(t, "b's takeover", heldBy("b"))
	if h.Fence != gb.Fence || h.Fence <= g.Fence {
		t.Fatalf("takeover fence %d, want %d (> %d)", h.Fence, gb.Fence, g.Fence)
	}
}

// TestWatchOneReader: however many watch a lock in one Locker, one reader
// reads it, once per watch period (counted with the driver's command
// monitor, on a fake clock); when the last watcher leaves, the reader
// stops.
func TestWatchOneReader(t *testing.T) {
	t.Parallel()
	client, counter := mongotest.CountingClient(t)
	dbName := newDB(t)
	clk := clockwork.NewFakeClock()
	const period = time.Second
	w, err := lock.New(mongotest.Database(t, client, dbName), lock.WithClock(clk), lock.WithWatchPeriod(period))
	if err != nil {
		t.Fatal(err)
	}
	other := onNewClient(t, dbName)
	ctx := testCtx(t, 30*time.Second)

	const n = 5
	watchers := make([]*watching, n)
	for i := range watchers {
		watchers[i] = watch(t, w, "leader")
	}
	all := func(what string, ok func(lock.Holder) bool) {
		t.Helper()
		var wg sync.WaitGroup
		for _, ws := range watchers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ws.await(t, what, ok)
			}()
		}
		wg.Wait()
	}
	all("no document", func(h lock.Holder) bool { return h.KeeperID == "" })
	if got := lock.WatchReaders(w); got != 1 {
		t.Fatalf("%d readers for %d watchers of one lock, want 1", got, n)
	}
	reads := counter.Count("find")
	if reads != 1 {
		t.Fatalf("%d reads for the first value of %d watchers, want 1", reads, n)
	}
	for i := range 3 {
		kid := fmt.Sprint("k", i)
		mustAcquire(t, ctx, other, "leader", kid)
		// The reader waits for its period (it published what it read,
		// so its read's timeout is stopped): only a period passing makes
		// it read again.
		if err := clk.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if got := counter.Count("find"); got != reads {
			t.Fatalf("%d reads before the period passed, want %d", got, reads)
		}
		clk.Advance(period)
		all(kid+"'s acquisition", heldBy(kid))
		reads++
		if got := counter.Count("find"); got != reads {
			t.Fatalf("after %d periods: %d reads for %d watchers, want %d", i+1, got, n, reads)
		}
		if err := releaseOne(ctx, other, "leader", kid); err != nil {
			t.Fatal(err)
		}
	}

	// One leaves: the reader goes on for the others.
	watchers[0].stop()
	if got := lock.WatchReaders(w); got != 1 {
		t.Fatalf("%d readers after one of %d watchers left, want 1", got, n)
	}
	for _, ws := range watchers[1:] {
		ws.stop()
	}
	if got := lock.WatchReaders(w); got != 0 {
		t.Fatalf("%d readers after every watcher left, want 0", got)
	}
	before := counter.Count("find")
	for range 3 {
		clk.Advance(period)
	}
	if got := counter.Count("find"); got != before {
		t.Fatalf("%d reads after every watcher left", got-before)
	}
}

// TestWatchBadInput: a bad lock id or a nil context is an error, and
// nothing starts.
func TestWatchBadInput(t *testing.T) {
	t.Parallel()
	ls, _ := newLockers(t, 1)
	l := ls[0]
	for _, id := range []string{"", string([]byte{0xff})} {
		if _, err := l.Watch(context.Background(), id); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("Watch(%q): %v, want ErrInvalidArgument", id, err)
		}
	}
	//nolint:staticcheck // a nil context on purpose
	if _, err := l.Watch(nil, "x"); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("Watch(nil ctx): %v, want ErrInvalidArgument", err)
	}
	if _, err := lock.New(mongotest.NewDatabase(t), lock.WithWatchPeriod(0)); !errors.Is(err, lock.ErrInvalidOption) {
		t.Errorf("WithWatchPeriod(0): %v, want ErrInvalidOption", err)
	}
	if lock.WatchReaders(l) != 0 {
		t.Error("a refused Watch started a reader")
	}
}
