package health_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mongolock/mongolock/health"
	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/scheduler"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Timings of the database tests: a 1.5s lease, so the renew interval is
// 500ms, the renew deadline 1s and the retry period 100ms.
const dbTTL = 1500 * time.Millisecond

// instance is one process: a Session watched by a Checker (ForSession),
// whose probes it serves over HTTP.
type instance struct {
	t       *testing.T
	session *lock.Session
	checker *health.Checker
	url     string
}

func newInstance(t *testing.T, db *mongo.Database, keeper string, checkOpts []health.Option, sessionOpts ...lock.SessionOption) *instance {
	t.Helper()
	lk, err := lock.New(db, lock.WithTTL(dbTTL))
	if err != nil {
		t.Fatal(err)
	}
	opts := append([]lock.SessionOption{lock.WithKeeperID(keeper)}, sessionOpts...)
	s, err := lock.NewSession(lk, opts...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := health.ForSession(s, checkOpts...) // and what the test builds on s
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	c.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		if err := s.Close(); err != nil {
			t.Errorf("close session %s: %v", keeper, err)
		}
	})
	return &instance{t: t, session: s, checker: c, url: srv.URL}
}

// get probes path and returns the status code and the report.
func (in *instance) get(path string) (int, health.Report) {
	in.t.Helper()
	resp, err := http.Get(in.url + path)
	if err != nil {
		in.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		in.t.Fatal(err)
	}
	var rep health.Report
	if err := json.Unmarshal(body, &rep); err != nil {
		in.t.Fatalf("GET %s: %d %q: %v", path, resp.StatusCode, body, err)
	}
	return resp.StatusCode, rep
}

// await polls path until it answers code with check's reason containing
// every one of why, and returns that report.
func (in *instance) await(path string, code int, check string, why ...string) health.Report {
	in.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, rep := in.get(path)
		if got == code && matches(rep.Checks[check].Reason, why) {
			return rep
		}
		if time.Now().After(deadline) {
			in.t.Fatalf("GET %s: %d %+v; want %d with %s saying %q", path, got, rep, code, check, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func matches(reason string, why []string) bool {
	for _, w := range why {
		if !strings.Contains(reason, w) {
			return false
		}
	}
	return true
}

// countingMigrator counts the reads of the status.
type countingMigrator struct {
	m     *migrations.Migrator
	reads atomic.Int32
}

func (c *countingMigrator) Status(ctx context.Context) ([]migrations.Entry, error) {
	c.reads.Add(1)
	return c.m.Status(ctx)
}

// Readiness fails before Up and passes after, then reads the status no
// more.
func TestDBReadiness(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	in := newInstance(t, db, "k1", []health.Option{health.WithCheckTimeout(10 * time.Second)})
	// A migrator with Sessions of its own, watched by hand: WithSession
	// would have the Checker watch it, not the counting wrapper.
	m, err := migrations.New(db)
	if err != nil {
		t.Fatal(err)
	}
	cm := &countingMigrator{m: m}
	in.checker.WatchMigrations(cm)
	n := len(m.Migrations())

	code, rep := in.get(health.ReadyPath)
	if ch := rep.Checks[health.CheckMigrations]; code != http.StatusServiceUnavailable ||
		!strings.Contains(ch.Reason, fmt.Sprintf("%d of %d migrations not applied", n, n)) || !strings.Contains(ch.Reason, "(pending)") {
		t.Fatalf("before Up: %d %+v", code, rep)
	}
	if code, rep := in.get(health.LivePath); code != http.StatusOK {
		t.Fatalf("liveness before Up: %d %+v", code, rep)
	}
	if _, err := m.Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	code, rep = in.get(health.ReadyPath)
	if ch := rep.Checks[health.CheckMigrations]; code != http.StatusOK || ch.Reason != fmt.Sprintf("%d migrations applied", n) {
		t.Fatalf("after Up: %d %+v", code, rep)
	}
	reads := cm.reads.Load()
	for range 3 {
		if code, rep := in.get(health.ReadyPath); code != http.StatusOK {
			t.Fatalf("%d %+v", code, rep)
		}
	}
	if got := cm.reads.Load(); got != reads {
		t.Fatalf("%d reads of the status after everything was applied", got-reads)
	}
}

// The leader endpoint answers 200 on the leader of two runners only, and
// follows a handover.
func TestDBLeader(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	var ins []*instance
	var runners []*runner.LeaderAwareRunner
	var cancels []context.CancelFunc
	var wg sync.WaitGroup
	for i := range 2 {
		in := newInstance(t, db, fmt.Sprintf("k%d", i), nil)
		r, err := runner.New(in.session, "leader") // the Checker watches it
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = r.Run(ctx, func(ctx context.Context) error { <-ctx.Done(); return nil })
		}()
		ins, runners, cancels = append(ins, in), append(runners, r), append(cancels, cancel)
	}
	defer func() {
		for _, cancel := range cancels {
			cancel()
		}
		wg.Wait()
	}()

	// Whoever leads answers 200; the other 503, naming it once it saw it.
	deadline := time.Now().Add(20 * time.Second)
	lead := -1
	for lead < 0 {
		for i, r := range runners {
			if r.IsLeader() {
				lead = i
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("nobody leads")
		}
		time.Sleep(10 * time.Millisecond)
	}
	other := 1 - lead
	leader, follower := fmt.Sprintf("k%d", lead), fmt.Sprintf("k%d", other)
	ins[lead].await(health.LeaderPath, http.StatusOK, health.CheckLeader, fmt.Sprintf(`keeper %s leads "leader" (fence `, leader))
	ins[other].await(health.LeaderPath, http.StatusServiceUnavailable, health.CheckLeader,
		fmt.Sprintf(`keeper %s does not lead "leader": %s does`, follower, leader))

	// The leader stops: the other takes over, and the endpoints follow.
	cancels[lead]()
	ins[other].await(health.LeaderPath, http.StatusOK, health.CheckLeader, fmt.Sprintf(`keeper %s leads "leader"`, follower))
	ins[lead].await(health.LeaderPath, http.StatusServiceUnavailable, health.CheckLeader)
	for _, in := range ins {
		if code, rep := in.get(health.LivePath); code != http.StatusOK {
			t.Fatalf("liveness: %d %+v", code, rep)
		}
	}
}

// Renewals cut off fail liveness past the renew deadline plus the slack;
// the next round trip after the connection is back makes it pass again.
func TestDBRenewalsCut(t *testing.T) {
	t.Parallel()
	const slack = 300 * time.Millisecond
	name := mongotest.NewDatabase(t).Name()
	client, fault := mongotest.NewProxiedClient(t)
	in := newInstance(t, mongotest.Database(t, client, name), "k1", []health.Option{health.WithRenewSlack(slack)})
	m, err := in.session.Mutex("a")
	if err != nil {
		t.Fatal(err)
	}
	lease, ok, err := m.AcquireLock(context.Background())
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	in.await(health.LivePath, http.StatusOK, health.CheckRenewals, "no renewal failing")

	fault.Cut()
	cut := time.Now()
	rep := in.await(health.LivePath, http.StatusServiceUnavailable, health.CheckRenewals,
		"keeper k1: renewals failing for", `lease "a" stopped being trusted`, "past the renew deadline plus 300ms")
	// Not before the lease's deadline (at most a renew deadline after the
	// cut) plus the slack... and the lease is lost by then.
	if lease.Err() == nil {
		t.Fatalf("liveness failed while the lease is trusted: %+v", rep)
	}
	if took := time.Since(cut); took < slack {
		t.Fatalf("failed %v after the cut, before the slack", took)
	}
	if code, rep := in.get(health.ReadyPath); code != http.StatusServiceUnavailable {
		t.Fatalf("readiness while not live: %d %+v", code, rep)
	}

	fault.Restore()
	_ = m.ReleaseLock(context.Background()) // lost: a round trip all the same
	for deadline := time.Now().Add(20 * time.Second); ; {
		if _, _, err := m.AcquireLock(context.Background()); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("acquire after the restore: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	in.await(health.LivePath, http.StatusOK, health.CheckRenewals, "no renewal failing")
	_ = m.ReleaseLock(context.Background())
}

// A function that ignores its cancelled context fails liveness from its
// abandonment until it returns.
func TestDBAbandonedTask(t *testing.T) {
	t.Parallel()
	in := newInstance(t, mongotest.NewDatabase(t), "k1", nil, lock.WithGracePeriod(100*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	started, letGo, returned := make(chan struct{}), make(chan struct{}), make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- in.session.Do(ctx, "a", func(context.Context) error {
			defer close(returned)
			close(started)
			<-letGo // ignores its context
			return nil
		})
	}()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, lock.ErrTaskDidNotStop) {
		t.Fatalf("Do returned %v", err)
	}
	in.await(health.LivePath, http.StatusServiceUnavailable, health.CheckAbandoned,
		`task under "a" (keeper k1, fence `, "ignored its cancelled context and was abandoned", "it has not returned")
	close(letGo)
	<-returned
	in.await(health.LivePath, http.StatusOK, health.CheckAbandoned, "no task abandoned")
}

// The runner's stall detection fails liveness until the stalled task
// returned and the hold passed.
func TestDBStall(t *testing.T) {
	t.Parallel()
	const hold = time.Second
	in := newInstance(t, mongotest.NewDatabase(t), "k1", []health.Option{health.WithStallHold(hold)})
	r, err := runner.New(in.session, "stalls", runner.WithStallTimeout(200*time.Millisecond), runner.WithCampaignAgain(false))
	if err != nil {
		t.Fatal(err)
	}
	letGo := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- r.Run(context.Background(), func(ctx context.Context) error {
			<-ctx.Done() // never beats, heeds its cancellation when let go
			<-letGo
			return nil
		})
	}()
	in.await(health.LivePath, http.StatusServiceUnavailable, health.CheckStalls,
		`task under "stalls" (keeper k1, fence `, "(no heartbeat within the stall timeout)", "it has not returned")
	close(letGo)
	if err := <-errc; !errors.Is(err, runner.ErrStalled) {
		t.Fatalf("Run returned %v", err)
	}
	in.await(health.LivePath, http.StatusServiceUnavailable, health.CheckStalls, "it returned, failing for")
	in.await(health.LivePath, http.StatusOK, health.CheckStalls, "no task stalled")
}

// A scheduler whose loop is blocked (here by an observer) fails liveness
// once it is behind its next firing by more than the limit.
func TestDBSchedulerBehind(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	unblock := make(chan struct{})
	release := sync.OnceFunc(func() { close(unblock) })
	var once sync.Once
	blocker := lock.ObserverFunc(func(e lock.Event) {
		// The first firing skipped because the job still runs is reported
		// by the loop itself: hold it there.
		if e.Kind == lock.FiringSkipped && strings.HasPrefix(e.Reason, scheduler.ReasonBusy) {
			once.Do(func() { <-unblock })
		}
	})
	in := newInstance(t, db, "k1", []health.Option{health.WithSchedulerLagLimit(300 * time.Millisecond)}, lock.WithObserver(blocker))
	s, err := scheduler.New(db, in.session, scheduler.WithStopMode(scheduler.StopCancel))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddJob("slow", "* * * * * *", func(ctx context.Context) error { <-ctx.Done(); return nil }); err != nil {
		t.Fatal(err)
	}
	in.await(health.LivePath, http.StatusOK, health.CheckScheduler, "loop of the scheduler of keeper k1 is 0s behind")
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	defer release() // first: Stop waits for the loop
	in.await(health.LivePath, http.StatusServiceUnavailable, health.CheckScheduler,
		"loop of the scheduler of keeper k1 is", "behind its earliest due firing, more than the limit of 300ms")
	release()
	in.await(health.LivePath, http.StatusOK, health.CheckScheduler)
}

// A runner's task that ignores the cancellation of a lost lease is
// abandoned after the grace period, and fails liveness until it returns,
// although its term had ended before (lock.TaskAbandoned).
func TestDBAbandonedAfterLostLease(t *testing.T) {
	t.Parallel()
	name := mongotest.NewDatabase(t).Name()
	client, fault := mongotest.NewProxiedClient(t)
	var abandoned atomic.Int32
	counter := lock.ObserverFunc(func(e lock.Event) {
		if e.Kind == lock.TaskAbandoned && errors.Is(e.Err, runner.ErrTaskDidNotStop) && e.LockID == "leader" {
			abandoned.Add(1)
		}
	})
	in := newInstance(t, mongotest.Database(t, client, name), "k1", nil, lock.WithObserver(counter))
	r, err := runner.New(in.session, "leader", runner.WithGracePeriod(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	started, letGo, returned := make(chan struct{}), make(chan struct{}), make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- r.Run(context.Background(), func(context.Context) error {
			defer close(returned)
			close(started)
			<-letGo // ignores its context
			return nil
		})
	}()
	<-started
	fault.Cut()
	if err := <-errc; !errors.Is(err, runner.ErrTaskDidNotStop) {
		t.Fatalf("Run returned %v", err)
	}
	rep := in.await(health.LivePath, http.StatusServiceUnavailable, health.CheckAbandoned,
		`task under "leader" (keeper k1, fence `, "it has not returned")
	if n := abandoned.Load(); n != 1 {
		t.Fatalf("%d TaskAbandoned events; report %+v", n, rep)
	}
	fault.Restore()
	close(letGo)
	<-returned
	in.await(health.LivePath, http.StatusOK, health.CheckAbandoned, "no task abandoned")
}
