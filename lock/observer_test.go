package lock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
)

// TestObserverEvents walks a Session through every event it reports and
// checks that each fires exactly once per occurrence, with the lock,
// keeper, fence and timings filled in.
func TestObserverEvents(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const acquireTook, renewTook, releaseTook = 10 * time.Millisecond, 5 * time.Millisecond, 3 * time.Millisecond
		f := newMemStore(3 * time.Second)
		f.Delay(locktest.OpAcquire, acquireTook)
		f.Delay(locktest.OpRenew, renewTook)
		f.Delay(locktest.OpRelease, releaseTook)
		rec := newRecorder()
		s, err := lock.NewSession(f, lock.WithObserver(rec), lock.WithKeeperID("me"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() }) // the test closes it; this is for a test that stops early
		tm := s.Timings()
		ctx := context.Background()
		stepStart := time.Now()
		// step checks the events since the last step: how many of each
		// kind, and the fields every event has.
		step := func(name string, want map[lock.EventKind]int) []lock.Event {
			t.Helper()
			synctest.Wait()
			ev := rec.all()
			rec.reset()
			got := map[lock.EventKind]int{}
			for _, e := range ev {
				got[e.Kind]++
				if e.KeeperID != "me" || e.LockID == "" || e.At.Before(stepStart) || e.At.After(time.Now()) {
					t.Errorf("%s: %s event with keeper %q, lock %q, at %v (step began %v)", name, e.Kind, e.KeeperID, e.LockID, e.At, stepStart)
				}
			}
			if !maps.Equal(got, want) {
				t.Errorf("%s: events %v, want %v", name, got, want)
			}
			stepStart = time.Now()
			return ev
		}
		one := func(ev []lock.Event) lock.Event {
			if len(ev) != 1 {
				t.Fatalf("%d events, want 1", len(ev))
			}
			return ev[0]
		}

		f.TakeOver("b", "other")
		if _, ok, err := newMutex(t, s, "b").AcquireLock(ctx); ok || err != nil {
			t.Fatal(ok, err)
		}
		if e := one(step("held elsewhere", map[lock.EventKind]int{lock.Refused: 1})); e.Reason != "held elsewhere" || e.Took != acquireTook || e.Fence != 0 {
			t.Errorf("refused: %+v", e)
		}

		f.Delay(locktest.OpAcquire, tm.RenewDeadline)
		if _, _, err := newMutex(t, s, "c").AcquireLock(ctx); !errors.Is(err, lock.ErrNotTrusted) {
			t.Fatal(err)
		}
		if e := one(step("too late", map[lock.EventKind]int{lock.Refused: 1})); !errors.Is(e.Err, lock.ErrNotTrusted) || e.Fence == 0 || e.Took != tm.RenewDeadline {
			t.Errorf("refused too late: %+v", e)
		}

		f.Delay(locktest.OpAcquire, acquireTook)
		f.Fail(locktest.OpAcquire, locktest.Always, errors.New("no server"))
		if _, _, err := newMutex(t, s, "d").AcquireLock(ctx); err == nil {
			t.Fatal("acquire with the server gone succeeded")
		}
		if e := one(step("acquire failed", map[lock.EventKind]int{lock.AcquireFailed: 1})); e.Err == nil || e.Took != acquireTook {
			t.Errorf("acquire failed: %+v", e)
		}
		f.Fail(locktest.OpAcquire, 0, nil)

		t0 := time.Now()
		ma := newMutex(t, s, "a")
		la := mustLock(t, ctx, ma)
		if e := one(step("acquired", map[lock.EventKind]int{lock.Acquired: 1})); e.Fence != la.Fence() || e.Took != acquireTook || e.Remaining != tm.RenewDeadline-acquireTook {
			t.Errorf("acquired: %+v", e)
		}
		if _, ok, err := newMutex(t, s, "a").AcquireLock(ctx); ok || err != nil {
			t.Fatal(ok, err)
		}
		if e := one(step("held in this session", map[lock.EventKind]int{lock.Refused: 1})); e.Reason != "held in this session" {
			t.Errorf("refused: %+v", e)
		}

		time.Sleep(t0.Add(tm.RenewInterval + renewTook).Sub(time.Now()))
		if e := one(step("renewed", map[lock.EventKind]int{lock.Renewed: 1})); e.Fence != la.Fence() || e.Took != renewTook || e.Remaining != tm.RenewDeadline-renewTook {
			t.Errorf("renewed: %+v", e)
		}
		if err := la.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		if e := one(step("renewed explicitly", map[lock.EventKind]int{lock.Renewed: 1})); e.Fence != la.Fence() || e.Took != renewTook {
			t.Errorf("renewed: %+v", e)
		}

		f.Fail(locktest.OpRenew, locktest.Always, errors.New("no server"))
		time.Sleep(tm.RenewInterval)
		if e := one(step("renew failed", map[lock.EventKind]int{lock.RenewFailed: 1})); e.Fence != la.Fence() || e.Err == nil || e.Remaining != la.Remaining() || e.Remaining <= 0 {
			t.Errorf("renew failed: %+v (lease has %v left)", e, la.Remaining())
		}
		f.Fail(locktest.OpRenew, 0, nil)
		time.Sleep(tm.RetryPeriod)
		one(step("renewed on retry", map[lock.EventKind]int{lock.Renewed: 1}))

		f.ForceRelease("a")
		f.TakeOver("a", "other")
		time.Sleep(tm.RenewInterval)
		if e := one(step("taken over", map[lock.EventKind]int{lock.LeaseLost: 1})); e.Fence != la.Fence() || !errors.Is(e.Err, lock.ErrLeaseLost) || !strings.Contains(e.Reason, "taken over") {
			t.Errorf("lease lost: %+v", e)
		}
		if err := ma.ReleaseLock(ctx); !errors.Is(err, lock.ErrLeaseLost) {
			t.Fatal(err)
		}
		if e := one(step("released after the loss", map[lock.EventKind]int{lock.Released: 1})); e.Fence != la.Fence() || e.Took != releaseTook {
			t.Errorf("released: %+v", e)
		}

		me := newMutex(t, s, "e")
		le := mustLock(t, ctx, me)
		step("acquired e", map[lock.EventKind]int{lock.Acquired: 1})
		f.Delay(locktest.OpRenew, 0)
		f.Fail(locktest.OpRenew, locktest.Always, errors.New("no server"))
		renews := len(f.Calls(locktest.OpRenew))
		<-le.Done()
		attempts := len(f.Calls(locktest.OpRenew)) - renews
		ev := step("renew deadline passed", map[lock.EventKind]int{lock.RenewFailed: attempts, lock.LeaseLost: 1})
		if e := one(filter(ev, lock.LeaseLost)); e.Fence != le.Fence() || !errors.Is(e.Err, lock.ErrLeaseLost) || e.Reason != "renew deadline passed" {
			t.Errorf("lease lost: %+v", e)
		}
		for i, e := range filter(ev, lock.RenewFailed) {
			if e.Attempt != i+1 {
				t.Errorf("failed renewal %d reported as attempt %d", i+1, e.Attempt)
			}
		}
		if err := me.ReleaseLock(ctx); !errors.Is(err, lock.ErrLeaseLost) {
			t.Fatal(err)
		}
		step("released e", map[lock.EventKind]int{lock.Released: 1})
		f.Fail(locktest.OpRenew, 0, nil)
		f.Delay(locktest.OpRenew, renewTook)

		// Each release reports once, however the leases are passed.
		first, err := s.AcquireLocks(ctx, "g")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.ReleaseLocks(ctx, first.Leases...); err != nil {
			t.Fatal(err)
		}
		step("g once", map[lock.EventKind]int{lock.Acquired: 1, lock.Released: 1})
		second, err := s.AcquireLocks(ctx, "g")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.ReleaseLocks(ctx, first.Leases[0], second.Leases[0], second.Leases[0]); err != nil {
			t.Fatal(err)
		}
		if e := one(filter(step("g again", map[lock.EventKind]int{lock.Acquired: 1, lock.Released: 1}), lock.Released)); e.Fence != second.Leases[0].Fence() {
			t.Errorf("released: %+v, want the second term's fence %d", e, second.Leases[0].Fence())
		}

		held, err := s.AcquireLocks(ctx, "h", "i")
		if err != nil || len(held.Leases) != 2 {
			t.Fatal(held, err)
		}
		step("acquired h, i", map[lock.EventKind]int{lock.Acquired: 2})
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		for _, e := range step("close", map[lock.EventKind]int{lock.Released: 2}) {
			if e.Reason != "session closed" || e.Fence == 0 {
				t.Errorf("released at close: %+v", e)
			}
		}
	})
}

// TestEmit: Emit fills in the keeper and the time, and passes events to
// every observer in order; a Session logger logs them.
func TestEmit(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		a, b := newRecorder(), newRecorder()
		var log strings.Builder
		s := newSession(t, newMemStore(time.Second), lock.WithKeeperID("me"), lock.WithObserver(a), lock.WithObserver(b),
			lock.WithSessionLogger(zerolog.New(&log)))
		s.Emit(lock.Event{Kind: lock.TermStarted, LockID: "leader"})
		at := time.Now().Add(-time.Hour)
		s.Emit(lock.Event{Kind: lock.RunEnded, KeeperID: "someone", At: at, Job: "j", Err: errors.New("failed")})
		for _, r := range []*recorder{a, b} {
			ev := r.all()
			if len(ev) != 2 || ev[0].KeeperID != "me" || !ev[0].At.Equal(time.Now()) || ev[1].KeeperID != "someone" || !ev[1].At.Equal(at) {
				t.Errorf("events %+v", ev)
			}
		}
		want := []string{`"level":"info","lock":"leader","keeper":"me","message":"term started"`,
			`"level":"warn","keeper":"someone","error":"failed","job":"j","message":"run ended"`}
		for _, w := range want {
			if !strings.Contains(log.String(), w) {
				t.Errorf("log %s lacks %s", log.String(), w)
			}
		}
		for k := lock.Acquired; k <= lock.Released; k++ {
			if strings.Contains(k.String(), "unknown") {
				t.Errorf("event kind %d has no name", k)
			}
		}
		if got := fmt.Sprint(lock.EventKind(0)); got != "unknown event" {
			t.Errorf("kind 0: %q", got)
		}
	})
}

// TestLogsHideCredentials: the session loggers log the text of events
// (ids, reasons, errors, some read from the database: a bad document's
// _id, another keeper's id) with the credentials of any URI hidden.
func TestLogsHideCredentials(t *testing.T) {
	t.Parallel()
	const pw = "S3cretPw"
	uri := "mongodb://alice:" + pw + "@db.internal:27017/?authMechanismProperties=AWS_SESSION_TOKEN:tok" + pw
	bad := lock.BadDocument{Collection: "mongolock_runs", ID: "j@" + uri, Field: "scheduled", Problem: "parsing time " + uri}
	e := lock.Event{Kind: lock.DocumentUnreadable, LockID: "app/" + uri, KeeperID: uri, Leader: uri, Job: uri,
		Err: bad, Reason: bad.String()}
	var b strings.Builder
	lock.LogObserver(zerolog.New(&b)).Observe(e)
	var sb strings.Builder
	lock.SlogObserver(slog.New(slog.NewJSONHandler(&sb, nil))).Observe(e)
	for name, out := range map[string]string{"LogObserver": b.String(), "SlogObserver": sb.String()} {
		if strings.Contains(out, pw) || strings.Contains(out, "alice") || !strings.Contains(out, "mongodb://***@db.internal") {
			t.Errorf("%s: %s", name, out)
		}
	}
	if !errors.Is(e.Err, lock.ErrBadDocument) || !strings.Contains(e.Err.Error(), pw) {
		t.Errorf("the event's error changed: %v", e.Err)
	}
}
