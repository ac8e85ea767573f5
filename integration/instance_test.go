//go:build unix

package integration

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/cluster"
	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/scheduler"
)

// envInstance, when set, makes the test binary run one instance configured by
// its value (an instanceConfig in JSON) instead of the tests.
const envInstance = "MONGOLOCK_INTEGRATION_INSTANCE"

// What instances share in the test's database.
const (
	leaderLock = "integration/leader"
	// workColl holds one document {_id: leaderLock, fence, keeper, writes}:
	// the resource the leader task writes to, which rejects writes with a
	// smaller fencing token than the last it accepted.
	workColl = "work"
	// firingsColl holds one document per firing that ran: {_id, job,
	// scheduled, calls}, calls the tokens of the job's calls for it (a
	// spent firing counted by the test has n: 1 instead).
	firingsColl = "firings"
	// deploysColl holds {_id: "migration", n}: how often the test
	// migration's Up ran.
	deploysColl = "deploys"

	testMigrationVersion = 1
	// instanceStopTimeout bounds an instance's shutdown.
	instanceStopTimeout = 15 * time.Second
)

// instanceConfig configures one instance. It crosses the process boundary
// as JSON.
type instanceConfig struct {
	URI      string        `json:"uri"`
	Database string        `json:"db"`
	Keeper   string        `json:"keeper"`
	TTL      time.Duration `json:"ttl"`
	// Skew is added to the wall clock the instance's lock, runner,
	// scheduler and migrator read.
	Skew time.Duration `json:"skew,omitzero"`
	// Jobs are cron jobs, each "@every Every".
	Jobs  []string      `json:"jobs,omitzero"`
	Every time.Duration `json:"every,omitzero"`
	// NoRunner leaves out the LeaderAwareRunner.
	NoRunner bool `json:"noRunner,omitzero"`
	// LeaderOnly runs the jobs on the leader only: the scheduler follows
	// the runner's election (scheduler.WithLeaderOnly). It needs the
	// runner.
	LeaderOnly bool `json:"leaderOnly,omitzero"`
	// RunTime is how long a job's run lasts after it counted itself,
	// unless its context ends first.
	RunTime time.Duration `json:"runTime,omitzero"`
	// Work is the period of the leader task's fenced writes.
	Work time.Duration `json:"work"`
	// Probe makes the leader task, when its lease was lost, renew and
	// release it late, as a paused process would, and report the outcome.
	Probe bool `json:"probe,omitzero"`
	// MigrationTime is how long the test migration's Up takes.
	MigrationTime time.Duration `json:"migrationTime,omitzero"`
	// Misfire is the scheduler's misfire policy (WithMisfirePolicy); nil
	// leaves the default. JobMisfirePolicy sets some jobs' own
	// (JobMisfirePolicy). MisfireThreshold, if set, is
	// WithMisfireThreshold's.
	Misfire          *scheduler.MisfirePolicy           `json:"misfire,omitzero"`
	JobMisfirePolicy map[string]scheduler.MisfirePolicy `json:"jobMisfirePolicy,omitzero"`
	MisfireThreshold time.Duration                      `json:"misfireThreshold,omitzero"`
	// Poll is the scheduler's poll interval (WithPollInterval); 0 leaves
	// the default, the Session's renew interval.
	Poll time.Duration `json:"poll,omitzero"`
	// StartAt, if set, is when (by the real clock) the scheduler starts,
	// so that a test knows which firings were before its Start.
	StartAt time.Time `json:"startAt,omitzero"`
	// ArmFile names the file a child process reads on rearm: an arming.
	ArmFile string `json:"armFile,omitzero"`
}

// rearm makes a child process read its ArmFile, which holds an arming
// ("kill@claim", "stop@lock", ...) or nothing: to act on itself, once, in
// the goroutine of a firing of its scheduler, between the claim and the
// start of the run, or between the start and the job's call. At "claim",
// in the FiringClaimed event of a scheduled firing (after the claim,
// before the job's lock is taken); at "lock", in the Acquired event of a
// job's lock (before the start is recorded), for a firing it claimed or
// took over; at "run", in the RunStarted event of a firing (its start
// recorded, the job not called yet: the firing is spent, and the job does
// not count it). "kill" is SIGKILL; "stop" SIGSTOP, until its driver
// resumes it. It reports an EvActing event first.
const rearm = syscall.SIGUSR1

// Armings.
const (
	killAtClaim = "kill@claim"
	stopAtClaim = "stop@claim"
	killAtLock  = "kill@lock"
	stopAtLock  = "stop@lock"
	killAtRun   = "kill@run"
)

// instance is one complete application: migrations at start, then a
// scheduler running cron jobs and a LeaderAwareRunner running a long leader
// task, all on one client and one keeper id. It reports what it does
// through emit.
type instance struct {
	cfg     instanceConfig
	emit    func(cluster.Event)
	db      *mongo.Database
	counts  *mongo.Database // where job counts runs
	locker  *lock.Locker
	session *lock.Session        // the instance's one keeper
	sched   *scheduler.Scheduler // nil without jobs
	runner  *runner.LeaderAwareRunner
	armed   atomic.Pointer[string] // its arming, if any (rearm)
	conts   chan os.Signal         // SIGCONT, when armed: the process was resumed
	working sync.Map               // job name -> time.Time: the firing claimed or taken over last

	cancel context.CancelFunc
	done   chan struct{} // closed when the runner's Run returned
	runErr error
}

// startInstance applies the migrations (waiting for another instance doing
// it) and starts the scheduler and the runner. ctx bounds the migrations
// only; stop ends the rest.
// keepAlive, if not nil, is a client of the Session's keep-alive's own
// (lock.WithKeepAliveDatabase), as a production process would use.
// counts, if not nil, is the client the jobs count their runs through
// (job): a small pool of their own, so that the jobs' counts do not wait
// behind the scheduler's commands.
func startInstance(ctx context.Context, cfg instanceConfig, client, keepAlive, counts *mongo.Client, emit func(cluster.Event), log zerolog.Logger) (*instance, error) {
	if counts == nil {
		counts = client
	}
	in := &instance{cfg: cfg, db: client.Database(cfg.Database), counts: counts.Database(cfg.Database)}
	in.emit = func(e cluster.Event) {
		e.Instance, e.T = cfg.Keeper, wallNow()
		emit(e)
	}
	log = log.With().Str("instance", cfg.Keeper).Logger()

	// The clock is given once, to the Locker; the Session and everything
	// built on it use it.
	opts := []lock.Option{lock.WithTTL(cfg.TTL), lock.WithClock(mongotest.SkewedClock(cfg.Skew)), lock.WithLogger(log)}
	if keepAlive != nil {
		opts = append(opts, lock.WithKeepAliveDatabase(keepAlive.Database(cfg.Database)))
	}
	var err error
	if in.locker, err = lock.New(in.db, opts...); err != nil {
		return nil, err
	}
	if in.session, err = lock.NewSession(in.locker, lock.WithKeeperID(cfg.Keeper), lock.WithSessionLogger(log),
		lock.WithObserver(lock.ObserverFunc(in.observe))); err != nil {
		return nil, err
	}
	fail := func(err error) (*instance, error) { return nil, errors.Join(err, in.session.Close()) }
	if cfg.LeaderOnly && cfg.NoRunner {
		return fail(errors.New("instance: LeaderOnly needs the runner"))
	}
	mig, err := migrations.New(in.db,
		migrations.WithSession(in.session),
		migrations.WithRetryPeriod(cfg.TTL/10),
		migrations.WithMigrations(in.testMigration()))
	if err != nil {
		return fail(err)
	}
	res, err := mig.Up(ctx)
	if err != nil {
		return fail(fmt.Errorf("migrations: %w", err))
	}
	migrated := cluster.Event{Kind: cluster.EvMigrated, Waited: res.Waited}
	for _, a := range res.Applied {
		migrated.Applied = append(migrated.Applied, a.Version)
	}
	in.emit(migrated)

	if !cfg.NoRunner {
		// Before the scheduler, which in leader-only mode asks it who leads.
		if in.runner, err = runner.New(in.session, leaderLock); err != nil {
			return fail(err)
		}
	}
	if len(cfg.Jobs) > 0 {
		// StopWait: a clean stop, as in a deploy, lets a run that started
		// count its firing rather than cancelling it halfway.
		opts := []scheduler.Option{scheduler.WithStopMode(scheduler.StopWait)}
		if cfg.Misfire != nil {
			opts = append(opts, scheduler.WithMisfirePolicy(*cfg.Misfire))
		}
		if cfg.MisfireThreshold > 0 {
			opts = append(opts, scheduler.WithMisfireThreshold(cfg.MisfireThreshold))
		}
		if cfg.Poll > 0 {
			opts = append(opts, scheduler.WithPollInterval(cfg.Poll))
		}
		if cfg.LeaderOnly {
			opts = append(opts, scheduler.WithLeaderOnly(in.runner))
		}
		if in.sched, err = scheduler.New(in.db, in.session, opts...); err != nil {
			return fail(err)
		}
		for _, name := range cfg.Jobs {
			var opts []scheduler.JobOption
			if p, ok := cfg.JobMisfirePolicy[name]; ok {
				opts = append(opts, scheduler.JobMisfirePolicy(p))
			}
			if err := in.sched.AddJob(name, fmt.Sprintf("@every %v", cfg.Every), in.job, opts...); err != nil {
				return fail(err)
			}
		}
		if wait := time.Until(cfg.StartAt); wait > 0 {
			select {
			case <-ctx.Done():
				return fail(context.Cause(ctx))
			case <-time.After(wait):
			}
		}
		if err := in.sched.Start(); err != nil {
			return fail(err)
		}
	}
	runCtx, cancel := context.WithCancel(context.Background())
	in.cancel, in.done = cancel, make(chan struct{})
	if in.runner == nil {
		close(in.done)
	} else {
		go func() {
			defer close(in.done)
			in.runErr = in.runner.Run(runCtx, in.lead)
		}()
	}
	in.emit(cluster.Event{Kind: cluster.EvReady})
	return in, nil
}

// testMigration is the application's own migration. Its side effect counts
// how often it ran: once, however many instances deploy at the same time.
func (in *instance) testMigration() migrations.Migration {
	return migrations.Migration{
		Version:     testMigrationVersion,
		Description: "count the deploys that ran this migration",
		Definition:  "integration: $inc deploys.migration",
		Up: func(ctx context.Context, db *mongo.Database) error {
			t := time.NewTimer(in.cfg.MigrationTime)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-t.C:
			}
			_, err := db.Collection(deploysColl).UpdateOne(ctx, bson.D{{Key: "_id", Value: "migration"}},
				bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}, options.UpdateOne().SetUpsert(true))
			if err == nil {
				in.emit(cluster.Event{Kind: cluster.EvMigration})
			}
			return err
		},
	}
}

// lead is the long leader task: a fenced write every cfg.Work, for as long
// as the runner says this instance leads.
func (in *instance) lead(ctx context.Context) error {
	fence, _ := runner.FenceFrom(ctx)
	in.emit(cluster.Event{Kind: cluster.EvLead, Fence: fence})
	tick := time.NewTicker(in.cfg.Work)
	defer tick.Stop()
	for {
		checked := wallNow()
		if ctx.Err() != nil || !in.runner.IsLeader() {
			break
		}
		accepted, err := in.write(ctx, fence)
		in.emit(cluster.Event{Kind: cluster.EvWork, Fence: fence, Checked: checked, Accepted: accepted, Msg: errText(err)})
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	// IsLeader turned false at the trust deadline; the runner cancels the
	// context at that same instant.
	<-ctx.Done()
	cause := context.Cause(ctx)
	lost := errors.Is(cause, lock.ErrLeaseLost)
	in.emit(cluster.Event{Kind: cluster.EvUnlead, Fence: fence, Msg: errText(cause), Lost: lost})
	if lost && in.cfg.Probe {
		in.probe(fence)
	}
	return nil
}

// write is the leader's work: a write that the resource accepts only if no
// larger fencing token wrote before.
func (in *instance) write(ctx context.Context, fence uint64) (accepted bool, err error) {
	_, err = in.db.Collection(workColl).UpdateOne(ctx,
		bson.D{{Key: "_id", Value: leaderLock}, {Key: "fence", Value: bson.D{{Key: "$lte", Value: int64(fence)}}}},
		bson.D{
			{Key: "$set", Value: bson.D{{Key: "fence", Value: int64(fence)}, {Key: "keeper", Value: in.cfg.Keeper}}},
			{Key: "$inc", Value: bson.D{{Key: "writes", Value: 1}}},
		},
		options.UpdateOne().SetUpsert(true))
	if mongo.IsDuplicateKeyError(err) { // a larger fence wrote: rejected
		return false, nil
	}
	return err == nil, err
}

// probe renews and releases the lost lease late, as a process that paused
// past its deadline would, and reports what the database said.
func (in *instance) probe(fence uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), in.cfg.TTL)
	defer cancel()
	r, renewErr := in.locker.Renew(ctx, in.cfg.Keeper, leaderLock)
	n, relErr := in.locker.ReleaseLocks(ctx, in.cfg.Keeper, leaderLock)
	in.emit(cluster.Event{Kind: cluster.EvProbe, Fence: fence, Held: len(r.Held), NotHeld: relErr == nil && n == 0,
		Msg: errText(errors.Join(renewErr, relErr))})
}

// job is every cron job: it counts its run in the database and reports it,
// then goes on for cfg.RunTime. A triggered run is counted apart from the
// firings, under its own id.
func (in *instance) job(ctx context.Context) error {
	run, _ := scheduler.RunFromContext(ctx)
	id := firingID(run.Job, run.Scheduled)
	if run.Triggered {
		id += "#triggered"
	}
	// Counted even if the run's context ends meanwhile (its lease lost in
	// a pause): the job was called. The count adds this call's own token
	// to a set, so a write tried again after any error (one whose reply
	// was lost may have applied) counts the call once: TestDatabaseOutage
	// lost a count to "incomplete read of message header: EOF", a write
	// sent on a connection from before the outage. Each try has a TTL: a
	// process stopped (SIGSTOP) just after the call finds the first try's
	// deadline passed when it resumes (TestLeaderOnlyLeaderKilled failed
	// so, the run uncounted: "timed out while checking out a connection").
	call := rand.Text()
	var err error
	for try := 0; try < 3; try++ {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.cfg.TTL)
		_, err = in.counts.Collection(firingsColl).UpdateOne(cctx,
			bson.D{{Key: "_id", Value: id}},
			bson.D{
				{Key: "$addToSet", Value: bson.D{{Key: "calls", Value: call}}},
				{Key: "$set", Value: bson.D{{Key: "job", Value: run.Job}, {Key: "scheduled", Value: run.Scheduled}, {Key: "keeper", Value: in.cfg.Keeper},
					{Key: "triggered", Value: run.Triggered}}},
			},
			options.UpdateOne().SetUpsert(true))
		cancel()
		if err == nil {
			break
		}
	}
	in.emit(cluster.Event{Kind: cluster.EvRun, Job: run.Job, Firing: run.Scheduled, Fence: run.Fence, Triggered: run.Triggered, Msg: errText(err)})
	if err != nil || in.cfg.RunTime <= 0 {
		return err
	}
	if lock.Sleep(ctx, in.session.Clock(), in.cfg.RunTime) != nil {
		return context.Cause(ctx)
	}
	return nil
}

func firingID(job string, scheduled time.Time) string {
	return job + "@" + scheduled.UTC().Format(time.RFC3339Nano)
}

// observe reports the scheduler's events about firings, and acts on
// itself when armed to (rearm). It runs in the goroutine where the event
// happened, so that it acts before the firing goes on.
func (in *instance) observe(e lock.Event) {
	switch e.Kind {
	case lock.FiringClaimed:
		if e.Reason != "" { // a triggered run
			in.emit(cluster.Event{Kind: cluster.EvClaimed, Job: e.Job, Firing: e.Scheduled, Triggered: true})
			return
		}
		in.working.Store(e.Job, e.Scheduled)
		in.emit(cluster.Event{Kind: cluster.EvClaimed, Job: e.Job, Firing: e.Scheduled})
		in.act("claim", e.Job, e.Scheduled)
	case lock.FiringTakenOver:
		in.working.Store(e.Job, e.Scheduled)
		in.emit(cluster.Event{Kind: cluster.EvTakenOver, Job: e.Job, Firing: e.Scheduled, Keeper: e.Leader})
	case lock.FiringSkipped:
		in.emit(cluster.Event{Kind: cluster.EvSkipped, Job: e.Job, Firing: e.Scheduled, Msg: e.Reason})
	case lock.Acquired:
		job, ok := strings.CutPrefix(e.LockID, scheduler.DefaultLockPrefix)
		if !ok || !slices.Contains(in.cfg.Jobs, job) {
			return // not a job's lock
		}
		if f, ok := in.working.Load(job); ok {
			in.act("lock", job, f.(time.Time))
		}
	case lock.RunStarted:
		in.act("run", e.Job, e.Scheduled)
	}
}

// act does what the instance is armed to do at point, if anything, to the
// firing of job at f: reports it, and signals its own process.
func (in *instance) act(point, job string, f time.Time) {
	armed := in.armed.Load()
	if armed == nil {
		return
	}
	what, at, _ := strings.Cut(*armed, "@")
	if at != point || !in.armed.CompareAndSwap(armed, nil) {
		return
	}
	in.emit(cluster.Event{Kind: cluster.EvActing, Job: job, Firing: f, Msg: *armed})
	// A signal a process sends itself stops or kills its other threads a
	// moment later, not at once: this goroutine must go no further
	// meanwhile, or it may record the start before the process stops.
	switch what {
	case "kill":
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	case "stop":
		for len(in.conts) > 0 {
			<-in.conts
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		<-in.conts
	}
}

// readArming reads the instance's arming from its ArmFile.
func (in *instance) readArming() {
	if in.conts == nil {
		in.conts = make(chan os.Signal, 1)
		signal.Notify(in.conts, syscall.SIGCONT)
	}
	b, err := os.ReadFile(in.cfg.ArmFile)
	if a := strings.TrimSpace(string(b)); err == nil && a != "" {
		in.armed.Store(&a)
	} else {
		in.armed.Store(nil)
	}
}

// stop stops the scheduler and the runner (which releases what it holds)
// and waits for them.
func (in *instance) stop(ctx context.Context) error {
	in.cancel()
	err := in.stopScheduler()
	select {
	case <-in.done:
	case <-ctx.Done():
		return errors.Join(err, fmt.Errorf("runner did not return: %w", ctx.Err()))
	}
	if in.runErr != nil && !errors.Is(in.runErr, context.Canceled) {
		err = errors.Join(err, in.runErr)
	}
	err = errors.Join(err, in.session.Close())
	if err == nil {
		in.emit(cluster.Event{Kind: cluster.EvStopped})
	}
	return err
}

func (in *instance) stopScheduler() error {
	if in.sched == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), instanceStopTimeout)
	defer cancel()
	return in.sched.Stop(ctx)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// instanceMain runs one instance in this process, started by the tests as a
// child process: events as JSON lines on stdout, logs on stderr. It stops
// cleanly on SIGTERM or SIGINT and returns the exit code. rearm arms it.
func instanceMain(raw string) int {
	var cfg instanceConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "instance: bad %s: %v\n", envInstance, err)
		return 2
	}
	enc := cluster.NewEncoder(os.Stdout)
	emit := func(e cluster.Event) { _ = enc.Encode(e) }
	fail := func(err error) int {
		emit(cluster.Event{Kind: cluster.EvError, Instance: cfg.Keeper, T: wallNow(), Msg: err.Error()})
		fmt.Fprintf(os.Stderr, "instance %s: %v\n", cfg.Keeper, err)
		return 1
	}
	log := zerolog.New(os.Stderr).Level(zerolog.InfoLevel).With().Timestamp().Logger()

	// The instance's clients, each disconnected when it returns: its own,
	// its Session's keep-alive's (a small pool), and the jobs' counts'
	// (retryable writes off: see job).
	var clients []*mongo.Client
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), instanceStopTimeout)
		defer cancel()
		for _, c := range slices.Backward(clients) {
			_ = c.Disconnect(ctx)
		}
	}()
	connect := func(name string, opts *options.ClientOptions) (*mongo.Client, error) {
		c, err := mongo.Connect(opts.ApplyURI(cfg.URI).SetAppName(cfg.Keeper + name).
			SetServerSelectionTimeout(cfg.TTL).SetConnectTimeout(cfg.TTL))
		if err == nil {
			clients = append(clients, c)
		}
		return c, err
	}
	client, err := connect("", options.Client())
	if err != nil {
		return fail(err)
	}
	keepAlive, err := connect("-keepalive", options.Client().SetMaxPoolSize(2))
	if err != nil {
		return fail(err)
	}
	counts, err := connect("-counts", options.Client().SetMaxPoolSize(2))
	if err != nil {
		return fail(err)
	}
	ctx, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stopSignals()
	arms := make(chan os.Signal, 1) // before the start: they wait for it
	signal.Notify(arms, rearm)
	defer signal.Stop(arms)
	in, err := startInstance(ctx, cfg, client, keepAlive, counts, emit, log)
	if err != nil {
		return fail(err)
	}
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-arms:
			in.readArming()
		}
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), instanceStopTimeout)
	defer cancel()
	if err := in.stop(stopCtx); err != nil {
		return fail(err)
	}
	return 0
}
