package metrics

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/scheduler"
)

// Scenarios against the test database: exact metric values after each
// step, cross-checked against the events an independent recorder saw.

// dbTTL is the lease of the tests that wait for one to end: renew interval
// 500ms, renew deadline 1s, retry period 100ms.
const dbTTL = 1500 * time.Millisecond

// recorder keeps every event, beside the Metrics under test.
type recorder struct {
	mu     sync.Mutex
	events []lock.Event
	more   chan struct{} // closed and replaced at every event
}

func newRecorder() *recorder { return &recorder{more: make(chan struct{})} }

func (r *recorder) Observe(e lock.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	close(r.more)
	r.more = make(chan struct{})
	r.mu.Unlock()
}

// waitFor returns the first event, oldest first, that match accepts; each
// event is offered once.
func (r *recorder) waitFor(t testing.TB, within time.Duration, what string, match func(lock.Event) bool) lock.Event {
	t.Helper()
	deadline := time.After(within)
	for i := 0; ; {
		r.mu.Lock()
		for ; i < len(r.events); i++ {
			if match(r.events[i]) {
				e := r.events[i]
				r.mu.Unlock()
				return e
			}
		}
		more := r.more
		r.mu.Unlock()
		select {
		case <-more:
		case <-deadline:
			t.Fatalf("no %s within %v", what, within)
		}
	}
}

func (r *recorder) count(match func(lock.Event) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if match(e) {
			n++
		}
	}
	return n
}

func kind(k lock.EventKind) func(lock.Event) bool {
	return func(e lock.Event) bool { return e.Kind == k }
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newLocker returns a Locker on database name through a client of its own.
func newLocker(t testing.TB, client *mongo.Client, name string, opts ...lock.Option) *lock.Locker {
	t.Helper()
	if client == nil {
		client = mongotest.NewClient(t)
	}
	l, err := lock.New(mongotest.Database(t, client, name), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// newSession returns a Session of keeper on l observed by obs, closed at
// the end of the test.
func newSession(t testing.TB, l *lock.Locker, keeper string, obs ...lock.Observer) *lock.Session {
	t.Helper()
	opts := []lock.SessionOption{lock.WithKeeperID(keeper)}
	for _, o := range obs {
		opts = append(opts, lock.WithObserver(o))
	}
	s, err := lock.NewSession(l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func mutex(t testing.TB, s *lock.Session, id string) *lock.Mutex {
	t.Helper()
	m, err := s.Mutex(id)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestDBAcquireContentionRelease: an acquisition, one refused because
// another keeper holds the lock, one refused because another holder in the
// Session does (no round trip), a release; and the server-clock
// uncertainty once the Locker has an estimate.
func TestDBAcquireContentionRelease(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t, 30*time.Second)
	db := mongotest.NewDatabase(t)
	l := newLocker(t, db.Client(), db.Name())
	other := newLocker(t, nil, db.Name())
	m := newMetrics(t)
	m.WatchLocker(l)
	s := newSession(t, l, "k", m)

	a := mutex(t, s, "a")
	if _, ok, err := a.AcquireLock(ctx); !ok || err != nil {
		t.Fatalf("acquire a: %v %v", ok, err)
	}
	gather(t, m).want(t, map[string]float64{
		series(acqTotal, "result", "acquired"): 1, series(acqTotal, "result", "held_elsewhere"): 0,
		series(acqDur + "_count"): 1, series(held): 1})

	if _, err := other.AcquireLocks(ctx, "other", "b"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := mutex(t, s, "b").AcquireLock(ctx); ok || err != nil {
		t.Fatalf("acquire b, held by another keeper: %v %v", ok, err)
	}
	gather(t, m).want(t, map[string]float64{
		series(acqTotal, "result", "acquired"): 1, series(acqTotal, "result", "held_elsewhere"): 1,
		series(acqDur + "_count"): 2, series(held): 1})

	if taken, err := s.AcquireLocks(ctx, "a"); err != nil || len(taken.Refused) != 1 {
		t.Fatalf("acquire a again in the Session: %+v %v", taken, err)
	}
	gather(t, m).want(t, map[string]float64{
		series(acqTotal, "result", "held_elsewhere"): 2,
		series(acqDur + "_count"):                    2, // no round trip
		series(held):                                 1})

	if err := a.ReleaseLock(ctx); err != nil {
		t.Fatal(err)
	}
	snap := gather(t, m)
	snap.want(t, map[string]float64{
		series(relTotal, "result", "released"): 1, series(relTotal, "result", "error"): 0, series(held): 0,
		series(acqTotal, "result", "error"): 0, series(acqTotal, "result", "too_late"): 0})
	if w := snap.get(t, series(clockW)); w <= 0 || w > 5 {
		t.Errorf("server clock uncertainty %vs", w)
	}
}

// TestDBLeaseTakenOver: an operator force-releases a lease and another
// keeper takes the lock; the holder's renewal finds it taken over. Its
// release afterwards is counted, and the lease is not subtracted twice
// from the leases held. An abandoned lease likewise.
func TestDBLeaseTakenOver(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t, 30*time.Second)
	db := mongotest.NewDatabase(t)
	l := newLocker(t, db.Client(), db.Name()) // default TTL: no keep-alive round during the test
	operator := newLocker(t, nil, db.Name())
	m := newMetrics(t)
	s := newSession(t, l, "k", m)

	a := mutex(t, s, "a")
	lease, ok, err := a.AcquireLock(ctx)
	if !ok || err != nil {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	if err := operator.ForceRelease(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if acq, err := operator.AcquireLocks(ctx, "thief", "a"); err != nil || len(acq.Granted) != 1 {
		t.Fatalf("take over: %+v %v", acq, err)
	}
	if err := lease.Renew(ctx); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("renew: %v, want ErrLeaseLost", err)
	}
	gather(t, m).want(t, map[string]float64{
		series(lostTotal, "cause", "taken_over"): 1, series(held): 0,
		series(renTotal, "result", "renewed"): 0, series(renTotal, "result", "failed"): 0})
	if err := a.ReleaseLock(ctx); !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("release of a lost lease: %v, want ErrLeaseLost", err)
	}
	gather(t, m).want(t, map[string]float64{
		series(relTotal, "result", "released"): 1, series(held): 0, series(lostTotal, "cause", "taken_over"): 1})

	c := mutex(t, s, "c")
	lease, ok, err = c.AcquireLock(ctx)
	if !ok || err != nil {
		t.Fatalf("acquire c: %v %v", ok, err)
	}
	lease.Abandon(runner.ErrTaskDidNotStop)
	gather(t, m).want(t, map[string]float64{series(lostTotal, "cause", "abandoned"): 1, series(held): 0})
	_ = c.ReleaseLock(ctx)
	gather(t, m).want(t, map[string]float64{
		series(acqTotal, "result", "acquired"): 2, series(relTotal, "result", "released"): 2, series(held): 0,
		series(lostTotal, "cause", "taken_over"): 1, series(lostTotal, "cause", "abandoned"): 1,
		series(lostTotal, "cause", "renew_deadline"): 0, series(lostTotal, "cause", "other"): 0})
}

// TestDBLeaseLostCutConnection: the connection to the server is cut; every
// renewal fails until the renew deadline passes and the lease is lost.
func TestDBLeaseLostCutConnection(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t, 30*time.Second)
	db := mongotest.NewDatabase(t)
	client, fault := mongotest.NewProxiedClient(t)
	l := newLocker(t, client, db.Name(), lock.WithTTL(dbTTL))
	m, rec := newMetrics(t), newRecorder()
	s := newSession(t, l, "k", m, rec)
	a := mutex(t, s, "a")
	if _, ok, err := a.AcquireLock(ctx); !ok || err != nil {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	fault.Cut()
	rec.waitFor(t, 10*time.Second, "lease lost", kind(lock.LeaseLost))
	failed := rec.count(kind(lock.RenewFailed))
	if failed == 0 {
		t.Error("no renewal failed")
	}
	gather(t, m).want(t, map[string]float64{
		series(lostTotal, "cause", "renew_deadline"): 1, series(lostTotal, "cause", "taken_over"): 0, series(held): 0,
		series(renTotal, "result", "failed"):  float64(failed),
		series(renTotal, "result", "renewed"): float64(rec.count(kind(lock.Renewed))),
		series(renDur + "_count"):             float64(rec.count(kind(lock.Renewed)))})
	fault.Restore()
	_ = a.ReleaseLock(ctx)
	snap := gather(t, m)
	if n := snap.get(t, series(relTotal, "result", "released")) + snap.get(t, series(relTotal, "result", "error")); n != 1 {
		t.Errorf("%v releases counted, want 1", n)
	}
	snap.want(t, map[string]float64{series(held): 0})
}

// TestDBFailover: runner A leads; its connection is cut, it loses its
// lease at its renew deadline and B takes over once the lease expired on
// the server. Each process has its own Metrics. B's failover gap matches
// the one computed from the lock documents: B's term's start minus A's
// last renewal, both on the server's clock.
func TestDBFailover(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	clientA, fault := mongotest.NewProxiedClient(t)
	lA := newLocker(t, clientA, db.Name(), lock.WithTTL(dbTTL))
	lB := newLocker(t, nil, db.Name(), lock.WithTTL(dbTTL))
	operator := newLocker(t, nil, db.Name(), lock.WithTTL(dbTTL))
	mA, recA := newMetrics(t), newRecorder()
	mB, recB := newMetrics(t), newRecorder()
	sA := newSession(t, lA, "A", mA, recA)
	sB := newSession(t, lB, "B", mB, recB)
	run := func(s *lock.Session) {
		r, err := runner.New(s, "e")
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = r.Run(rctx, func(ctx context.Context) error {
				<-ctx.Done()
				return ctx.Err()
			})
		}()
		t.Cleanup(func() {
			fault.Restore()
			cancel()
			<-done
		})
	}
	run(sA)
	recA.waitFor(t, 10*time.Second, "A's term", kind(lock.TermStarted))
	run(sB)
	recB.waitFor(t, 10*time.Second, "B seeing A lead", func(e lock.Event) bool { return e.Kind == lock.LeaderSeen && e.Leader == "A" })
	gather(t, mA).want(t, map[string]float64{
		series(leader, "election", "e"): 1, series(terms, "election", "e"): 1, series(changes, "election", "e"): 1,
		series(gap+"_count", "election", "e"): 0})
	gather(t, mB).want(t, map[string]float64{
		series(leader, "election", "e"): 0, series(terms, "election", "e"): 0, series(changes, "election", "e"): 1})

	// Follow A's renewals on the lock document, as an operator would.
	var lastA atomic.Int64 // unix nanoseconds of A's last renewal
	pollCtx, stopPoll := context.WithCancel(ctx)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if h, err := operator.Holder(pollCtx, "e"); (err == nil || errors.Is(err, lock.ErrNotHeld)) && h.KeeperID == "A" {
				lastA.Store(h.RenewedAt.UnixNano())
			}
			select {
			case <-pollCtx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	defer func() { stopPoll(); <-polled }()

	fault.Cut()
	recA.waitFor(t, 10*time.Second, "A's term ending", kind(lock.TermEnded))
	started := recB.waitFor(t, 10*time.Second, "B's term", kind(lock.TermStarted))
	stopPoll()
	<-polled
	after, err := operator.Holder(ctx, "e")
	if err != nil || after.KeeperID != "B" {
		t.Fatalf("holder after the failover: %+v %v", after, err)
	}
	want := after.AcquiredAt.Sub(time.Unix(0, lastA.Load()))
	if want < dbTTL {
		t.Fatalf("gap from the documents %v, shorter than the TTL", want)
	}
	if started.Gap != want {
		t.Errorf("TermStarted gap %v, from the documents %v", started.Gap, want)
	}
	gather(t, mB).want(t, map[string]float64{
		series(leader, "election", "e"): 1, series(terms, "election", "e"): 1,
		series(changes, "election", "e"):      2, // A, then itself
		series(gap+"_count", "election", "e"): 1, series(gap+"_sum", "election", "e"): want.Seconds()})
	gather(t, mA).want(t, map[string]float64{
		series(leader, "election", "e"): 0, series(terms, "election", "e"): 1,
		series(lostTotal, "cause", "renew_deadline"): 1})
}

// newScheduler returns a Scheduler on db for s, with job "j" every second
// running fn, watched by m; stopped at the end of the test.
func newScheduler(t *testing.T, db *mongo.Database, s *lock.Session, m *Metrics, fn func(context.Context) error) *scheduler.Scheduler {
	t.Helper()
	sched, err := scheduler.New(db, s, scheduler.WithOpTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := sched.AddJob("j", "@every 1s", fn); err != nil {
		t.Fatal(err)
	}
	m.WatchScheduler(sched)
	t.Cleanup(func() { stopScheduler(t, sched) })
	return sched
}

func stopScheduler(t *testing.T, s *scheduler.Scheduler) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Error(err)
	}
}

// jobFirings sums the firing series of job j.
func jobFirings(s snapshot, j string) float64 {
	total := 0.0
	for _, o := range []string{"succeeded", "failed", "claimed_elsewhere"} {
		total += s[firing(j, o, "")]
	}
	for i := range skipOther + 1 {
		total += s[firing(j, "skipped", skipLabel(i))]
	}
	return total
}

// TestDBFiringSkippedLockHeld: the job's lock is held by another keeper,
// so its firing waits for it and is skipped. The job's series are there,
// at zero, before it ever fired.
func TestDBFiringSkippedLockHeld(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t, 30*time.Second)
	db := mongotest.NewDatabase(t)
	l := newLocker(t, db.Client(), db.Name())
	other := newLocker(t, nil, db.Name())
	m, rec := newMetrics(t), newRecorder()
	s := newSession(t, l, "k", m, rec)
	sched := newScheduler(t, db, s, m, func(context.Context) error {
		t.Error("the job ran")
		return nil
	})
	before := gather(t, m)
	if n := jobFirings(before, "j"); n != 0 {
		t.Errorf("%v firings before the start", n)
	}
	before.want(t, map[string]float64{
		firing("j", "skipped", "lock_held"): 0, firing("j", "succeeded", ""): 0,
		series(lastOK, "job_name", "j"): 0, series(failures, "job_name", "j"): 0})

	// Held by a live keeper, whose Session renews it, and renewed once
	// already: the scheduler outwaits a holder that stopped renewing (it
	// died), and reads again a lock too new to tell.
	held, err := newSession(t, other, "other").AcquireLocks(ctx, sched.LockID("j"))
	if err != nil || len(held.Leases) != 1 {
		t.Fatalf("hold the job's lock: %+v %v", held, err)
	}
	for {
		if err := held.Leases[0].Renew(ctx); err != nil {
			t.Fatal(err)
		}
		h, err := other.Holder(ctx, sched.LockID("j"))
		if err != nil {
			t.Fatal(err)
		}
		if h.RenewedAt.After(h.AcquiredAt) {
			break
		}
	}
	if err := sched.Start(); err != nil {
		t.Fatal(err)
	}
	e := rec.waitFor(t, 10*time.Second, "skipped firing", kind(lock.FiringSkipped))
	stopScheduler(t, sched) // before the next firing, a second later
	if e.Reason != scheduler.ReasonLockHeld {
		t.Fatalf("skipped: %q, want %q", e.Reason, scheduler.ReasonLockHeld)
	}
	snap := gather(t, m)
	if n := jobFirings(snap, "j"); n != 1 {
		t.Errorf("%v firings, want 1", n)
	}
	refused := rec.count(func(e lock.Event) bool { return e.Kind == lock.Refused && e.LockID == sched.LockID("j") })
	if refused != e.Attempt {
		t.Errorf("%d refusals seen, the skip says %d attempts", refused, e.Attempt)
	}
	// The scheduler's own locks (its presence lease) are acquired; the
	// job's is not.
	jobLock := func(k lock.EventKind) func(lock.Event) bool {
		return func(e lock.Event) bool { return e.Kind == k && e.LockID == sched.LockID("j") }
	}
	if n := rec.count(jobLock(lock.Acquired)); n != 0 {
		t.Errorf("job's lock acquired %d times", n)
	}
	snap.want(t, map[string]float64{
		firing("j", "skipped", "lock_held"):          1,
		series(acqTotal, "result", "held_elsewhere"): float64(refused),
		series(acqTotal, "result", "acquired"):       float64(rec.count(kind(lock.Acquired))),
		series(lateness+"_count", "job_name", "j"):   0,
		series(lastOK, "job_name", "j"):              0})
}

// TestDBFailedRun: the job fails at its first run and succeeds at its
// second.
func TestDBFailedRun(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	l := newLocker(t, db.Client(), db.Name())
	m, rec := newMetrics(t), newRecorder()
	s := newSession(t, l, "k", m, rec)
	var calls atomic.Int32
	sched := newScheduler(t, db, s, m, func(context.Context) error {
		if calls.Add(1) == 1 {
			return errors.New("boom")
		}
		return nil
	})
	if err := sched.Start(); err != nil {
		t.Fatal(err)
	}
	ended := kind(lock.RunEnded)
	first := rec.waitFor(t, 10*time.Second, "first run", ended)
	if first.Outcome != string(scheduler.OutcomeFailed) {
		t.Fatalf("first run: %q", first.Outcome)
	}
	gather(t, m).want(t, map[string]float64{ // the next firing is a second later
		firing("j", "failed", ""): 1, firing("j", "succeeded", ""): 0,
		series(failures, "job_name", "j"): 1, series(lastOK, "job_name", "j"): 0,
		series(runDur+"_count", "job_name", "j"): 1, series(runDur+"_sum", "job_name", "j"): first.Took.Seconds()})
	n := 0
	second := rec.waitFor(t, 10*time.Second, "second run", func(e lock.Event) bool {
		if e.Kind == lock.RunEnded {
			n++
		}
		return n == 2
	})
	stopScheduler(t, sched)
	if second.Outcome != string(scheduler.OutcomeSucceeded) {
		t.Fatalf("second run: %q", second.Outcome)
	}
	snap := gather(t, m)
	// The two runs, and any firing this instance did not try: under load
	// the next firing can fall while the first run still goes on here
	// ("previous run still going on this instance"), and is then claimed
	// once the job is idle here, its run one of the two.
	notTried := rec.count(func(e lock.Event) bool {
		return e.Job == "j" && (e.Kind == lock.FiringSkipped || e.Kind == lock.FiringLost)
	})
	if n := jobFirings(snap, "j"); n != float64(2+notTried) {
		t.Errorf("%v firings, want %d: the 2 runs and the %d firings skipped or lost here", n, 2+notTried, notTried)
	}
	// Twice the job's lock, and the scheduler's own (its presence lease).
	jobLock := func(k lock.EventKind) func(lock.Event) bool {
		return func(e lock.Event) bool { return e.Kind == k && e.LockID == sched.LockID("j") }
	}
	if a, r := rec.count(jobLock(lock.Acquired)), rec.count(jobLock(lock.Released)); a != 2 || r != 2 {
		t.Errorf("job's lock acquired %d times, released %d, want 2 and 2", a, r)
	}
	var late time.Duration
	rec.mu.Lock()
	for _, e := range rec.events {
		if e.Kind == lock.RunStarted {
			late += e.Lateness
		}
	}
	rec.mu.Unlock()
	snap.want(t, map[string]float64{
		firing("j", "failed", ""): 1, firing("j", "succeeded", ""): 1,
		series(failures, "job_name", "j"):          0,
		series(lastOK, "job_name", "j"):            float64(second.At.UnixNano()) / 1e9,
		series(runDur+"_count", "job_name", "j"):   2,
		series(runDur+"_sum", "job_name", "j"):     (first.Took + second.Took).Seconds(),
		series(lateness+"_count", "job_name", "j"): 2,
		series(lateness+"_sum", "job_name", "j"):   late.Seconds(),
		series(retries, "job_name", "j"):           0,
		series(acqTotal, "result", "acquired"):     float64(rec.count(kind(lock.Acquired))),
		series(relTotal, "result", "released"):     float64(rec.count(kind(lock.Released))),
		series(held):                               0})
}

// TestDBMigrations: the migrator waits for another one's lock, applies
// the built-in migrations and the first of ours, and fails at the second.
func TestDBMigrations(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t, 60*time.Second)
	db := mongotest.NewDatabase(t)
	m, rec := newMetrics(t), newRecorder()
	mig, err := migrations.New(db,
		migrations.WithLockTTL(2*time.Second), migrations.WithRetryPeriod(50*time.Millisecond), migrations.WithWait(30*time.Second),
		migrations.WithObserver(m), migrations.WithObserver(rec),
		migrations.WithMigrations(
			migrations.Migration{Version: 1, Description: "works", Definition: "1",
				Up: func(context.Context, *mongo.Database) error { return nil }},
			migrations.Migration{Version: 2, Description: "fails", Definition: "2",
				Up: func(context.Context, *mongo.Database) error { return errors.New("boom") }},
		))
	if err != nil {
		t.Fatal(err)
	}
	status, err := mig.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pending := 0
	for _, e := range status {
		if e.State == migrations.StatePending {
			pending++
		}
	}
	other := newLocker(t, nil, db.Name())
	if acq, err := other.AcquireLocks(ctx, "other", migrations.DefaultLockID); err != nil || len(acq.Granted) != 1 {
		t.Fatalf("hold the migration lock: %+v %v", acq, err)
	}
	type result struct {
		res migrations.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := mig.Up(ctx)
		done <- result{res, err}
	}()
	rec.waitFor(t, 10*time.Second, "refused migration lock", func(e lock.Event) bool {
		return e.Kind == lock.Refused && e.LockID == migrations.DefaultLockID
	})
	if _, err := other.ReleaseLocks(ctx, "other", migrations.DefaultLockID); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if !errors.Is(r.err, migrations.ErrFailed) {
		t.Fatalf("Up: %v, want ErrFailed", r.err)
	}
	waited := rec.waitFor(t, time.Second, "wait", kind(lock.MigrationWaited))
	if got := rec.count(kind(lock.MigrationApplied)); got != pending-1 {
		t.Errorf("%d migrations applied of %d pending", got, pending)
	}
	gather(t, m).want(t, map[string]float64{
		series(applied, "direction", "up"):   float64(pending - 1),
		series(applied, "direction", "down"): 0,
		series(migFailed, "direction", "up"): 1,
		series(migWait + "_count"):           1,
		series(migWait + "_sum"):             waited.Took.Seconds()})
	if waited.Took <= 0 || waited.Took != r.res.Waited {
		t.Errorf("waited %v, Up says %v", waited.Took, r.res.Waited)
	}
}
