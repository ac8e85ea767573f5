package runner_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
	"github.com/mongolock/mongolock/runner"
)

func TestNewRejectsBadInput(t *testing.T) {
	t.Parallel()
	f := locktest.New(locktest.WithClock(clockwork.NewFakeClock()), locktest.WithTTL(30*time.Second))
	s, err := lock.NewSession(f)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	closed, err := lock.NewSession(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		session *lock.Session
		lockID  string
		opts    []runner.Option
		want    []error
		mention string // the error must name this
	}{
		{"nil session", nil, "l", nil, []error{lock.ErrInvalidArgument}, "nil session"},
		{"closed session", closed, "l", nil, []error{lock.ErrSessionClosed}, "session closed"},
		{"empty lock id", s, "", nil, []error{lock.ErrInvalidArgument}, "lockID"},
		{"lock id not UTF-8", s, "\xff", nil, []error{lock.ErrInvalidArgument}, "lockID"},
		{"lock id with NUL", s, "a\x00b", nil, []error{lock.ErrInvalidArgument}, "lockID"},
		{"lock id too long", s, strings.Repeat("x", lock.MaxIDLength+1), nil, []error{lock.ErrInvalidArgument}, "lockID"},
		{"nil option", s, "l", []runner.Option{nil}, []error{runner.ErrInvalidOption, lock.ErrInvalidOption}, "nil Option"},
		{"zero grace period", s, "l", []runner.Option{runner.WithGracePeriod(0)},
			[]error{runner.ErrInvalidOption, lock.ErrInvalidOption}, "WithGracePeriod"},
		{"negative grace period", s, "l", []runner.Option{runner.WithGracePeriod(-time.Second)},
			[]error{runner.ErrInvalidOption, lock.ErrInvalidOption}, "WithGracePeriod"},
		{"negative stall timeout", s, "l", []runner.Option{runner.WithStallTimeout(-1)},
			[]error{runner.ErrInvalidOption, lock.ErrInvalidOption}, "WithStallTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := runner.New(tc.session, tc.lockID, tc.opts...)
			if r != nil || err == nil {
				t.Fatalf("New: %v, %v; want an error", r, err)
			}
			for _, want := range tc.want {
				if !errors.Is(err, want) {
					t.Fatalf("New: %v; want an error wrapping %v", err, want)
				}
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("error %q does not name %q", err, tc.mention)
			}
			if n := strings.Count(err.Error(), "runner:"); n > 1 {
				t.Fatalf("error %q repeats its prefix", err)
			}
		})
	}
}

// Nil tasks are bad arguments, reported before anything else.
func TestNilTask(t *testing.T) {
	t.Parallel()
	s, err := lock.NewSession(locktest.New(locktest.WithClock(clockwork.NewFakeClock()), locktest.WithTTL(30*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := runner.New(s, "l")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(t.Context(), nil); !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil task") {
		t.Fatalf("Run(nil): %v", err)
	}
	if ran, err := r.RunTaskOnLeader(t.Context(), nil); ran || !errors.Is(err, lock.ErrInvalidArgument) {
		t.Fatalf("RunTaskOnLeader(nil): %v, %v", ran, err)
	}
}

// The runner is its session's keeper: it has no keeper id of its own.
func TestKeeperIsTheSessions(t *testing.T) {
	t.Parallel()
	s, err := lock.NewSession(locktest.New(locktest.WithClock(clockwork.NewFakeClock()), locktest.WithTTL(30*time.Second)), lock.WithKeeperID("k1"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := runner.New(s, "l")
	if err != nil {
		t.Fatal(err)
	}
	if r.KeeperID() != "k1" || r.LockID() != "l" || r.IsLeader() || r.Fence() != 0 || r.Leader() != "" {
		t.Fatalf("new runner: keeper %q lock %q leader %v fence %d leader %q",
			r.KeeperID(), r.LockID(), r.IsLeader(), r.Fence(), r.Leader())
	}
}
