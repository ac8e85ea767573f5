package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/cluster"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/scheduler"
)

// Defaults of the demo commands.
const (
	// demoTTL is the lease TTL of the demo: short, so failover shows.
	demoTTL = 3 * time.Second
	// demoLogLevel keeps the libraries' per-run Info logs out of the demo.
	demoLogLevel = "warn"
	// demoWork is how long a job run lasts.
	demoWork = 100 * time.Millisecond
	// demoStopTimeout bounds an instance's shutdown beyond its TTL.
	demoStopTimeout = 5 * time.Second
)

// Causes of an instance's shutdown.
var (
	errStdinClosed = errors.New("stdin closed")
	errShutdown    = errors.New("shutting down")
)

// demoDefaults gives the demo commands their own defaults for the global
// flags the operator did not set before the command.
func (a *app) demoDefaults() {
	if !a.explicit["ttl"] {
		a.g.ttl = demoTTL
	}
	if !a.explicit["log-level"] {
		a.g.logLevel = demoLogLevel
	}
}

// demoInstance is one instance of the demo: it applies the migrations, runs
// the demo's cron jobs on a Scheduler and a leader task on a
// LeaderAwareRunner, and reports what it does, until interrupted (or --for,
// or, with --watch-stdin, until its stdin closes).
func (a *app) demoInstance(ctx context.Context, args []string) error {
	a.demoDefaults()
	fs := a.flagSet("demo-instance")
	host, _ := os.Hostname()
	name := fs.String("name", host, "the instance's name in the output")
	events := fs.Bool("events", false, "print JSON event lines (for mongolock demo) instead of readable ones")
	watchStdin := fs.Bool("watch-stdin", false, "stop when stdin closes (mongolock demo's instances: the demo ended or died)")
	migrate := fs.Bool("migrate", true, "apply the migrations first")
	runFor := fs.Duration("for", 0, "stop after this long (0: run until interrupted)")
	work := fs.Duration("work", demoWork, "how long each job run lasts")
	httpAddr := fs.String("http", "", "serve /metrics (Prometheus) and /livez, /healthz, /readyz, /leader on this address (empty: do not serve)")
	pos, err := a.parse(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) > 0:
		return usagef("demo-instance takes no arguments, got %q", pos[0])
	case *name == "":
		return usagef("--name is empty")
	case *runFor < 0 || *work < 0:
		return usagef("--for and --work must not be negative")
	}
	if err := checkInstanceTTL(a.g.ttl); err != nil {
		return err
	}
	log, err := a.instanceLogger(*events)
	if err != nil {
		return err
	}
	log = log.With().Str("instance", *name).Logger()
	em := newEmitter(a.stdout, *events, *name)

	ctx, stop := context.WithCancelCause(ctx)
	defer stop(errShutdown)
	if *runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, *runFor, errShutdown)
		defer cancel()
	}
	if *watchStdin {
		// The read cannot be interrupted: this goroutine ends with stdin or
		// with the process, which is what the flag is for.
		go func() {
			_, _ = io.Copy(io.Discard, a.stdin)
			stop(errStdinClosed)
		}()
	}

	if err := a.runInstance(ctx, em, log, *migrate, *work, *httpAddr); err != nil {
		em.emit(cluster.Event{Kind: cluster.EvError, Msg: a.red.oneLine(err.Error())})
		return err
	}
	return nil
}

// instanceLogger is the logger of an instance: for the demo, plain console
// lines that the demo relays; otherwise as every command logs.
func (a *app) instanceLogger(events bool) (zerolog.Logger, error) {
	log, err := a.logger()
	if err != nil || !events {
		return log, err
	}
	w := zerolog.ConsoleWriter{Out: a.stderr, NoColor: true, PartsExclude: []string{zerolog.TimestampFieldName}}
	return log.Output(w), nil
}

func (a *app) runInstance(ctx context.Context, em *emitter, log zerolog.Logger, migrate bool, work time.Duration, httpAddr string) error {
	db, disconnect, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer disconnect()
	keepAlive, disconnectKeepAlive, err := a.connectKeepAlive()
	if err != nil {
		return err
	}
	defer disconnectKeepAlive()
	keeper := em.name + "/" + lock.NewKeeperID()
	// The term log records the leader terms for the dashboard (mongolock
	// ui); it is closed after the Session, whose close ends the last term.
	terms, err := runner.NewTermLog(db, runner.WithTermLogger(log))
	if err != nil {
		return err
	}
	defer closeTermLog(ctx, terms, a.g.timeout)
	in, err := a.newInstance(db, keepAlive, log, keeper, em, work)
	if err != nil {
		return err
	}
	defer in.session.Close()
	if err := in.session.AddObserver(terms); err != nil {
		return err
	}
	if err := in.session.AddObserver(firingObserver(em)); err != nil {
		return err
	}
	obs, err := newObservability(in.session)
	if err != nil {
		return err
	}
	var served string
	if httpAddr != "" {
		if served, err = obs.serve(httpAddr); err != nil {
			return usagef("%v", err)
		}
		defer obs.close(context.WithoutCancel(ctx))
	}
	em.emit(cluster.Event{Kind: cluster.EvStart, PID: os.Getpid(), Keeper: keeper, HTTP: served})

	if migrate {
		res, err := in.migrator.Up(log.WithContext(ctx)) // the context's logger gets the index helpers' warnings
		if err != nil {
			return fmt.Errorf("migrations: %w", err)
		}
		ev := cluster.Event{Kind: cluster.EvMigrated, Waited: res.Waited}
		for _, ap := range res.Applied {
			ev.Applied = append(ev.Applied, ap.Version)
		}
		em.emit(ev)
	}
	sched, lead := in.sched, in.lead
	if err := sched.Start(); err != nil {
		return err
	}
	em.emit(cluster.Event{Kind: cluster.EvReady})
	var wg sync.WaitGroup
	wg.Go(func() { _ = lead.Run(ctx, demoLeaderTask(em)) }) // returns when ctx ends, after releasing
	<-ctx.Done()

	// Hand over at once: the runner releases the leader lock, the scheduler
	// cancels running jobs and releases their locks.
	wg.Wait()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.g.ttl+demoStopTimeout)
	defer cancel()
	if err := sched.Stop(sctx); err != nil {
		return fmt.Errorf("stop the scheduler: %w", err)
	}
	if httpAddr != "" {
		// Every run has started by now: what /metrics counts can be
		// checked against the run events.
		runs, err := obs.runsStarted(sctx)
		if err != nil {
			return fmt.Errorf("scrape its own /metrics: %w", err)
		}
		em.emit(cluster.Event{Kind: cluster.EvMetrics, Runs: runs})
	}
	em.emit(cluster.Event{Kind: cluster.EvStopped, Msg: context.Cause(ctx).Error()})
	return nil
}

// instance is what a demo instance runs.
type instance struct {
	session  *lock.Session
	migrator *migrations.Migrator
	sched    *scheduler.Scheduler
	lead     *runner.LeaderAwareRunner
}

// newInstance builds an instance, starting nothing but its Session's
// keep-alive: the caller closes the Session. The demo builds one before
// starting its instances, so that flags they cannot run with are refused
// before anything starts. Errors from options are usage errors.
func (a *app) newInstance(db, keepAlive *mongo.Database, log zerolog.Logger, keeper string, em *emitter, work time.Duration) (*instance, error) {
	// One Session per instance: it owns the keeper id and keeps every lease
	// of the migrator, the scheduler and the runner alive.
	locker, err := a.locker(db, keepAlive, log)
	if err != nil {
		return nil, err
	}
	session, err := lock.NewSession(locker, lock.WithKeeperID(keeper), lock.WithSessionLogger(log))
	if err != nil {
		return nil, usagef("%v", err)
	}
	in := &instance{session: session}
	if err := in.build(db, em, work); err != nil {
		_ = session.Close()
		return nil, err
	}
	return in, nil
}

func (in *instance) build(db *mongo.Database, em *emitter, work time.Duration) error {
	var err error
	if in.migrator, err = migrations.New(db, migrations.WithSession(in.session)); err != nil {
		return usagef("%v", err)
	}
	if in.sched, err = scheduler.New(db, in.session); err != nil {
		return usagef("%v", err)
	}
	for _, j := range demoJobs() {
		if err := in.sched.AddJob(j.name, j.spec, demoJobFunc(em, work)); err != nil {
			return err
		}
	}
	in.lead, err = runner.New(in.session, demoLeaderLock,
		runner.OnStartedLeading(func(fence uint64) { em.emit(cluster.Event{Kind: cluster.EvLead, Fence: fence}) }))
	if err != nil {
		return usagef("%v", err)
	}
	return nil
}

// demoJobFunc reports the run, then works for a while.
func demoJobFunc(em *emitter, work time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		run, _ := scheduler.RunFromContext(ctx)
		em.emit(cluster.Event{Kind: cluster.EvRun, Job: run.Job, Firing: run.Scheduled, Fence: run.Fence})
		t := time.NewTimer(work)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// firingObserver reports what happens to firings beyond runs: those this
// instance took over from one that died or stopped, and those it did not
// run, with the scheduler's reason.
func firingObserver(em *emitter) lock.Observer {
	return lock.ObserverFunc(func(e lock.Event) {
		switch e.Kind {
		case lock.FiringTakenOver:
			em.emit(cluster.Event{Kind: cluster.EvTakenOver, Job: e.Job, Firing: e.Scheduled, Keeper: e.Leader})
		case lock.FiringSkipped:
			msg := e.Reason
			if e.Err != nil && !strings.Contains(msg, e.Err.Error()) {
				msg += " (" + e.Err.Error() + ")"
			}
			em.emit(cluster.Event{Kind: cluster.EvSkipped, Job: e.Job, Firing: e.Scheduled, Msg: msg})
		}
	})
}

// demoLeaderTask is the leader's long-running task. A real one would work
// here, passing runner.FenceFrom(ctx) to what it writes; this one waits for
// the end of its term and says why it ended.
func demoLeaderTask(em *emitter) func(context.Context) error {
	return func(ctx context.Context) error {
		fence, _ := runner.FenceFrom(ctx)
		<-ctx.Done()
		cause := context.Cause(ctx)
		lost := errors.Is(cause, lock.ErrLeaseLost)
		why := "shutting down, hands the lock over"
		if lost {
			why = "its lease could not be renewed in time (" + cause.Error() + ")"
		}
		em.emit(cluster.Event{Kind: cluster.EvUnlead, Fence: fence, Lost: lost, Msg: why})
		return nil
	}
}
