package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/lock"
)

// recovered calls f and turns a panic into an error, so that a table of
// bad calls reports each one that panics instead of dying at the first.
func recovered(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panicked: %v", p)
		}
	}()
	return f()
}

// TestNilContext: every Session and Mutex method taking a context returns
// an error wrapping ErrInvalidArgument that names the nil context, and
// touches nothing, rather than panic.
func TestNilContext(t *testing.T) {
	t.Parallel()
	s := newSession(t, newMemStore(30*time.Second))
	m := newMutex(t, s, "m")
	var nilCtx context.Context
	held, err := newMutex(t, s, "held").Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	ops := map[string]func() error{
		"Session.Do": func() error {
			return s.Do(nilCtx, "d", func(context.Context) error { ran = true; return nil })
		},
		"Mutex.Lock":        func() error { _, err := m.Lock(nilCtx); return err },
		"Mutex.AcquireLock": func() error { _, _, err := m.AcquireLock(nilCtx); return err },
		"Mutex.Wait":        func() error { return m.Wait(nilCtx, time.Millisecond) },
		"Mutex.ReleaseLock": func() error { return m.ReleaseLock(nilCtx) },
		// The Session's other calls that take a context (they panicked).
		"Session.AcquireLocks": func() error { _, err := s.AcquireLocks(nilCtx, "a"); return err },
		"Session.ReleaseLocks": func() error { return s.ReleaseLocks(nilCtx, held) },
		"Session.Holder":       func() error { _, err := s.Holder(nilCtx, "a"); return err },
		"Session.Sleep":        func() error { return s.Sleep(nilCtx, time.Millisecond) },
		"Lease.Renew":          func() error { return held.Renew(nilCtx) },
	}
	for name, op := range ops {
		err := recovered(op)
		if !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil context") {
			t.Errorf("%s(nil context): %v, want an error wrapping ErrInvalidArgument naming the nil context", name, err)
		}
	}
	if ran {
		t.Error("Do ran its function with a nil context")
	}
	if l := m.Lease(); l != nil {
		t.Errorf("the Mutex holds a lease after calls with a nil context")
	}
	if err := held.Err(); err != nil {
		t.Errorf("ReleaseLocks with a nil context released the lease: %v", err)
	}
}

// TestLockerNilContext: the Locker's own calls, for operators and tools,
// refuse a nil context as the Session's do (some panicked, "cannot create
// context from nil parent", others ran with no deadline), and write
// nothing.
func TestLockerNilContext(t *testing.T) {
	t.Parallel()
	ls, db := newLockers(t, 1)
	l := ls[0]
	var nilCtx context.Context
	term := lock.Term{LockID: "a", Fence: 1}
	ops := map[string]func() error{
		"Holder":          func() error { _, err := l.Holder(nilCtx, "a"); return err },
		"Locks":           func() error { _, err := l.Locks(nilCtx); return err },
		"LocksPage":       func() error { _, err := l.LocksPage(nilCtx, "", "", 10); return err },
		"LocksWithPrefix": func() error { _, err := l.LocksWithPrefix(nilCtx, "a"); return err },
		"EnsureIndexes":   func() error { return l.EnsureIndexes(nilCtx) },
		"AcquireLocks":    func() error { _, err := l.AcquireLocks(nilCtx, "k", "a"); return err },
		"Renew":           func() error { _, err := l.Renew(nilCtx, "k", "a"); return err },
		"ReleaseLocks":    func() error { _, err := l.ReleaseLocks(nilCtx, "k", "a"); return err },
		"ReleaseTerms":    func() error { _, err := l.ReleaseTerms(nilCtx, "k", term); return err },
		"ForceRelease":    func() error { return l.ForceRelease(nilCtx, "a") },
		"Purge":           func() error { _, err := l.Purge(nilCtx); return err },
		"SetValue":        func() error { return l.SetValue(nilCtx, "k", term, []byte("v")) },
		"Watch":           func() error { _, err := l.Watch(nilCtx, "a"); return err },
	}
	for name, op := range ops {
		err := recovered(op)
		if !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil context") {
			t.Errorf("Locker.%s(nil context): %v, want an error wrapping ErrInvalidArgument naming the nil context", name, err)
		}
	}
	if n, err := db.Collection(lock.DefaultCollection).CountDocuments(context.Background(), bson.D{{Key: "_id", Value: "a"}}); err != nil || n != 0 {
		t.Errorf("lock a written: %d, %v", n, err)
	}
}
