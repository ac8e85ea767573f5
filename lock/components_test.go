package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mongolock/mongolock/lock"
)

// TestAddObserver: an observer added after NewSession sees the events from
// then on, once however often it is added, whether or not it was given
// with WithObserver too.
func TestAddObserver(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		early, late := newRecorder(), newRecorder()
		s := newSession(t, newMemStore(time.Second), lock.WithObserver(early))
		s.Emit(lock.Event{Kind: lock.TermStarted, LockID: "before"})
		for range 2 {
			if err := s.AddObserver(late); err != nil {
				t.Fatal(err)
			}
			if err := s.AddObserver(early); err != nil {
				t.Fatal(err)
			}
		}
		// Funcs cannot be compared: each is added.
		var funcs int
		f := lock.ObserverFunc(func(lock.Event) { funcs++ })
		_ = s.AddObserver(f)
		_ = s.AddObserver(f)
		if _, _, err := newMutex(t, s, "after").AcquireLock(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(kinds(early.all()), ","); got != "term started before,acquired after" {
			t.Errorf("early observer: %s", got)
		}
		if got := strings.Join(kinds(late.all()), ","); got != "acquired after" {
			t.Errorf("late observer: %s", got)
		}
		if funcs != 2 {
			t.Errorf("an ObserverFunc added twice saw %d events, want 2", funcs)
		}
		if err := s.AddObserver(nil); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("AddObserver(nil) = %v", err)
		}
	})
}

// TestComponents: a Session lists what was added to it, in order, each
// once.
func TestComponents(t *testing.T) {
	t.Parallel()
	s := newSession(t, newMemStore(time.Second))
	a, b := &struct{ n int }{1}, &struct{ n int }{2}
	s.AddComponent(a)
	s.AddComponent(nil)
	s.AddComponent(b)
	s.AddComponent(a)
	got := s.Components()
	if len(got) != 2 || got[0] != any(a) || got[1] != any(b) {
		t.Errorf("components %v", got)
	}
	got[0] = nil // a copy
	if s.Components()[0] != any(a) {
		t.Error("Components returned the Session's own slice")
	}
}
