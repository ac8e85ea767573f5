package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/scheduler"
)

// result is what one invocation printed and returned.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return "exit " + strconv.Itoa(r.code) + "\nstdout:\n" + r.stdout + "\nstderr:\n" + r.stderr
}

// invocation describes how to run the command in-process.
type invocation struct {
	stdin    string
	env      map[string]string
	terminal bool // stdin and stderr are terminals
}

func (inv invocation) run(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	a := &app{
		cfg:        testConfig(),
		stdin:      strings.NewReader(inv.stdin),
		stdout:     &out,
		stderr:     &errb,
		getenv:     func(k string) string { return inv.env[k] },
		isTerminal: func(any) bool { return inv.terminal },
	}
	code := a.main(ctx, args)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// cli runs the command with no stdin, no environment and no terminal.
func cli(t *testing.T, args ...string) result {
	t.Helper()
	return invocation{}.run(t, args...)
}

// on returns the global flags for a fresh test database.
func on(t *testing.T) (*mongo.Database, []string) {
	t.Helper()
	db := mongotest.NewDatabase(t)
	return db, []string{"--uri", mongotest.URI(), "--db", db.Name(), "--ttl", "2s"}
}

func args(globals []string, rest ...string) []string {
	return append(append([]string{}, globals...), rest...)
}

// wantOK fails unless r exited 0 and stderr holds only JSON log lines.
func wantOK(t *testing.T, r result) {
	t.Helper()
	if r.code != ExitOK {
		t.Fatalf("want exit 0, got %v", r)
	}
	for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		if line != "" && !json.Valid([]byte(line)) {
			t.Errorf("stderr line is not a JSON log: %q", line)
		}
	}
}

// wantErr fails unless r exited with code and printed one line on stderr
// containing every want.
func wantErr(t *testing.T, r result, code int, want ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d, got %v", code, r)
	}
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "mongolock: ") {
		t.Errorf("last stderr line %q is not the error", last)
	}
	for _, l := range lines[:len(lines)-1] {
		if !json.Valid([]byte(l)) {
			t.Errorf("stderr has more than one error line: %q", r.stderr)
		}
	}
	for _, w := range want {
		if !strings.Contains(last, w) {
			t.Errorf("error %q does not contain %q", last, w)
		}
	}
	for _, bad := range []string{"goroutine ", "panic", ".go:"} {
		if strings.Contains(r.stderr, bad) {
			t.Errorf("stderr has %q: %s", bad, r.stderr)
		}
	}
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	db, g := on(t)

	r := cli(t, args(g, "migrate", "plan")...)
	wantOK(t, r)
	for _, w := range []string{"-1000", `create index "ts_ttl"`, `create index "kid"`, "-990", `create index "job_scheduled"`, "-980", `create index "lock_start"`} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("plan output lacks %q:\n%s", w, r.stdout)
		}
	}

	r = cli(t, args(g, "migrate", "up")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "applied -1000") || !strings.Contains(r.stdout, "applied -990") {
		t.Errorf("up output:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, `"message":"migration applied"`) {
		t.Errorf("no JSON log of the migrations:\n%s", r.stderr)
	}
	names := indexNames(t, db.Collection(lock.DefaultCollection))
	if !strings.Contains(names, lock.TTLIndexName) || !strings.Contains(names, lock.KeeperIndexName) {
		t.Errorf("lock collection indexes %s", names)
	}

	// Globals after the command work too.
	r = cli(t, "migrate", "up", "--uri", mongotest.URI(), "--db", db.Name(), "--ttl", "2s")
	wantOK(t, r)
	if strings.TrimSpace(r.stdout) != "nothing to apply" {
		t.Errorf("second up:\n%s", r.stdout)
	}

	r = cli(t, args(g, "migrate", "status")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "VERSION") || strings.Count(r.stdout, "applied") != 3 {
		t.Errorf("status:\n%s", r.stdout)
	}
	r = cli(t, args(g, "migrate", "status", "--json")...)
	wantOK(t, r)
	var st []statusJSON
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	if len(st) != 3 || st[0].State != "applied" || st[0].Keeper == "" || st[0].AppliedAt == "" {
		t.Errorf("status --json: %+v", st)
	}

	r = cli(t, args(g, "migrate", "plan")...)
	wantOK(t, r)
	if strings.TrimSpace(r.stdout) != "nothing to do" {
		t.Errorf("plan after up:\n%s", r.stdout)
	}

	// The lock collection's indexes do not depend on the TTL: another one
	// changes nothing.
	r = cli(t, args(g, "--ttl", "5s", "migrate", "up")...)
	wantOK(t, r)
	if strings.TrimSpace(r.stdout) != "nothing to apply" {
		t.Errorf("up after a TTL change:\n%s", r.stdout)
	}
}

// A CLI `migrate up` with defaults against a collection an application set
// up with another TTL leaves it working: the TTL index stays as it was, no
// migration shows as changed, and the application keeps its lock.
func TestMigrateUpLeavesAnotherTTLWorking(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := mongotest.NewDatabase(t)
	const appTTL = 6 * time.Second

	// The application: its migrations, then a lock it holds.
	app, err := lock.New(db, lock.WithTTL(appTTL))
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrations.New(db, migrations.WithLockTTL(appTTL))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	session, err := lock.NewSession(app, lock.WithKeeperID("app-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	mu, err := session.Mutex("orders")
	if err != nil {
		t.Fatal(err)
	}
	lease, ok, err := mu.AcquireLock(ctx)
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	locks := db.Collection(lock.DefaultCollection)
	before := ttlIndexSeconds(t, locks)

	// The operator's deploy step, every flag at its default (--ttl 30s).
	g := []string{"--uri", mongotest.URI(), "--db", db.Name()}
	r := cli(t, args(g, "migrate", "up")...)
	wantOK(t, r)
	if strings.TrimSpace(r.stdout) != "nothing to apply" {
		t.Errorf("up after the application's migrations:\n%s", r.stdout)
	}

	after := ttlIndexSeconds(t, locks)
	if fmt.Sprint(deref(before)) != fmt.Sprint(deref(after)) {
		t.Errorf("TTL index expireAfterSeconds %v before the CLI, %v after", deref(before), deref(after))
	}
	if want := int64(lock.TTLSeconds(lock.Retention)); mongotest.Backend() != mongotest.BackendFerretDB && (after == nil || *after != want) {
		t.Errorf("TTL index expireAfterSeconds %v, want %d (lock.Retention)", deref(after), want)
	}

	r = cli(t, args(g, "migrate", "status", "--json")...)
	wantOK(t, r)
	var st []statusJSON
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	if len(st) == 0 {
		t.Fatal("status lists no migrations")
	}
	for _, e := range st {
		if e.State != string(migrations.StateApplied) {
			t.Errorf("migration %d (%s) is %s, want applied", e.Version, e.Description, e.State)
		}
	}

	// The application still holds its lock: it renews, its keep-alive goes
	// on renewing, and a contender with the default TTL is refused.
	if err := lease.Renew(ctx); err != nil {
		t.Fatalf("renew after the CLI ran: %v", err)
	}
	contender, err := lock.New(db)
	if err != nil {
		t.Fatal(err)
	}
	h, err := contender.Holder(ctx, "orders")
	if err != nil || h.KeeperID != "app-1" || h.ExpiresAt.Sub(h.RenewedAt) != appTTL {
		t.Fatalf("holder %+v, %v; want app-1 with its %v lease", h, err, appTTL)
	}
	renewed := h.RenewedAt
	for deadline := time.Now().Add(2 * appTTL); ; {
		h, err = contender.Holder(ctx, "orders")
		if err != nil || h.KeeperID != "app-1" {
			t.Fatalf("holder %+v, %v; want app-1", h, err)
		}
		if h.RenewedAt.After(renewed) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session did not renew its lease within %v", 2*appTTL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	got, err := contender.AcquireLocks(ctx, "contender", "orders")
	if err != nil || len(got.Granted) != 0 {
		t.Fatalf("a contender with the default TTL got %+v, %v; want it refused", got, err)
	}
	if lease.Err() != nil {
		t.Errorf("the application lost its lease: %v", lease.Err())
	}
}

// ttlIndexSeconds is the expireAfterSeconds of the lock collection's TTL
// index: nil for a plain index (FerretDB 1.x has no TTL indexes).
func ttlIndexSeconds(t *testing.T, coll *mongo.Collection) *int64 {
	t.Helper()
	specs, err := coll.Indexes().ListSpecifications(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if s.Name == lock.TTLIndexName {
			if s.ExpireAfterSeconds == nil {
				return nil
			}
			n := int64(*s.ExpireAfterSeconds)
			return &n
		}
	}
	t.Fatalf("no index %s on %s", lock.TTLIndexName, coll.Name())
	return nil
}

func deref(p *int64) any {
	if p == nil {
		return "none"
	}
	return *p
}

func TestMigrateUpWaitsThenFails(t *testing.T) {
	t.Parallel()
	db, g := on(t)
	other, err := lock.New(db, lock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := acquireAs(context.Background(), other, migrations.DefaultLockID, "other-deploy"); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	r := cli(t, args(g, "--ttl", "1m", "migrate", "up", "--wait", "300ms")...)
	wantErr(t, r, ExitFailure, "timed out waiting for another migrator")
	if !strings.Contains(r.stderr, "lock held by another migrator") {
		t.Errorf("no log that it waited:\n%s", r.stderr)
	}
}

func indexNames(t *testing.T, coll *mongo.Collection) string {
	t.Helper()
	names, err := coll.Indexes().ListSpecifications(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		out = append(out, n.Name)
	}
	return strings.Join(out, ",")
}

func TestLocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, g := on(t)
	l, err := lock.New(db, lock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	leaseA, _, errA := acquireAs(ctx, l, "orders/sweeper", "keeper-1")
	leaseB, _, errB := acquireAs(ctx, l, "reports", "keeper-2")
	if err := errors.Join(errA, errB); err != nil {
		t.Fatal(err)
	}
	g = args(g, "--ttl", "1m")

	r := cli(t, args(g, "locks", "list")...)
	wantOK(t, r)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "LOCK") || !strings.Contains(lines[0], "EXPIRES IN") || !strings.Contains(lines[0], "FENCE") {
		t.Fatalf("list:\n%s", r.stdout)
	}
	if f := strings.Fields(lines[1]); f[0] != "orders/sweeper" || f[1] != "keeper-1" || f[len(f)-1] != strconv.FormatUint(leaseA.Fence, 10) {
		t.Errorf("row %q", lines[1])
	}

	r = cli(t, args(g, "locks", "list", "--json")...)
	wantOK(t, r)
	var list []lockJSON
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("list --json: %v\n%s", err, r.stdout)
	}
	if len(list) != 2 || list[1].Lock != "reports" || list[1].Keeper != "keeper-2" || list[1].Fence != strconv.FormatUint(leaseB.Fence, 10) ||
		list[1].Expired || list[1].ExpiresInMS <= 0 || list[1].ExpiresInMS > time.Minute.Milliseconds() {
		t.Errorf("list --json: %+v", list)
	}

	// locks alone lists, as jobs alone does.
	for _, flags := range [][]string{nil, {"--json"}} {
		want := cli(t, args(g, append([]string{"locks", "list"}, flags...)...)...)
		alone := append([]string{"locks"}, flags...)
		r := cli(t, args(g, alone...)...)
		wantOK(t, r)
		// The time left differs from one call to the next.
		timeLeft := regexp.MustCompile(`(?m)"expiresInMs": \d+|\S+\s+\d+$`)
		if got, want := timeLeft.ReplaceAllString(r.stdout, ""), timeLeft.ReplaceAllString(want.stdout, ""); got != want {
			t.Errorf("%q:\n%s\nwant, as locks list:\n%s", alone, got, want)
		}
	}

	r = cli(t, args(g, "locks", "show", "reports")...)
	wantOK(t, r)
	for _, w := range []string{"keeper-2", "held, expires in", strconv.FormatUint(leaseB.Fence, 10)} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("show lacks %q:\n%s", w, r.stdout)
		}
	}
	wantErr(t, cli(t, args(g, "locks", "show", "nope")...), ExitFailure, `lock "nope": there is no such lock`)
	wantErr(t, cli(t, args(g, "locks", "show")...), ExitUsage, "needs one lock id")

	// Release as a keeper: only the holder can.
	wantErr(t, cli(t, args(g, "locks", "release", "orders/sweeper", "--keeper", "keeper-2")...), ExitFailure, `not held by "keeper-2"`)
	wantOK(t, cli(t, args(g, "locks", "release", "orders/sweeper", "--keeper", "keeper-1")...))
	if _, err := l.Holder(ctx, "orders/sweeper"); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("after release: %v", err)
	}

	// Forced: refused without confirmation when stdin is no terminal.
	wantErr(t, cli(t, args(g, "locks", "release", "reports", "--force")...), ExitUsage, "stdin is not a terminal", "--yes")
	// Asked on a terminal; anything but yes keeps the lock.
	r = invocation{stdin: "no\n", terminal: true}.run(t, args(g, "locks", "release", "reports", "--force")...)
	if r.code != ExitFailure || !strings.Contains(r.stderr, "mongolock: not confirmed; nothing released") {
		t.Errorf("refused confirmation: %v", r)
	}
	if !strings.Contains(r.stderr, `held by "keeper-2"`) {
		t.Errorf("the question does not say who holds it:\n%s", r.stderr)
	}
	if _, err := l.Holder(ctx, "reports"); err != nil {
		t.Fatalf("lock gone after a refusal: %v", err)
	}
	r = invocation{stdin: "yes\n", terminal: true}.run(t, args(g, "locks", "release", "reports", "--force")...)
	if r.code != ExitOK || !strings.Contains(r.stdout, "force-released") {
		t.Fatalf("confirmed forced release: %v", r)
	}
	if _, err := l.Holder(ctx, "reports"); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("after forced release: %v", err)
	}

	// --yes, and fencing tokens keep increasing across a forced release.
	lease2, ok, err := acquireAs(ctx, l, "reports", "keeper-3")
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	wantOK(t, cli(t, args(g, "locks", "release", "reports", "--force", "--yes")...))
	lease3, ok, err := acquireAs(ctx, l, "reports", "keeper-4")
	if err != nil || !ok {
		t.Fatalf("acquire after the forced release: %v %v", ok, err)
	}
	if !(leaseB.Fence < lease2.Fence && lease2.Fence < lease3.Fence) {
		t.Errorf("fences %d, %d, %d do not increase across forced releases", leaseB.Fence, lease2.Fence, lease3.Fence)
	}

	wantOK(t, cli(t, args(g, "locks", "release", "reports", "--keeper", "keeper-4")...))
	wantErr(t, cli(t, args(g, "locks", "release", "reports", "--force", "--yes")...), ExitFailure, "no such lock")
	r = cli(t, args(g, "locks", "list")...)
	wantOK(t, r)
	if !strings.HasPrefix(r.stdout, "no locks in") {
		t.Errorf("empty list:\n%s", r.stdout)
	}
}

func TestLocksShowExpired(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, g := on(t)
	l, err := lock.New(db, lock.WithTTL(lock.MinTTL))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := acquireAs(ctx, l, "brief", "k"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := l.Holder(ctx, "brief"); errors.Is(err, lock.ErrNotHeld) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("lease did not expire")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := cli(t, args(g, "--ttl", "100ms", "locks", "show", "brief")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "expired") {
		t.Errorf("show of an expired lease:\n%s", r.stdout)
	}
}

func TestJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, g := on(t)
	r := cli(t, args(g, "jobs")...)
	wantOK(t, r)
	if !strings.HasPrefix(r.stdout, "no jobs in") {
		t.Errorf("jobs on an empty database:\n%s", r.stdout)
	}

	l, err := lock.New(db, lock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	session, err := lock.NewSession(l, lock.WithKeeperID("cron-instance"))
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	s, err := scheduler.New(db, session)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	ran := make(chan struct{}, 10)
	err = s.AddJob("nightly", "@every 1s", func(context.Context) error {
		defer func() { ran <- struct{}{} }()
		if n.Add(1) == 1 {
			return errors.New("disk full")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case <-ran:
		case <-time.After(20 * time.Second):
			t.Fatal("job did not run")
		}
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}

	r = cli(t, args(g, "jobs", "--history", "5")...)
	wantOK(t, r)
	for _, w := range []string{"JOB", "nightly", "@every 1s", "cron-instance", "succeeded", "failed", "disk full"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("jobs output lacks %q:\n%s", w, r.stdout)
		}
	}
	r = cli(t, args(g, "jobs", "--json", "--history", "5")...)
	wantOK(t, r)
	var jobs []jobJSON
	if err := json.Unmarshal([]byte(r.stdout), &jobs); err != nil {
		t.Fatalf("jobs --json: %v\n%s", err, r.stdout)
	}
	if len(jobs) != 1 || jobs[0].Job != "nightly" || jobs[0].LastRun == nil || len(jobs[0].History) < 2 {
		t.Errorf("jobs --json: %+v", jobs)
	}

	// A program that registers its jobs (WithJobs) lists them before they
	// ran, and says when the spec it registers is not the one the cluster
	// follows.
	registered := func(args ...string) result {
		var out, errb bytes.Buffer
		a := &app{cfg: config{jobs: []Job{{Name: "weekly", Spec: "@weekly"}, {Name: "nightly", Spec: "@every 2s"}}},
			stdin: strings.NewReader(""), stdout: &out, stderr: &errb,
			getenv: func(string) string { return "" }, isTerminal: func(any) bool { return false }}
		code := a.main(ctx, args)
		return result{code: code, stdout: out.String(), stderr: errb.String()}
	}
	r = registered(args(g, "jobs")...)
	wantOK(t, r)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "nightly") || !strings.Contains(lines[1], "@every 2s (superseded: the cluster follows @every 1s)") ||
		!regexp.MustCompile(`^weekly\s+@weekly\s+\d{4}-\d\d-\d\dT00:00:00.000Z\s+active\s+-\s+-\s+-\s+-\s+-\s+-$`).MatchString(lines[2]) {
		t.Errorf("jobs with registered ones:\n%s", r.stdout)
	}
	r = registered(args(g, "jobs", "weekly", "--json")...)
	wantOK(t, r)
	jobs = nil
	if err := json.Unmarshal([]byte(r.stdout), &jobs); err != nil {
		t.Fatalf("jobs --json: %v\n%s", err, r.stdout)
	}
	if len(jobs) != 1 || jobs[0].Job != "weekly" || !jobs[0].Registered || jobs[0].Spec != "@weekly" || jobs[0].LastClaimed != "" {
		t.Errorf("jobs weekly --json: %+v", jobs)
	}
	r = registered(args(g, "jobs", "nightly", "--json")...)
	wantOK(t, r)
	jobs = nil
	if err := json.Unmarshal([]byte(r.stdout), &jobs); err != nil {
		t.Fatalf("jobs --json: %v\n%s", err, r.stdout)
	}
	if len(jobs) != 1 || jobs[0].Spec != "@every 2s" || jobs[0].ClusterSpec != "@every 1s" || !jobs[0].Registered {
		t.Errorf("jobs nightly --json: %+v", jobs)
	}
}

// TestBadRegisteredMigration: a migration the program registers that
// migrations.New refuses is the program's failure, not bad usage.
func TestBadRegisteredMigration(t *testing.T) {
	t.Parallel()
	_, g := on(t)
	var out, errb bytes.Buffer
	code := Run(context.Background(), args(g, "migrate", "status"), WithName("myapp"), WithStdio(nil, &out, &errb),
		WithMigrations(migrations.Migration{Version: 1, Description: "no up", Definition: "x"}))
	if code != ExitFailure || !strings.Contains(errb.String(), "myapp: migrations: invalid migration: version 1 has no Up") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

// closedPort returns a localhost port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

func TestErrors(t *testing.T) {
	t.Parallel()
	dead := "mongodb://alice:hunter2@127.0.0.1:" + strconv.Itoa(closedPort(t)) + "/"
	tests := []struct {
		name string
		inv  invocation
		args []string
		code int
		want []string
	}{
		{"no command", invocation{}, nil, ExitUsage, []string{"no command"}},
		{"unknown command", invocation{}, []string{"frobnicate"}, ExitUsage, []string{`unknown command "frobnicate"`}},
		{"unknown subcommand", invocation{}, []string{"locks", "frob"}, ExitUsage, []string{`unknown command "locks" "frob"`}},
		{"missing subcommand", invocation{}, []string{"migrate"}, ExitUsage, []string{"migrate needs a subcommand: up, status, plan"}},
		{"unknown global flag", invocation{}, []string{"--bogus", "locks", "list"}, ExitUsage, []string{"flag provided but not defined: -bogus"}},
		{"unknown command flag", invocation{}, []string{"locks", "list", "--bogus"}, ExitUsage, []string{"-bogus"}},
		{"bad duration", invocation{}, []string{"--ttl", "soon", "locks", "list"}, ExitUsage, []string{"invalid value"}},
		{"no server", invocation{}, []string{"locks", "list"}, ExitUsage, []string{"no server: set --uri or MONGODB_URI"}},
		{"bad uri", invocation{}, []string{"--uri", "mongodb://alice:hunter2@host:notaport/", "locks", "list"}, ExitUsage, []string{"invalid URI mongodb://***@host:notaport/"}},
		{"bad uri escape", invocation{}, []string{"--uri", "mongodb://alice:hun%zzter2@host/", "locks", "list"}, ExitUsage, []string{"invalid URI mongodb://***@host/", `escape "***"`}},
		{"raw @ in the password", invocation{}, []string{"--uri", "mongodb://alice:hunter2@ss@host/", "locks", "list"}, ExitUsage, []string{"invalid URI mongodb://***@host/"}},
		{"secret option", invocation{}, []string{"--uri", "mongodb://host/?tlsCertificateKeyFilePassword=hunter2%zz", "locks", "list"}, ExitUsage, []string{"invalid URI mongodb://host/?tlsCertificateKeyFilePassword=***"}},
		{"not a uri", invocation{}, []string{"--uri", "notauri", "locks", "list"}, ExitUsage, []string{"invalid URI notauri:"}},
		{"other scheme", invocation{}, []string{"--uri", "http://localhost:27017", "locks", "list"}, ExitUsage, []string{"invalid URI http://localhost:27017:"}},
		{"no scheme, credentials", invocation{}, []string{"--uri", "alice:hunter2@localhost:27017", "locks", "list"}, ExitUsage, []string{"invalid URI ***@localhost:27017:"}},
		{"bad uri from env", invocation{env: map[string]string{envURI: "postgres://alice:hunter2@h/"}}, []string{"locks", "list"}, ExitUsage, []string{"invalid URI postgres://***@h/:"}},
		{"unreachable", invocation{}, []string{"--uri", dead, "--timeout", "300ms", "locks", "list"}, ExitFailure, []string{"cannot reach mongodb://***@127.0.0.1:", "within 300ms"}},
		{"unreachable migrate", invocation{env: map[string]string{envURI: dead}}, []string{"migrate", "up", "--timeout", "300ms"}, ExitFailure, []string{"cannot reach"}},
		{"bad log level", invocation{}, []string{"--uri", dead, "--log-level", "loud", "locks", "list"}, ExitUsage, []string{"invalid --log-level"}},
		{"bad timeout", invocation{}, []string{"--uri", dead, "--timeout", "0s", "locks", "list"}, ExitUsage, []string{"--timeout must be positive"}},
		{"release without mode", invocation{}, []string{"--uri", dead, "locks", "release", "x"}, ExitUsage, []string{"needs --keeper K", "or --force"}},
		{"release with both", invocation{}, []string{"--uri", dead, "locks", "release", "x", "--keeper", "k", "--force"}, ExitUsage, []string{"not both"}},
		{"release without id", invocation{}, []string{"--uri", dead, "locks", "release", "--keeper", "k"}, ExitUsage, []string{"needs one lock id"}},
		{"yes without force", invocation{}, []string{"--uri", dead, "locks", "release", "x", "--keeper", "k", "--yes"}, ExitUsage, []string{"--yes goes with --force"}},
		{"forced without tty", invocation{stdin: "yes\n"}, []string{"--uri", dead, "locks", "release", "x", "--force"}, ExitUsage, []string{"stdin is not a terminal"}},
		{"status argument", invocation{}, []string{"--uri", dead, "migrate", "status", "extra"}, ExitUsage, []string{"takes no arguments"}},
		{"jobs negative history", invocation{}, []string{"--uri", dead, "jobs", "--history", "-1"}, ExitUsage, []string{"--history"}},
		{"jobs bad zone", invocation{}, []string{"--uri", dead, "jobs", "--tz", "Nowhere/Land"}, ExitUsage, []string{`--tz "Nowhere/Land"`}},
		{"pause without a job", invocation{}, []string{"--uri", dead, "jobs", "pause"}, ExitUsage, []string{"jobs pause needs one job name"}},
		{"pause of two jobs", invocation{}, []string{"--uri", dead, "jobs", "pause", "a", "b"}, ExitUsage, []string{"needs one job name"}},
		{"pause until garbage", invocation{}, []string{"--uri", dead, "jobs", "pause", "a", "--until", "soon"}, ExitUsage, []string{`--until "soon"`, "RFC 3339"}},
		{"pause until a negative duration", invocation{}, []string{"--uri", dead, "jobs", "pause", "a", "--until", "-2h"}, ExitUsage, []string{"must be positive"}},
		{"trigger without a job", invocation{}, []string{"--uri", dead, "jobs", "trigger"}, ExitUsage, []string{"jobs trigger needs one job name"}},
		{"resume with a bad flag", invocation{}, []string{"--uri", dead, "jobs", "resume", "a", "--note", "x"}, ExitUsage, []string{"-note"}},
		// Flag values the library refuses: named as flags, before connecting.
		{"negative ttl", invocation{}, []string{"--uri", dead, "--ttl", "-5s", "migrate", "up"}, ExitUsage, []string{"--ttl -5s: want a lease TTL from 300ms to 24h0m0s"}},
		{"ttl too short for a session", invocation{}, []string{"--uri", dead, "--ttl", "200ms", "migrate", "up"}, ExitUsage, []string{"--ttl 200ms: want"}},
		{"ttl too long", invocation{}, []string{"--uri", dead, "--ttl", "25h", "locks", "list"}, ExitUsage, []string{"--ttl 25h0m0s: want a lease TTL from 100ms to 24h0m0s"}},
		{"bad lock collection", invocation{}, []string{"--uri", dead, "--collection", "a$b", "locks", "list"}, ExitUsage, []string{`--collection "a$b": not a valid collection name`}},
		{"empty lock collection", invocation{}, []string{"--uri", dead, "--collection", "", "jobs"}, ExitUsage, []string{`--collection "": not a valid collection name`}},
		{"bad migrations collection", invocation{}, []string{"--uri", dead, "migrate", "status", "--migrations-collection", "system.x"}, ExitUsage, []string{`--migrations-collection "system.x": not a valid collection name`}},
		{"bad runs collection", invocation{}, []string{"--uri", dead, "migrate", "plan", "--runs-collection", ""}, ExitUsage, []string{`--runs-collection "": not a valid collection name`}},
		{"bad retention", invocation{}, []string{"--uri", dead, "migrate", "up", "--history-retention", "500ms"}, ExitUsage, []string{"--history-retention 500ms: want 0 (no history) or at least 1s"}},
		{"negative wait", invocation{}, []string{"--uri", dead, "migrate", "up", "--wait", "-1s"}, ExitUsage, []string{"--wait -1s: must not be negative"}},
		{"bad jobs collection", invocation{}, []string{"--uri", dead, "jobs", "--jobs-collection", "a$"}, ExitUsage, []string{`--jobs-collection "a$": not a valid collection name`}},
		{"bad jobs collection of a verb", invocation{}, []string{"--uri", dead, "jobs", "trigger", "a", "--jobs-collection", ""}, ExitUsage, []string{`--jobs-collection "": not a valid collection name`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := tt.inv.run(t, tt.args...)
			wantErr(t, r, tt.code, tt.want...)
			if strings.Contains(r.stderr, "hunter2") || strings.Contains(r.stdout, "hunter2") {
				t.Errorf("password printed: %s", r.stderr)
			}
			if opt := regexp.MustCompile(`\bWith[A-Z]\w*`).FindString(r.stderr); opt != "" {
				t.Errorf("the error names the library's %s, not a flag: %s", opt, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout not empty on error: %q", r.stdout)
			}
		})
	}
}

func TestRunWiring(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	run := func(args ...string) int {
		return Run(context.Background(), args, WithStdio(strings.NewReader(""), &out, &errb))
	}
	if code := run("frobnicate"); code != ExitUsage {
		t.Errorf("exit %d", code)
	}
	if got := strings.TrimSpace(errb.String()); !strings.HasPrefix(got, "mongolock: unknown command") || strings.Contains(got, "\n") {
		t.Errorf("stderr %q", got)
	}
	out.Reset()
	if code := run("-h"); code != ExitOK || !strings.Contains(out.String(), "locks release ID") {
		t.Errorf("help: exit %d\n%s", code, out.String())
	}
	if strings.Contains(out.String(), "  dev ") {
		t.Errorf("help lists dev without WithDevServer:\n%s", out.String())
	}
	out.Reset()
	if code := run("locks", "release", "-h"); code != ExitOK || !strings.Contains(out.String(), "-force") {
		t.Errorf("release help: exit %d\n%s", code, out.String())
	}
}

func TestURIFromEnvironment(t *testing.T) {
	t.Parallel()
	db, _ := on(t)
	r := invocation{env: map[string]string{envURI: mongotest.URI()}}.run(t, "--db", db.Name(), "locks", "list")
	wantOK(t, r)
	if !strings.HasPrefix(r.stdout, "no locks in "+db.Name()+".locks") {
		t.Errorf("list:\n%s", r.stdout)
	}
}

func TestRedactor(t *testing.T) {
	t.Parallel()
	tests := []struct{ uri, safe string }{
		{"mongodb://u:p%40ss@h1:27017,h2/db?replicaSet=rs", "mongodb://***@h1:27017,h2/db?replicaSet=rs"},
		{"mongodb+srv://u:pw@cluster.example.com/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:tok123",
			"mongodb+srv://***@cluster.example.com/?authMechanism=MONGODB-AWS&authMechanismProperties=***"},
		{"mongodb://h/?tlsCertificateKeyFilePassword=kfp", "mongodb://h/?tlsCertificateKeyFilePassword=***"},
		{"mongodb://carl:p@ss@h2/", "mongodb://***@h2/"},
		{"mongodb://u:p ss@h/", "mongodb://***@h/"},
		{"mongodb://localhost:27017", "mongodb://localhost:27017"},
		// Not URIs: shown, but for what looks like credentials.
		{"notauri", "notauri"},
		{"u:pw@host:27017/db", "***@host:27017/db"},
		{"mongodb:/u:pw@host", "***@host"},
		{"http://u:pw@localhost:27017", "http://***@localhost:27017"},
	}
	for _, tt := range tests {
		r := newRedactor(tt.uri)
		if r.uri() != tt.safe {
			t.Errorf("uri(%q) = %q, want %q", tt.uri, r.uri(), tt.safe)
		}
		if msg := r.oneLine("failed: " + tt.uri + "\nsecond line"); strings.Contains(msg, "\n") {
			t.Errorf("oneLine kept a newline: %q", msg)
		}
	}
	// The driver's errors quote parts of the URI: those its redacted form
	// shows, and its own words, show.
	for _, tt := range []struct{ uri, err, want string }{
		{"mongodb://alice:hun%zzter2@host/", `error parsing uri: invalid password: invalid URL escape "%zz"`,
			`error parsing uri: invalid password: invalid URL escape "***"`},
		{"mongodb://h/?tlsCertificateKeyFilePassword=k%zzp", `invalid option value "k%zzp": invalid URL escape "%zz"`,
			`invalid option value "***": invalid URL escape "***"`},
		{"mongodb://u:pw@h:notaport/", `invalid host "h:notaport": port must be an integer`, `invalid host "h:notaport": port must be an integer`},
		{"postgres://mongodb:pw@h/", `scheme must be "mongodb" or "mongodb+srv"`, `scheme must be "mongodb" or "mongodb+srv"`},
		{"mongodb:/u:pw@host", `scheme must be "mongodb" or "mongodb+srv"`, `scheme must be "mongodb" or "mongodb+srv"`},
	} {
		if got := newRedactor(tt.uri).uriError(errors.New(tt.err)); got != tt.want {
			t.Errorf("uriError(%q) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// acquireAs takes lockID as keeperID through the store, as another process
// holding it would.
func acquireAs(ctx context.Context, l *lock.Locker, lockID, keeperID string) (lock.Grant, bool, error) {
	a, err := l.AcquireLocks(ctx, keeperID, lockID)
	if err != nil || len(a.Granted) == 0 {
		return lock.Grant{}, false, err
	}
	return a.Granted[0], true, nil
}
