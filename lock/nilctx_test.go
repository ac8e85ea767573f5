package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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
