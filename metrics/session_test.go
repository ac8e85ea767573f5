package metrics

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/scheduler"
)

// TestDBRegister: one call covers the Session's locks, the server clock of
// its Locker, and the runners and schedulers built on it, those built
// after the call included; events are counted once though the Session is
// watched twice.
func TestDBRegister(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t, 30*time.Second)
	db := mongotest.NewDatabase(t)
	l, err := lock.New(db)
	if err != nil {
		t.Fatal(err)
	}
	s := newSession(t, l, "k")
	reg := prometheus.NewPedanticRegistry()
	m, err := Register(reg, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WatchSession(s); err != nil {
		t.Fatal(err)
	}

	// Built after Register.
	r, err := runner.New(s, "billing-leader")
	if err != nil {
		t.Fatal(err)
	}
	sched, err := scheduler.New(db, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := sched.AddJob("sweep", "@every 1h", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.New(db, migrations.WithSession(s)); err != nil {
		t.Fatal(err)
	}
	if err := s.Do(ctx, "x", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	snap := gather(t, m)
	snap.want(t, map[string]float64{
		series(leader, "election", r.LockID()):                  0,
		series(terms, "election", r.LockID()):                   0,
		series(lastOK, "job_name", "sweep"):                     0,
		firing("sweep", "skipped", "lock_held"):                 0,
		series(acqTotal, "result", "acquired"):                  1,
		series(relTotal, "result", "released"):                  1,
		series(held):                                            0,
		series(applied, "direction", "up"):                      0,
		series(migFailed, "direction", "up"):                    0,
		series(failures, "job_name", "sweep"):                   0,
		series(control, "job_name", "sweep", "action", "pause"): 0,
	})
	if _, ok := snap[series(clockW)]; !ok {
		t.Error("no server-clock uncertainty: the Session's Locker is not watched")
	}
	// What Register registered is what the program's registry serves.
	mfs, err := reg.Gather()
	if err != nil || len(mfs) == 0 {
		t.Fatalf("the registry gathers %d families: %v", len(mfs), err)
	}
}

// TestRegisterBadInput: nothing is registered or watched on an error.
func TestRegisterBadInput(t *testing.T) {
	t.Parallel()
	store := locktest.New(locktest.WithClock(clockwork.NewFakeClock()), locktest.WithTTL(30*time.Second))
	s, err := lock.NewSession(store)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	reg := prometheus.NewRegistry()
	for _, tc := range []struct {
		name string
		reg  prometheus.Registerer
		s    *lock.Session
		opts []Option
		want error
	}{
		{"nil registerer", nil, s, nil, ErrInvalidArgument},
		{"nil session", reg, nil, nil, ErrInvalidArgument},
		{"bad option", reg, s, []Option{WithNamespace("1x")}, ErrInvalidOption},
	} {
		if m, err := Register(tc.reg, tc.s, tc.opts...); m != nil || !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.name, m, err, tc.want)
		}
	}
	if _, err := Register(reg, s); err != nil {
		t.Fatal(err)
	}
	// A second Metrics on the same registry collides.
	if m, err := Register(reg, s); m != nil || err == nil {
		t.Errorf("registered twice on one registry: %v", err)
	}
	if err := newMetrics(t).WatchSession(nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("WatchSession(nil) = %v", err)
	}
}
