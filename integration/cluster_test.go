//go:build unix

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
)

// Timings of the tests: short, so the suite stays quick.
const (
	testTTL = 2 * time.Second
	// every is the period of the cron jobs.
	every = time.Second
	// startTimeout bounds an instance's start: exec, connect, migrations.
	startTimeout = 30 * time.Second
	// logTail is how many lines of an instance's log a failure shows.
	logTail = 40
)

// cluster is a test's set of instances on one fresh database: child processes
// (spawn) and in-process ones (startLocal), all reporting to one recorder.
type cluster struct {
	tb   testing.TB
	be   backend
	db   *mongo.Database // the test's own client, for checks
	rec  *recorder
	base instanceConfig

	mu    sync.Mutex
	seq   int
	procs []*proc
}

// newCluster returns an empty cluster whose instances use a lease of ttl and
// the jobs given (each "@every 1s"). Everything it starts is stopped at the
// end of the test.
func newCluster(tb testing.TB, ttl time.Duration, jobs ...string) *cluster {
	tb.Helper()
	be := useBackend(tb)
	db := mongotest.NewDatabase(tb)
	c := &cluster{
		tb:  tb,
		be:  be,
		db:  db,
		rec: newRecorder(),
		base: instanceConfig{
			URI:      be.URI,
			Database: db.Name(),
			TTL:      ttl,
			Jobs:     jobs,
			Every:    every,
			Work:     ttl / 10,
		},
	}
	tb.Cleanup(c.close)
	return c
}

// config returns the configuration of the next instance.
func (c *cluster) config(mods ...func(*instanceConfig)) instanceConfig {
	c.mu.Lock()
	c.seq++
	cfg := c.base
	cfg.Keeper = fmt.Sprintf("inst-%02d", c.seq)
	c.mu.Unlock()
	for _, m := range mods {
		m(&cfg)
	}
	return cfg
}

// proc is an instance running as a child process.
type proc struct {
	keeper string
	cmd    *exec.Cmd
	log    *tail
	done   chan struct{} // closed once the process exited

	mu       sync.Mutex
	exitedAt time.Time
	err      error
	expected bool // we killed or stopped it
}

// spawn starts an instance as a child process: this test binary, which
// TestMain turns into the instance.
func (c *cluster) spawn(mods ...func(*instanceConfig)) *proc {
	c.tb.Helper()
	cfg := c.config(mods...)
	raw, err := json.Marshal(cfg)
	if err != nil {
		c.tb.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		c.tb.Fatal(err)
	}
	p := &proc{keeper: cfg.Keeper, log: newTail(logTail), done: make(chan struct{})}
	p.cmd = exec.Command(exe)
	p.cmd.Env = append(os.Environ(), envInstance+"="+string(raw))
	p.cmd.Stdout = &lineWriter{line: func(l []byte) {
		var e event
		if err := json.Unmarshal(l, &e); err != nil {
			p.log.add("stdout: " + string(l))
			return
		}
		c.rec.add(e)
	}}
	p.cmd.Stderr = &lineWriter{line: func(l []byte) { p.log.add(string(l)) }}
	dieWithParent(p.cmd)
	if err := p.cmd.Start(); err != nil {
		c.tb.Fatalf("start instance %s: %v", cfg.Keeper, err)
	}
	go func() {
		err := p.cmd.Wait()
		p.mu.Lock()
		p.exitedAt, p.err = wallNow(), err
		p.mu.Unlock()
		close(p.done)
	}()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p
}

// spawnN starts n instances at once and waits until all are up.
func (c *cluster) spawnN(n int, mods ...func(*instanceConfig)) []*proc {
	c.tb.Helper()
	from := c.rec.mark()
	ps := make([]*proc, n)
	for i := range ps {
		ps[i] = c.spawn(mods...)
	}
	for _, p := range ps {
		c.awaitUp(from, p.keeper)
	}
	return ps
}

// awaitUp waits until keeper reported it is up, at or after index from.
func (c *cluster) awaitUp(from int, keeper string) event {
	c.tb.Helper()
	return c.rec.awaitOne(c.tb, from, startTimeout, keeper+" up", func(e event) bool {
		if e.Keeper == keeper && e.Kind == evError {
			c.tb.Fatalf("instance %s failed: %s\n%s", keeper, e.Err, c.logsOf(keeper))
		}
		return e.Keeper == keeper && e.Kind == evUp
	})
}

// awaitLeader waits up to d for a leader task to start at or after index
// from.
func (c *cluster) awaitLeader(from int, d time.Duration) event {
	c.tb.Helper()
	return c.rec.awaitOne(c.tb, from, d, "a leader", isKind(evLeadStart))
}

func (c *cluster) proc(keeper string) *proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.keeper == keeper {
			return p
		}
	}
	c.tb.Fatalf("no process %s", keeper)
	return nil
}

// kill sends SIGKILL and returns when the process is gone, and the time it
// was killed: nothing it does is later than that.
func (p *proc) kill(tb testing.TB) time.Time {
	tb.Helper()
	p.mu.Lock()
	p.expected = true
	p.mu.Unlock()
	if err := p.cmd.Process.Kill(); err != nil {
		tb.Fatalf("kill %s: %v", p.keeper, err)
	}
	<-p.done
	return p.exitedAt
}

// signal sends sig to the process.
func (p *proc) signal(tb testing.TB, sig syscall.Signal) {
	tb.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		tb.Fatalf("%v to %s: %v", sig, p.keeper, err)
	}
}

// terminate asks the process to stop (SIGTERM) and waits for it; it must
// stop cleanly within d.
func (p *proc) terminate(tb testing.TB, d time.Duration) {
	tb.Helper()
	if err := p.stop(d); err != nil {
		tb.Errorf("%v\n%s", err, p.log)
	}
}

func (p *proc) stop(d time.Duration) error {
	select {
	case <-p.done:
	default:
		p.mu.Lock()
		p.expected = true
		p.mu.Unlock()
		_ = p.cmd.Process.Signal(syscall.SIGCONT) // in case it is stopped
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-p.done:
		case <-t.C:
			_ = p.cmd.Process.Kill()
			<-p.done
			return fmt.Errorf("instance %s did not stop within %v", p.keeper, d)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil && !p.killedBySignal() {
		return fmt.Errorf("instance %s: %v", p.keeper, p.err)
	}
	return nil
}

// killedBySignal reports an exit by SIGKILL that we sent. p.mu is held.
func (p *proc) killedBySignal() bool {
	var ee *exec.ExitError
	if !errors.As(p.err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL && p.expected
}

// deaths returns when each killed process died.
func (c *cluster) deaths() map[string]time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]time.Time{}
	for _, p := range c.procs {
		select {
		case <-p.done:
			p.mu.Lock()
			out[p.keeper] = p.exitedAt
			p.mu.Unlock()
		default:
		}
	}
	return out
}

func (c *cluster) logsOf(keeper string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.keeper == keeper {
			return p.log.String()
		}
	}
	return ""
}

// startLocal starts an instance in this process on client, and stops it at
// the end of the test, before client is disconnected.
func (c *cluster) startLocal(client *mongo.Client, mods ...func(*instanceConfig)) *instance {
	c.tb.Helper()
	cfg := c.config(mods...)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	log := zerolog.New(zerolog.NewTestWriter(c.tb)).Level(zerolog.WarnLevel)
	in, err := startInstance(ctx, cfg, client, c.rec.add, log)
	if err != nil {
		c.tb.Fatalf("start instance %s: %v", cfg.Keeper, err)
	}
	c.tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), instanceStopTimeout)
		defer cancel()
		if err := in.stop(ctx); err != nil {
			c.tb.Errorf("stop instance %s: %v", cfg.Keeper, err)
		}
	})
	return in
}

// close stops every instance process, checks they stopped cleanly, and shows
// their logs if the test failed.
func (c *cluster) close() {
	c.mu.Lock()
	procs := c.procs
	c.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(procs))
	for i, p := range procs {
		wg.Go(func() { errs[i] = p.stop(instanceStopTimeout) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			c.tb.Error(err)
		}
	}
	if c.tb.Failed() {
		for _, p := range procs {
			c.tb.Logf("log of %s:\n%s", p.keeper, p.log)
		}
		c.tb.Logf("events:\n%s", format(c.rec.all()))
	}
}

// checkExclusion checks what every scenario promises: no two leader terms
// overlapped (a killed leader's term ends when it died), and no firing ran
// twice, by the instances' reports and by the database.
func (c *cluster) checkExclusion() {
	c.tb.Helper()
	evs := c.rec.all()
	assertNoOverlap(c.tb, "leader terms", leaderTerms(evs, c.deaths(), wallNow()))
	c.checkFirings(time.Time{}, time.Time{})
}

// checkFirings checks that no firing ran twice, and returns the firings that
// ran, from the database. When from is set, it also checks that every
// firing of every job in [from, to] ran.
func (c *cluster) checkFirings(from, to time.Time) map[firingKey]int {
	c.tb.Helper()
	ran := c.firings()
	for k, n := range jobRuns(c.rec.all()) {
		if n > 1 || n > ran[k] {
			c.tb.Errorf("firing %s@%s: %d runs reported, %d in the database", k.Job, k.Scheduled.Format(time.TimeOnly), n, ran[k])
		}
	}
	twice := 0
	for _, k := range sortedFirings(ran) {
		if ran[k] > 1 {
			twice++
			c.tb.Errorf("firing %s@%s ran %d times", k.Job, k.Scheduled.Format(time.TimeOnly), ran[k])
		}
	}
	if from.IsZero() {
		c.tb.Logf("firings: %d ran, %d ran more than once", len(ran), twice)
		return ran
	}
	var missed []string
	expected := 0
	for f := from.Truncate(c.base.Every); !f.After(to); f = f.Add(c.base.Every) {
		if f.Before(from) {
			continue
		}
		for _, job := range c.base.Jobs {
			expected++
			if ran[firingKey{job, f.UTC()}] == 0 {
				missed = append(missed, job+"@"+f.Format("15:04:05"))
			}
		}
	}
	if len(missed) > 0 {
		c.tb.Errorf("firings in [%s, %s] that did not run: %s", from.Format(time.TimeOnly), to.Format(time.TimeOnly), strings.Join(missed, " "))
	}
	c.tb.Logf("firings in [%s, %s]: %d expected, %d ran exactly once, %d missed, %d ran more than once",
		from.Format(time.TimeOnly), to.Format(time.TimeOnly), expected, expected-len(missed), len(missed), twice)
	return ran
}

// firings reads how often each firing ran from the database.
func (c *cluster) firings() map[firingKey]int {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cur, err := c.db.Collection(firingsColl).Find(ctx, bson.D{})
	if err != nil {
		c.tb.Fatal(err)
	}
	var docs []struct {
		Job       string    `bson:"job"`
		Scheduled time.Time `bson:"scheduled"`
		N         int       `bson:"n"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		c.tb.Fatal(err)
	}
	out := map[firingKey]int{}
	for _, d := range docs {
		out[firingKey{d.Job, d.Scheduled.UTC()}] = d.N
	}
	return out
}

// holder reads the leader lock's holder from the database.
func (c *cluster) holder() lock.Holder {
	c.tb.Helper()
	l, err := lock.New(c.db, lock.WithTTL(c.base.TTL))
	if err != nil {
		c.tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := l.Holder(ctx, leaderLock)
	if err != nil {
		c.tb.Fatalf("holder of %s: %v", leaderLock, err)
	}
	return h
}

// sleep lets the cluster run for d: not synchronisation, a stretch of time
// the scenario observes.
func sleep(d time.Duration) { time.Sleep(d) }

// untilMidPeriod sleeps until halfway between two firings, then periods more,
// so that what the test does next lands away from the claims of a firing.
func untilMidPeriod(periods int) {
	now := time.Now()
	next := now.Truncate(every).Add(every / 2)
	if next.Before(now) {
		next = next.Add(every)
	}
	sleep(next.Sub(now) + time.Duration(periods)*every)
}

// lineWriter calls line for every complete line written to it.
type lineWriter struct {
	mu   sync.Mutex
	buf  []byte
	line func([]byte)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.line(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
}

// tail keeps the last lines of a log.
type tail struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func newTail(n int) *tail { return &tail{max: n} }

func (t *tail) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	if len(t.lines) > t.max {
		t.lines = t.lines[len(t.lines)-t.max:]
	}
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return "  " + strings.Join(t.lines, "\n  ")
}
