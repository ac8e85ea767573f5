package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/cluster"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/scheduler"
)

// Defaults of the demo's flags.
const (
	demoDuration  = 30 * time.Second
	demoInstances = 3
	maxInstances  = 9
)

// demoFlags are the demo's own flags.
type demoFlags struct {
	duration  time.Duration
	instances int
	killAfter time.Duration
	stopAfter time.Duration
	keep      bool
	ui        bool   // serve the dashboard while the demo runs
	uiListen  string // where
}

// demo is one run of `mongolock demo`: the instances it started, what they
// reported, and the plan.
type demo struct {
	a      *app
	f      demoFlags
	clock  clockwork.Clock
	out    io.Writer
	uri    string // what the instances connect to
	dbName string
	c      *cluster.Cluster // the instances and the log the summary reads
	db     *mongo.Database

	failover *cluster.Event    // the kill or stop of a leader that nobody replaced yet
	keepers  map[string]string // instance -> keeper id, as it reported
	killed   map[string]bool
	watchers sync.WaitGroup // watchStarts
	// killSig and endSig: the demo's signals (demoSignals), nil where
	// there are none.
	killSig, endSig <-chan os.Signal
}

func (a *app) demo(ctx context.Context, args []string) error {
	a.demoDefaults()
	if !a.explicit["db"] {
		a.g.db = "" // a fresh database for every run, unless --db
	}
	f := demoFlags{duration: demoDuration, instances: demoInstances}
	fs := a.flagSet("demo")
	fs.DurationVar(&f.duration, "duration", f.duration, "how long the demo runs")
	fs.IntVar(&f.instances, "instances", f.instances, fmt.Sprintf("how many instances to run (2 to %d)", maxInstances))
	fs.DurationVar(&f.killAfter, "kill-after", 0, "when to SIGKILL the leader (default a third of --duration; 0 to never)")
	fs.DurationVar(&f.stopAfter, "stop-after", 0, "when to stop the next leader gracefully (default two thirds of --duration, or never if that leaves less than 2 x TTL after the kill or before the end; 0 to never)")
	fs.BoolVar(&f.keep, "keep", false, "keep the demo's database (with --uri; otherwise it is dropped)")
	fs.BoolVar(&f.ui, "ui", false, "serve the dashboard (mongolock ui) of the demo's database while it runs, and print its address")
	fs.StringVar(&f.uiListen, "ui-listen", "127.0.0.1:0", "address of the dashboard with --ui (port 0 picks one)")
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	set := make(map[string]bool)
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if !set["kill-after"] {
		f.killAfter = f.duration / 3
	}
	if !set["stop-after"] {
		f.stopAfter = 2 * f.duration / 3
		if f.check(a.g.ttl) != nil { // too short a demo for both: kill only
			f.stopAfter = 0
		}
	}
	if err := checkInstanceTTL(a.g.ttl); err != nil {
		return err
	}
	if err := f.check(a.g.ttl); err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("demo takes no arguments, got %q", pos[0])
	}
	log, err := a.logger()
	if err != nil {
		return err
	}

	clock := clockwork.NewRealClock()
	d := &demo{a: a, f: f, clock: clock, out: a.stdout, c: cluster.New(clock),
		keepers: make(map[string]string), killed: make(map[string]bool)}
	uri := a.g.uri
	if uri == "" {
		uri = a.getenv(envURI)
	}
	where := ""
	if uri == "" {
		switch {
		case a.cfg.devServer == nil:
			return usagef("no server: set --uri or %s", envURI)
		case f.keep:
			return usagef("--keep needs --uri: the embedded server's data is removed at exit")
		}
		// FerretDB logs failed commands (duplicate keys are how locks say
		// "taken") at Warn: only errors are worth showing.
		flog := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelError}))
		d.progress("starting an embedded FerretDB (a temporary server, removed at exit)")
		srv, err := a.cfg.devServer(ctx, DevServerConfig{Addr: anyLoopbackAddr, Logger: flog})
		if err != nil {
			return err
		}
		defer func() {
			if err := srv.Close(); err != nil {
				fmt.Fprintf(a.stderr, "%s: demo: %v\n", a.name(), err)
			}
		}()
		uri = srv.URI()
		where = fmt.Sprintf("embedded FerretDB at %s (temporary: removed at exit)", hostOf(uri))
	}
	a.g.uri = uri
	given := a.g.db != ""
	if !given {
		a.g.db = demoDatabaseName(d.clock.Now())
	}
	d.progress(fmt.Sprintf("connecting to the server (up to --timeout %v)", a.g.timeout))
	db, disconnect, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer disconnect()
	if given {
		// The demo writes locks and jobs, and drops the database at the end:
		// never in a database that holds anything already.
		lctx, cancel := context.WithTimeout(ctx, a.g.timeout)
		names, err := db.ListCollectionNames(lctx, bson.D{})
		cancel()
		switch {
		case err != nil:
			return fmt.Errorf("list the collections of %s: %w", db.Name(), err)
		case len(names) > 0:
			return usagef("database %s is not empty (%s): the demo needs one of its own; leave out --db for a fresh one", db.Name(), strings.Join(names, ", "))
		}
	}
	if where == "" {
		where = a.red.uri()
	}
	// Build what an instance builds: options it would refuse fail here,
	// before any instance starts.
	in, err := a.newInstance(db, nil, log, "demo-preflight", newEmitter(io.Discard, false, ""), demoWork)
	if err != nil {
		return fmt.Errorf("the instances cannot run with these flags: %w", err)
	}
	_ = in.session.Close() // it took nothing: no I/O
	d.uri, d.dbName = uri, db.Name()
	return d.run(ctx, db, where)
}

// checkInstanceTTL refuses a TTL the demo's instances would refuse (their
// Sessions: checkTTL), saying whose.
func checkInstanceTTL(ttl time.Duration) error {
	if checkTTL(ttl, minSessionTTL) != nil {
		return usagef("--ttl %v: the demo's instances need a lease TTL from %v to %v", ttl, minSessionTTL, lock.MaxTTL)
	}
	return nil
}

// hostOf is the host:port of a connection string, or the string itself.
func hostOf(uri string) string {
	if u, err := url.Parse(uri); err == nil && u.Host != "" {
		return u.Host
	}
	return uri
}

// check validates the plan: a failover needs time to happen before the next
// step and before the end.
func (f demoFlags) check(ttl time.Duration) error {
	room := 2 * ttl // a failover takes up to TTL plus a retry period
	switch {
	case f.duration <= 0:
		return usagef("--duration must be positive")
	case f.instances < 2 || f.instances > maxInstances:
		return usagef("--instances must be between 2 and %d", maxInstances)
	case f.killAfter < 0 || f.stopAfter < 0:
		return usagef("--kill-after and --stop-after must not be negative")
	case f.killAfter > 0 && f.duration-f.killAfter < room:
		return usagef("--kill-after %v leaves less than 2 x TTL (%v) before the end (--duration %v) for the failover", f.killAfter, room, f.duration)
	case f.stopAfter > 0 && f.duration-f.stopAfter < room:
		return usagef("--stop-after %v leaves less than 2 x TTL (%v) before the end (--duration %v) for the handover", f.stopAfter, room, f.duration)
	case f.killAfter > 0 && f.stopAfter > 0 && f.stopAfter-f.killAfter < room && f.stopAfter > f.killAfter:
		return usagef("--stop-after must come at least 2 x TTL (%v) after --kill-after, for the failover", room)
	}
	return nil
}

// demoDatabaseName is a fresh database name for one run.
func demoDatabaseName(now time.Time) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return "mongolock_demo_" + now.UTC().Format("20060102_150405") + "_" + hex.EncodeToString(b[:])
}

func (d *demo) run(ctx context.Context, db *mongo.Database, where string) error {
	d.db = db
	// Listened to before the header names them: unheard, SIGUSR1 ends the
	// process.
	var stopSignals func()
	d.killSig, d.endSig, stopSignals = demoSignals()
	defer stopSignals()
	d.header(where)
	if d.f.ui {
		stop, err := d.serveUI(ctx, db)
		if err != nil {
			return err
		}
		defer stop()
	}
	d.progress(fmt.Sprintf("starting %d instances (this program, run again as demo-instance)", d.f.instances))
	var startErr error
	for i := range d.f.instances {
		if err := d.spawn(fmt.Sprintf("app%d", i+1)); err != nil {
			startErr = fmt.Errorf("start an instance: %w", err)
			break
		}
	}
	interrupted := d.loop(ctx, startErr != nil)
	d.watchers.Wait()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.a.g.timeout)
	defer cancel()
	if startErr != nil {
		d.drop(cctx, db)
		return startErr
	}

	// What the scheduler recorded: the firings started but not run, those
	// recorded as not run and why, and the runs counted again,
	// independently of the instances' reports.
	hist, herr := loadDemoHistory(cctx, db, demoJobs())
	s := summarize(d.c.Events(), demoJobs(), hist)
	s.print(d.out, d.a.g.ttl)
	failures := s.failures()
	if herr != nil {
		fmt.Fprintf(d.out, "  %-20s %v\n", "database check:", d.a.red.oneLine(herr.Error()))
		failures = append(failures, "could not check the recorded runs")
	} else {
		fmt.Fprintf(d.out, "  %-20s %d runs recorded in %s, %d firing(s) recorded twice\n", "database check:", hist.runs, scheduler.DefaultRunsCollection, hist.twice)
		if hist.twice > 0 {
			failures = append(failures, fmt.Sprintf("%d firing(s) recorded twice", hist.twice))
		}
	}
	d.drop(cctx, db)

	switch {
	case interrupted:
		return errors.New("demo interrupted")
	case len(failures) > 0:
		fmt.Fprintf(d.out, "FAILED: %s\n", strings.Join(failures, "; "))
		return fmt.Errorf("demo failed: %s", strings.Join(failures, "; "))
	}
	fmt.Fprintln(d.out, "OK: no firing ran twice. None misfired.")
	return nil
}

// drop drops the demo's database unless --keep.
func (d *demo) drop(ctx context.Context, db *mongo.Database) {
	if d.f.keep {
		fmt.Fprintf(d.out, "  %-20s %s kept (--keep)\n", "database:", d.dbName)
		return
	}
	if err := db.Drop(ctx); err != nil {
		fmt.Fprintf(d.out, "  could not drop database %s: %s\n", d.dbName, d.a.red.oneLine(err.Error()))
	}
}

func (d *demo) header(where string) {
	ttl := d.a.g.ttl
	fmt.Fprintf(d.out, "mongolock demo: %d instances for %v, lease TTL %v\n", d.f.instances, d.f.duration, ttl)
	fmt.Fprintf(d.out, "  server:    %s\n", where)
	fmt.Fprintf(d.out, "  database:  %s\n", d.dbName)
	var jobs []string
	for _, j := range demoJobs() {
		jobs = append(jobs, fmt.Sprintf("%s (%s)", j.name, j.spec))
	}
	fmt.Fprintf(d.out, "  each runs: migrations; cron jobs %s on whichever instance claims each firing;\n", strings.Join(jobs, ", "))
	fmt.Fprintf(d.out, "             a leader task on the instance holding lock %q\n", demoLeaderLock)
	var plan []string
	if d.f.killAfter > 0 {
		plan = append(plan, fmt.Sprintf("at %v SIGKILL the leader (failover within about TTL)", d.f.killAfter))
	}
	if d.f.stopAfter > 0 {
		plan = append(plan, fmt.Sprintf("at %v stop the leader gracefully (it releases: handover at once)", d.f.stopAfter))
	}
	plan = append(plan, fmt.Sprintf("at %v stop everything and count", d.f.duration))
	fmt.Fprintf(d.out, "  plan:      %s\n", strings.Join(plan, "; "))
	if hint := demoSignalHint(os.Getpid()); hint != "" {
		fmt.Fprintf(d.out, "  signals:   %s\n", hint)
	}
	fmt.Fprintln(d.out)
}

// spawn starts one instance: this very program, running demo-instance.
func (d *demo) spawn(name string) error {
	exe := d.a.exe
	if exe == nil {
		exe = os.Executable
	}
	path, err := exe()
	if err != nil {
		return err
	}
	g := d.a.g
	_, err = d.c.Start(cluster.Spec{
		Name: name,
		Path: path,
		Args: []string{"demo-instance", "--name", name, "--events", "--watch-stdin", "--http", "127.0.0.1:0",
			"--db", d.dbName, "--collection", g.collection, "--ttl", g.ttl.String(),
			"--timeout", g.timeout.String(), "--log-level", g.logLevel},
		// The URI goes in the environment, not the arguments that ps shows.
		Env: append(append(os.Environ(), envURI+"="+d.uri), d.a.childEnv...),
		// Closing stdin stops an instance wherever pipes work, unlike
		// signals; it also closes when the demo dies. Where there is one,
		// the parent-death signal stops it as Ctrl-C would, releasing what
		// it holds.
		StopByStdin:       true,
		ParentDeathSignal: syscall.SIGTERM,
	})
	return err
}

// loop runs the plan and prints what the instances report until every one
// of them exited. It reports whether ctx ended first.
func (d *demo) loop(ctx context.Context, stopNow bool) (interrupted bool) {
	timer := func(after time.Duration) (<-chan time.Time, func() bool) {
		if after <= 0 {
			return nil, func() bool { return false }
		}
		t := d.clock.NewTimer(after)
		return t.Chan(), t.Stop
	}
	killC, stopKill := timer(d.f.killAfter)
	defer stopKill()
	stopC, stopStop := timer(d.f.stopAfter)
	defer stopStop()
	endC, stopEnd := timer(d.f.duration)
	defer stopEnd()
	killSig, endSig := d.killSig, d.endSig
	var forceC <-chan time.Time
	stopForce := func() bool { return false }
	defer func() { stopForce() }()
	done := ctx.Done()
	pendingKill, pendingStop := false, false

	shutdown := func(why string) {
		killC, stopC, endC, done = nil, nil, nil, nil
		killSig, endSig = nil, nil
		pendingKill, pendingStop = false, false
		d.note(why)
		for _, p := range d.c.Procs() {
			d.stop(p, false, "end of the demo")
		}
		// Instances stop within their TTL and a few seconds; then force them.
		forceC, stopForce = timer(d.a.g.ttl + 2*demoStopTimeout)
	}
	if stopNow {
		shutdown("stopping the instances started so far")
	}

	live, next := len(d.c.Procs()), 0
	for live > 0 {
		evs, more := d.c.Next(next)
		next += len(evs)
		for _, ev := range evs {
			if d.handle(ev) {
				live--
			}
		}
		if live == 0 {
			break
		}
		if len(evs) > 0 {
			if pendingKill && d.c.Leader() != nil {
				pendingKill = !d.kill()
			} else if pendingStop && !pendingKill && d.c.Leader() != nil && d.failover == nil {
				pendingStop = !d.stopLeader()
			}
		}
		select {
		case <-more:
		case <-killC:
			killC = nil
			pendingKill = !d.kill()
		case <-killSig:
			d.note("SIGUSR1: killing the leader now")
			pendingKill = !d.kill()
		case <-endSig:
			shutdown("SIGUSR2: stopping every instance now")
		case <-stopC:
			stopC = nil
			pendingStop = pendingKill || d.failover != nil || !d.stopLeader()
		case <-endC:
			shutdown("time is up: stopping every instance")
		case <-done:
			interrupted = true
			shutdown("interrupted: stopping every instance")
		case <-forceC:
			forceC = nil
			for _, p := range d.c.Procs() {
				if !p.Exited() {
					d.note(p.Name() + " did not stop in time: killing it")
					_ = p.Kill() // an error means it is gone already
				}
			}
		}
	}
	d.c.Wait()
	return interrupted
}

// kill sends SIGKILL to the leader, if there is one.
func (d *demo) kill() bool {
	p := d.c.Leader()
	if p == nil {
		d.note("no leader to kill yet: waiting for one")
		return false
	}
	d.c.Add(cluster.Event{Kind: cluster.EvKilled, Instance: p.Name(), Leader: true})
	_ = p.Kill() // an error means it is gone already
	return true
}

// stopLeader asks the leader to stop, if another instance can take over.
func (d *demo) stopLeader() bool {
	p := d.c.Leader()
	if p == nil {
		d.note("no leader to stop yet: waiting for one")
		return false
	}
	others := 0
	for _, o := range d.c.Procs() {
		if o.Up() && o != p {
			others++
		}
	}
	if others == 0 {
		d.note("not stopping the leader: no other instance is up")
		return true
	}
	d.stop(p, true, "")
	return true
}

// stop asks p to stop (it closes its stdin): it releases what it holds and
// exits. leader says that it is stopped to make another lead.
func (d *demo) stop(p *cluster.Proc, leader bool, why string) {
	if !p.Up() {
		return
	}
	d.c.Add(cluster.Event{Kind: cluster.EvStopping, Instance: p.Name(), Leader: leader && d.c.Leader() == p, Msg: why})
	_ = p.Stop()
}

// handle prints one event of the log; it reports whether it is the exit of
// an instance.
func (d *demo) handle(ev cluster.Event) bool {
	extra := ""
	switch ev.Kind {
	case cluster.EvStart:
		d.keepers[ev.Instance] = ev.Keeper
	case cluster.EvKilled, cluster.EvStopping:
		if ev.Leader {
			d.failover = &ev
		}
		if ev.Kind == cluster.EvKilled {
			d.killed[ev.Instance] = true
		}
	case cluster.EvExited:
		if d.killed[ev.Instance] {
			d.watchStarts(ev.Instance, d.keepers[ev.Instance])
		}
	case cluster.EvLead:
		if f := d.failover; f != nil && f.Instance != ev.Instance {
			took := ev.Received.Sub(f.Received)
			what := "SIGKILL"
			if f.Kind == cluster.EvStopping {
				what = "stop"
			}
			extra = fmt.Sprintf("<- failover %d ms after the %s of %s (%.2f x TTL)", took.Milliseconds(), what, f.Instance, took.Seconds()/d.a.g.ttl.Seconds())
			d.failover = nil
		}
	}
	fmt.Fprintln(d.out, eventLine(ev, extra))
	return ev.Kind == cluster.EvExited
}

// progress says, before a step that may take a while, what the demo is
// doing, so that a slow start is not a silent one.
func (d *demo) progress(step string) {
	fmt.Fprintf(d.out, "%s demo: %s...\n", d.a.name(), step)
}

// note prints a line of the demo's own that the summary does not need.
func (d *demo) note(msg string) {
	fmt.Fprintf(d.out, "%s  %-8s %s\n", d.clock.Now().Local().Format(clockFormat), "demo", msg)
}
