package lock_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
)

// TestValue: a holder publishes a value with its term and updates it
// while it holds; Holder returns it; every new term and every release
// clears it; a write too large is refused and leaves the value as it was.
func TestValue(t *testing.T) {
	t.Parallel()
	ls, _ := newLockers(t, 1)
	l := ls[0]
	ctx := testCtx(t, 30*time.Second)
	s := newSession(t, l, lock.WithKeeperID("a"))
	m := newMutex(t, s, "leader")
	lease := mustLock(t, ctx, m)

	holderValue := func(want string) {
		t.Helper()
		h, err := l.Holder(ctx, "leader")
		if err != nil && !errors.Is(err, lock.ErrNotHeld) {
			t.Fatal(err)
		}
		if string(h.Value) != want {
			t.Fatalf("Holder value %q, want %q", h.Value, want)
		}
	}
	holderValue("") // a new term has none
	if err := lease.SetValue(ctx, []byte("10.0.0.1:8080")); err != nil {
		t.Fatal(err)
	}
	holderValue("10.0.0.1:8080")
	if err := lease.SetValue(ctx, []byte("10.0.0.1:9090")); err != nil {
		t.Fatal(err)
	}
	holderValue("10.0.0.1:9090")

	err := lease.SetValue(ctx, bytes.Repeat([]byte("x"), lock.MaxValueSize+1))
	if !errors.Is(err, lock.ErrValueTooLarge) {
		t.Fatalf("a value of MaxValueSize+1 bytes: %v, want ErrValueTooLarge", err)
	}
	holderValue("10.0.0.1:9090")
	if err := lease.SetValue(ctx, bytes.Repeat([]byte("x"), lock.MaxValueSize)); err != nil {
		t.Fatalf("a value of MaxValueSize bytes: %v", err)
	}
	if err := lease.SetValue(ctx, nil); err != nil {
		t.Fatal(err)
	}
	holderValue("")
	if err := lease.SetValue(ctx, []byte("v")); err != nil {
		t.Fatal(err)
	}

	// A release clears it; so does the next term.
	if err := m.ReleaseLock(ctx); err != nil {
		t.Fatal(err)
	}
	holderValue("")
	if err := lease.SetValue(ctx, []byte("late")); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("SetValue on a released lease: %v, want ErrNotHeld", err)
	}
	g := mustAcquire(t, ctx, l, "leader", "b")
	if err := l.SetValue(ctx, "b", lock.Term{LockID: "leader", Fence: g.Fence}, []byte("b")); err != nil {
		t.Fatal(err)
	}
	holderValue("b")
	g2 := mustAcquire(t, ctx, l, "leader", "b") // b again: a new term
	if g2.Fence <= g.Fence {
		t.Fatalf("fence %d after %d", g2.Fence, g.Fence)
	}
	holderValue("")
}

// TestValueStaleTerm: a value is written only by the current term's
// holder. A holder whose term was taken over, and the same keeper naming
// its own earlier term, are refused with ErrStaleTerm; the current
// holder's value stays.
func TestValueStaleTerm(t *testing.T) {
	t.Parallel()
	// a's lease lapses soon; b's outlasts the test, however slow the
	// machine (b learns a's TTL at its first refusal: takeover hints).
	ls, db := newLockers(t, 1, lock.WithTTL(lock.MinTTL))
	a, b := ls[0], onNewClient(t, db.Name(), lock.WithTTL(20*time.Second))
	ctx := testCtx(t, 30*time.Second)
	ga := mustAcquire(t, ctx, a, "leader", "a")
	if err := a.SetValue(ctx, "a", lock.Term{LockID: "leader", Fence: ga.Fence}, []byte("a")); err != nil {
		t.Fatal(err)
	}
	// a's lease lapses unrenewed; b takes over.
	var gb lock.Grant
	deadline := time.Now().Add(10 * time.Second)
	for {
		g, ok, err := acquireOne(ctx, b, "leader", "b")
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			gb = g
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b never took the lapsed lease over")
		}
		time.Sleep(20 * time.Millisecond) //nolint:forbidigo // the server's clock must pass the TTL
	}
	if err := b.SetValue(ctx, "b", lock.Term{LockID: "leader", Fence: gb.Fence}, []byte("b")); err != nil {
		t.Fatal(err)
	}
	err := a.SetValue(ctx, "a", lock.Term{LockID: "leader", Fence: ga.Fence}, []byte("stale"))
	if !errors.Is(err, lock.ErrStaleTerm) {
		t.Fatalf("stale holder's write: %v, want ErrStaleTerm", err)
	}
	// b naming a's fence, or a naming b's: neither is that keeper's term.
	for _, c := range []struct {
		kid   string
		fence uint64
	}{{"b", ga.Fence}, {"a", gb.Fence}} {
		err := b.SetValue(ctx, c.kid, lock.Term{LockID: "leader", Fence: c.fence}, []byte("stale"))
		if !errors.Is(err, lock.ErrStaleTerm) {
			t.Fatalf("keeper %q with fence %d: %v, want ErrStaleTerm", c.kid, c.fence, err)
		}
	}
	h, err := b.Holder(ctx, "leader")
	if err != nil {
		t.Fatal(err)
	}
	if h.KeeperID != "b" || string(h.Value) != "b" || h.Fence != gb.Fence {
		t.Fatalf("holder %q value %q fence %d, want b's", h.KeeperID, h.Value, h.Fence)
	}
}

// TestValueBadInput: bad arguments are errors naming what was wrong, and
// nothing is written.
func TestValueBadInput(t *testing.T) {
	t.Parallel()
	ls, _ := newLockers(t, 1)
	l := ls[0]
	ctx := testCtx(t, 30*time.Second)
	g := mustAcquire(t, ctx, l, "x", "k")
	for _, c := range []struct {
		name string
		kid  string
		term lock.Term
		val  []byte
		want error
	}{
		{"no fence", "k", lock.Term{LockID: "x"}, []byte("v"), lock.ErrInvalidArgument},
		{"empty lock id", "k", lock.Term{Fence: g.Fence}, []byte("v"), lock.ErrInvalidArgument},
		{"empty keeper", "", lock.Term{LockID: "x", Fence: g.Fence}, []byte("v"), lock.ErrInvalidArgument},
		{"too large", "k", lock.Term{LockID: "x", Fence: g.Fence}, make([]byte, lock.MaxValueSize+1), lock.ErrValueTooLarge},
	} {
		if err := l.SetValue(ctx, c.kid, c.term, c.val); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	h, err := l.Holder(ctx, "x")
	if err != nil || h.Value != nil {
		t.Fatalf("after refused writes: value %q, err %v", h.Value, err)
	}
}

// TestValueRoundTrip: publishing a value is one update.
func TestValueRoundTrip(t *testing.T) {
	t.Parallel()
	client, counter := mongotest.CountingClient(t)
	db := mongotest.Database(t, client, newDB(t))
	l, err := lock.New(db)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 30*time.Second)
	g := mustAcquire(t, ctx, l, "x", "k")
	counter.Reset()
	if err := l.SetValue(ctx, "k", lock.Term{LockID: "x", Fence: g.Fence}, []byte("v")); err != nil {
		t.Fatal(err)
	}
	if counter.Total() != 1 || counter.Count("update") != 1 {
		t.Fatalf("%d commands (%d updates), want one update", counter.Total(), counter.Count("update"))
	}
}
