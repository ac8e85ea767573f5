package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/simclock"
	"github.com/mongolock/mongolock/internal/simdb"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/scheduler"
)

// Names the simulated application uses.
const (
	dbName       = "app"
	leaderLockID = "leader"
	doLockID     = "critical"
)

// instance is one process of the simulated application: a client on its
// own link, a Session, a migrator run at start, a leader election with a
// task, schedulers with the world's jobs, and a loop taking a lock with
// Do. Everything it does goes through its clock and its link.
type instance struct {
	sim  *Sim
	slot int
	life *Life
	rng  *rand.Rand

	clock   *simclock.Clock
	link    *simdb.Link
	client  *mongo.Client
	session *lock.Session
	runner  *runner.LeaderAwareRunner
	scheds  []*scheduler.Scheduler

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	dead    bool
	running chan struct{} // closed while the process runs; open while frozen
	stopped bool
	exited  chan struct{} // closed once a stop is over
}

func (s *Sim) startInstance(slot int, keeper string, incarnation int) *instance {
	w := s.world
	name := fmt.Sprintf("app%d", slot+1)
	for range incarnation {
		name += "'"
	}
	in := &instance{sim: s, slot: slot, rng: rand.New(rand.NewPCG(w.Seed, uint64(1000*slot+incarnation+1))),
		running: make(chan struct{}), exited: make(chan struct{})}
	close(in.running)
	in.clock = simclock.New(s.base + w.Skews[slot])
	now := s.hist.now()
	in.life = &Life{Name: name, Slot: slot, Keeper: keeper, Offsets: []OffsetAt{{At: now, Offset: w.Skews[slot]}}, Started: now}
	s.hist.life(in.life)
	in.link = s.srv.NewLink(name, s.hist.recordFates(name, s.plan(w.Seed*7919+uint64(1000*slot+incarnation))))
	if s.logCommands {
		in.link.OnSend(s.logSent)
	}
	in.ctx, in.cancel = context.WithCancel(context.Background())
	s.hist.logf("%s starts, keeper %s, clock %+v", name, keeper, w.Skews[slot])

	var err error
	if in.client, err = in.link.Connect(nil); err != nil {
		s.fatalf("%s: connect: %v", name, err)
		return in
	}
	db := in.client.Database(dbName)
	locker, err := lock.New(db, lock.WithTTL(w.TTL), lock.WithClock(in.clock))
	if err != nil {
		s.fatalf("%s: %v", name, err)
		return in
	}
	in.session, err = lock.NewSession(locker, lock.WithKeeperID(keeper), lock.WithObserver(lock.ObserverFunc(in.observe)))
	if err != nil {
		s.fatalf("%s: %v", name, err)
		return in
	}
	ropts := []runner.Option{runner.WithCampaignAgain(true)}
	if w.Values {
		ropts = append(ropts, runner.WithValue([]byte(name)))
	}
	ropts = append(ropts, w.candidateOptions(slot)...)
	in.runner, err = runner.New(in.session, leaderLockID, ropts...)
	if err != nil {
		s.fatalf("%s: %v", name, err)
		return in
	}
	in.go_(in.migrate)
	in.go_(in.lead)
	in.go_(in.doLoop)
	in.go_(in.semLoop)
	in.startSchedulers(db)
	return in
}

// observe writes the events that tell a firing's or a lease's story to
// the trace.
func (in *instance) observe(e lock.Event) {
	if strings.Contains(e.Reason, "end not recorded") || strings.Contains(e.Reason, "not recorded in the history") {
		// The scheduler writes its records for as long as it runs; it
		// gives up only once it stops.
		var down time.Duration
		in.sim.hist.update(func() { down = in.life.Down })
		if down == 0 {
			in.sim.fatalf("records: %s gave up writing a record of %s@%s while it was up: %s",
				in.life.Name, e.Job, e.Scheduled.UTC().Format(time.RFC3339Nano), e.Reason)
		}
	}
	switch e.Kind {
	case lock.Renewed, lock.Acquired, lock.Released, lock.Refused, lock.LeaderSeen:
		return
	}
	if in.isDead() {
		// What a dead process's goroutines do until the end lets them go
		// is nothing it did: it would only make the trace depend on the
		// order they run in.
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %v", in.life.Name, e.Kind)
	if e.Job != "" {
		fmt.Fprintf(&b, " %s@%s", e.Job, e.Scheduled.UTC().Format("15:04:05.000"))
	} else if e.LockID != "" {
		fmt.Fprintf(&b, " %s", e.LockID)
	}
	if e.Fence != 0 {
		fmt.Fprintf(&b, " fence %d", e.Fence)
	}
	if e.Attempt > 1 {
		fmt.Fprintf(&b, " attempt %d", e.Attempt)
	}
	if e.Outcome != "" {
		fmt.Fprintf(&b, " %s", e.Outcome)
	}
	if e.Reason != "" {
		fmt.Fprintf(&b, ": %s", firstLine(e.Reason))
	}
	if e.Err != nil {
		fmt.Fprintf(&b, " (%v)", e.Err)
	}
	in.sim.hist.logf("%s", b.String())
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// go_ runs fn in a goroutine the instance waits for at its end.
func (in *instance) go_(fn func()) {
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		fn()
	}()
}

func (in *instance) startSchedulers(db *mongo.Database) {
	w := in.sim.world
	groups := [][]JobSpec{w.Jobs}
	if w.TwoSchedulers {
		half := (len(w.Jobs) + 1) / 2
		groups = [][]JobSpec{w.Jobs[:half], w.Jobs[half:]}
	}
	for _, jobs := range groups {
		opts := []scheduler.Option{scheduler.WithOpTimeout(w.opTimeout())}
		if w.LeaderOnly {
			opts = append(opts, scheduler.WithLeaderOnly(in.runner))
		}
		s, err := scheduler.New(db, in.session, opts...)
		if err != nil {
			in.sim.fatalf("%s: scheduler: %v", in.life.Name, err)
			return
		}
		if got, want := s.MisfireThreshold(), w.misfireThreshold(); got != want {
			// The oracle judges by the threshold the scheduler keeps.
			in.sim.fatalf("%s: the scheduler's misfire threshold is %v, the oracle's %v", in.life.Name, got, want)
		}
		for _, j := range jobs {
			jopts := []scheduler.JobOption{scheduler.JobOverlap(j.Overlap)}
			if j.Retries > 0 {
				jopts = append(jopts, scheduler.JobRetries(j.Retries, lock.Backoff{First: 50 * time.Millisecond, Max: 200 * time.Millisecond}))
			}
			if err := s.AddJob(j.Name, j.Spec(), in.job(j), jopts...); err != nil {
				in.sim.fatalf("%s: add job: %v", in.life.Name, err)
				return
			}
			in.life.Jobs = append(in.life.Jobs, j.Name)
		}
		if err := s.Start(); err != nil {
			in.sim.fatalf("%s: start scheduler: %v", in.life.Name, err)
			return
		}
		in.scheds = append(in.scheds, s)
	}
	in.sim.hist.update(func() { in.life.SchedStarted, in.life.SchedUp = in.sim.hist.now(), true })
}

// isDead reports whether the process is gone: it does nothing any more.
func (in *instance) isDead() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.dead
}

// awake waits while the process is frozen, and reports whether it is
// alive.
func (in *instance) awake() bool {
	in.mu.Lock()
	running := in.running
	in.mu.Unlock()
	<-running
	return !in.isDead()
}

// act records an action under the lease ctx carries, if the process runs
// and trusts the lease: what a careful user does before each step of work
// that must not overlap another holder's.
func (in *instance) act(ctx context.Context, what string) bool {
	if !in.awake() {
		return false
	}
	l, ok := lock.LeaseFrom(ctx)
	if !ok {
		in.sim.fatalf("%s: %s acts without a lease in its context", in.life.Name, what)
		return false
	}
	if ctx.Err() != nil || l.Err() != nil {
		return false
	}
	in.sim.hist.act(Act{Instance: in.life.Name, LockID: l.LockID(), Fence: l.Fence(), What: what})
	return true
}

// called records that the library called work under the lease ctx
// carries: an action at once, without checking the lease, for the call
// itself is the library's promise that the lease is trusted (Do, a leader
// task, a job, a migration). A process that is frozen when the call comes
// makes it when it thaws. Its library's goroutines ran on meanwhile here,
// which a real process's do not: the library's last check of the lease
// before the call, which a real process makes after the thaw too, is made
// again then, and a lease it no longer trusts means no call (seed 285: a
// start's reply taken in during a suspend, the job called, and its action
// recorded at the thaw, after another instance took the lock).
func (in *instance) called(ctx context.Context, what string) bool {
	in.mu.Lock()
	running := in.running
	in.mu.Unlock()
	frozenAtCall := false
	select {
	case <-running:
	default:
		frozenAtCall = true
	}
	if !in.awake() {
		return false
	}
	l, ok := lock.LeaseFrom(ctx)
	if !ok {
		in.sim.fatalf("%s: %s called without a lease in its context", in.life.Name, what)
		return false
	}
	if frozenAtCall && (ctx.Err() != nil || l.Err() != nil) {
		return false
	}
	in.sim.hist.act(Act{Instance: in.life.Name, LockID: l.LockID(), Fence: l.Fence(), What: what})
	return true
}

// work acts n times over d on the instance's clock, as a task would:
// the first action is the call itself (called), and the others stop when
// ctx ends or the lease is not trusted.
func (in *instance) work(ctx context.Context, what string, n int, d time.Duration) error {
	for i := range n {
		if i == 0 && !in.called(ctx, what) || i > 0 && !in.act(ctx, what) {
			return cmpErr(context.Cause(ctx), errNotTrusted)
		}
		if i < n-1 {
			if err := lock.Sleep(ctx, in.clock, d/time.Duration(n)); err != nil {
				return err
			}
		}
	}
	return nil
}

var errNotTrusted = errors.New("sim: lease not trusted")

// chance is a number in [0, 1) drawn from the seed and what it decides.
func chance(seed uint64, what string, a, b int64) float64 {
	h := fnv.New64a()
	fmt.Fprint(h, what, a, b)
	return rand.New(rand.NewPCG(seed, h.Sum64())).Float64()
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// job is the function of job j.
func (in *instance) job(j JobSpec) func(context.Context) error {
	return func(ctx context.Context) error {
		r, _ := scheduler.RunFromContext(ctx)
		if !in.awake() {
			return errors.New("dead")
		}
		jr := &JobRun{Job: r.Job, Scheduled: r.Scheduled, Triggered: r.Triggered, Attempt: r.Attempt, Fence: r.Fence,
			Keeper: r.Keeper, Instance: in.life.Name}
		in.sim.hist.runBegan(jr)
		err := in.work(ctx, "job "+j.Name, 3, j.Run)
		if err == nil && j.Fail > 0 && chance(in.sim.world.Seed, j.Name, r.Scheduled.UnixNano(), int64(r.Attempt)) < j.Fail {
			err = errors.New("job failed")
		}
		if in.isDead() {
			return err // a dead process records nothing
		}
		in.sim.hist.runEnded(jr, err)
		return err
	}
}

// lead runs the leader election, with a task that works while leading.
func (in *instance) lead() {
	_ = in.runner.Run(in.ctx, in.leaderTask(func(ctx context.Context) error {
		if !in.called(ctx, "leader") {
			return errNotTrusted
		}
		for i := 1; ; i++ {
			if !in.act(ctx, "leader") {
				return cmpErr(context.Cause(ctx), errNotTrusted)
			}
			in.updateValue(ctx, i)
			if err := lock.Sleep(ctx, in.clock, in.sim.world.TTL/4); err != nil {
				return err
			}
		}
	}))
}

// doLoop takes the critical lock with Do now and then.
func (in *instance) doLoop() {
	w := in.sim.world
	for {
		if err := lock.Sleep(in.ctx, in.clock, randDur(in.rng, 0, w.TTL)); err != nil {
			return
		}
		steps := 1 + in.rng.IntN(3)
		d := randDur(in.rng, 0, w.TTL/2)
		_ = in.session.Do(in.ctx, doLockID, func(ctx context.Context) error {
			return in.work(ctx, "do", steps, d)
		})
	}
}

// migrate applies the world's migrations, as every instance does at
// deploy.
func (in *instance) migrate() {
	var migs []migrations.Migration
	for v := int64(1); v <= 2; v++ {
		migs = append(migs, migrations.Migration{Version: v, Description: fmt.Sprintf("step %d", v),
			Definition: fmt.Sprintf("sim step %d", v),
			Up: func(ctx context.Context, db *mongo.Database) error {
				mr := MigRun{Version: v, Instance: in.life.Name}
				if l, ok := lock.LeaseFrom(ctx); ok {
					mr.Fence = l.Fence()
				}
				mr.Began = in.sim.hist.now()
				err := in.work(ctx, fmt.Sprintf("migration %d", v), 2, in.sim.world.TTL/3)
				if err == nil {
					_, err = db.Collection("effects").InsertOne(ctx, bson.D{{Key: "v", Value: v}, {Key: "by", Value: in.life.Name}})
				}
				if !in.isDead() {
					mr.Ended, mr.Err = in.sim.hist.now(), err
					in.sim.hist.update(func() { in.sim.hist.migs = append(in.sim.hist.migs, mr) })
				}
				return err
			}})
	}
	m, err := migrations.New(in.client.Database(dbName), migrations.WithSession(in.session), migrations.WithMigrations(migs...),
		migrations.WithWait(time.Hour))
	if err != nil {
		in.sim.fatalf("%s: migrator: %v", in.life.Name, err)
		return
	}
	for in.ctx.Err() == nil {
		if _, err := m.Up(in.ctx); err == nil {
			return
		}
		if lock.Sleep(in.ctx, in.clock, in.sim.world.TTL) != nil {
			return
		}
	}
}

// freeze stops the process (suspend: its host sleeps, and its monotonic
// clock with it) until thaw.
func (in *instance) freeze(suspend bool) {
	in.mu.Lock()
	in.running = make(chan struct{})
	in.mu.Unlock()
	in.link.Pause()
	if suspend {
		in.clock.Suspend()
	} else {
		in.clock.Freeze()
	}
	in.sim.hist.update(func() { in.life.Frozen = append(in.life.Frozen, [2]time.Duration{in.sim.hist.now(), 0}) })
}

// thaw ends a freeze; it does nothing to a process not frozen, or dead.
func (in *instance) thaw() {
	in.mu.Lock()
	select {
	case <-in.running:
		in.mu.Unlock()
		return
	default:
	}
	if in.dead {
		in.mu.Unlock()
		return
	}
	close(in.running)
	in.mu.Unlock()
	in.sim.hist.update(func() { in.life.Frozen[len(in.life.Frozen)-1][1] = in.sim.hist.now() })
	in.link.Resume()
	in.clock.Thaw()
}

// kill ends the process at once: nothing it sends arrives, its timers
// stop, and it acts no more. Its goroutines are let go at the end of the
// run (shutdown).
func (in *instance) kill() {
	in.mu.Lock()
	in.dead = true
	frozen := in.running
	in.mu.Unlock()
	in.link.Kill()
	in.clock.Freeze()
	select {
	case <-frozen:
	default:
		close(frozen) // a frozen process that dies: waiters see it dead
	}
	in.sim.hist.update(func() { in.life.Down, in.life.Died = in.sim.hist.now(), true })
}

// stop stops the process cleanly, as a rolling deploy does.
func (in *instance) stop() {
	in.mu.Lock()
	if in.stopped {
		in.mu.Unlock()
		<-in.exited // a stop under way: its end is this one's
		return
	}
	in.stopped = true
	dead := in.dead
	in.mu.Unlock()
	if !dead {
		// Down from the moment it begins to stop: it claims nothing more.
		in.sim.hist.update(func() { in.life.Down = in.sim.hist.now() })
	}
	if dead {
		in.clock.Thaw() // let its goroutines end
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*in.sim.world.TTL)
	defer cancel()
	for _, s := range in.scheds {
		if s.Stop(ctx) != nil {
			_ = s.Stop(context.Background()) // its jobs were cancelled: they end
		}
	}
	in.cancel()
	in.wg.Wait()
	if in.session != nil {
		_ = in.session.Close()
	}
	if in.client != nil {
		_ = in.client.Disconnect(context.Background())
	}
	close(in.exited)
}

// waitStopped waits for a stop under way to end; a dead process's
// goroutines are let go only at the end of the run.
func (in *instance) waitStopped() {
	if !in.isDead() {
		<-in.exited
	}
}
