package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/cluster"
	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
)

// runDemo runs `mongolock demo` in-process; its instances are this test
// binary acting as the command (envRunMain).
func runDemo(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	a := &app{
		cfg:        testConfig(),
		stdin:      strings.NewReader(""),
		stdout:     &out,
		stderr:     &errb,
		getenv:     func(k string) string { return env[k] },
		isTerminal: func(any) bool { return false },
		childEnv:   []string{envRunMain + "=1"},
	}
	code := a.main(ctx, append([]string{"demo"}, args...))
	r := result{code: code, stdout: out.String(), stderr: errb.String()}
	t.Logf("demo output:\n%s", r.stdout)
	return r
}

// summaryInt returns the number after label in the demo's summary.
func summaryInt(t *testing.T, out, label string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(label) + `:\s+(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %q in the summary", label)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// wantDemoOK checks what every successful demo must print.
func wantDemoOK(t *testing.T, r result, instances int) {
	t.Helper()
	if r.code != ExitOK {
		t.Fatalf("demo failed: %v", r)
	}
	// The steps that may be slow are announced before they start.
	connecting := strings.Index(r.stdout, " demo: connecting to the server")
	header := strings.Index(r.stdout, fmt.Sprintf(" demo: %d instances for", instances))
	starting := strings.Index(r.stdout, fmt.Sprintf(" demo: starting %d instances", instances))
	if connecting < 0 || header < connecting || starting < header {
		t.Errorf("the demo does not say what it does before each slow step (connecting at %d, header at %d, starting at %d)",
			connecting, header, starting)
	}
	if n := summaryInt(t, r.stdout, "firings run twice"); n != 0 {
		t.Errorf("%d firings ran twice", n)
	}
	if n := summaryInt(t, r.stdout, "firings misfired"); n != 0 {
		t.Errorf("%d firings misfired", n)
	}
	summaryInt(t, r.stdout, "firings spent") // counted apart, whatever it is
	if n := summaryInt(t, r.stdout, "firings run"); n < 3 {
		t.Errorf("only %d firings ran", n)
	}
	if n := summaryInt(t, r.stdout, "failovers"); n < 1 {
		t.Errorf("%d failovers", n)
	}
	if !regexp.MustCompile(`SIGKILL app\d \(leader\)\s+-> app\d led \d+ ms later \(\d+\.\d\d x TTL\)`).MatchString(r.stdout) {
		t.Error("no completed failover after the SIGKILL in the summary")
	}
	if !regexp.MustCompile(`migrations applied:\s+-1000 by app\d, -990 by app\d, -980 by app\d\n`).MatchString(r.stdout) {
		t.Error("the migrations were not applied exactly once each")
	}
	if !strings.Contains(r.stdout, "0 firing(s) recorded twice") || !strings.HasSuffix(r.stdout, "OK: no firing ran twice. None misfired.\n") {
		t.Error("no database check or no OK line")
	}
	pids := regexp.MustCompile(`started \(pid (\d+),`).FindAllStringSubmatch(r.stdout, -1)
	if len(pids) != instances {
		t.Fatalf("%d instances started, want %d", len(pids), instances)
	}
	for _, p := range pids {
		pid, _ := strconv.Atoi(p[1])
		if alive(pid) {
			t.Errorf("instance pid %d still running after the demo", pid)
		}
	}
}

// TestDemo runs the demo as a user would, against the test server: three
// instances, the leader killed with SIGKILL, the next one stopped. No firing
// may run twice, someone must take over, and nothing may be left running.
func TestDemo(t *testing.T) {
	t.Parallel()
	client := mongotest.NewClient(t)
	r := runDemo(t, nil, "--uri", mongotest.URI(), "--duration", "12s", "--ttl", "2s")
	wantDemoOK(t, r, 3)
	if !strings.Contains(r.stdout, "stop app") {
		t.Error("no graceful handover in the summary")
	}
	// Instances that stopped cleanly scraped their own /metrics and the
	// runs it counted matched their run events (a mismatch fails the demo).
	if !regexp.MustCompile(`metrics:\s+the /metrics of app\d`).MatchString(r.stdout) {
		t.Errorf("no metrics cross-check in the summary:\n%s", r.stdout)
	}
	m := regexp.MustCompile(`database:\s+(mongolock_demo_\S+)`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatal("no database name in the header")
	}
	names, err := client.ListDatabaseNames(context.Background(), bson.D{{Key: "name", Value: m[1]}})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 0 {
		t.Errorf("database %s not dropped", m[1])
	}
}

// TestDemoRefusesABusyDatabase: the demo drops its database at the end, so
// it runs only in an empty one.
func TestDemoRefusesABusyDatabase(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	if _, err := db.Collection("orders").InsertOne(context.Background(), bson.D{}); err != nil {
		t.Fatal(err)
	}
	r := runDemo(t, nil, "--uri", mongotest.URI(), "--db", db.Name())
	wantErr(t, r, ExitUsage, "database "+db.Name()+" is not empty (orders)")
	if n, err := db.Collection("orders").CountDocuments(context.Background(), bson.D{}); err != nil || n != 1 {
		t.Errorf("orders: %d documents, %v", n, err)
	}
}

// TestDemoInstancesFail: instances that cannot run fail the demo, which ends
// at once instead of waiting for the end of its plan.
func TestDemoInstancesFail(t *testing.T) {
	t.Parallel()
	fail, err := exec.LookPath("false")
	if err != nil {
		t.Skip("no false command")
	}
	for _, tt := range []struct {
		name string
		exe  func() (string, error)
		want string
	}{
		{"crash", func() (string, error) { return fail, nil }, "app1 exited unexpectedly: exit status 1"},
		{"no executable", func() (string, error) { return "", errors.New("no executable") }, "start an instance: no executable"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var out, errb bytes.Buffer
			a := &app{cfg: testConfig(), stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(string) string { return "" },
				isTerminal: func(any) bool { return false }, exe: tt.exe}
			start := time.Now()
			code := a.main(ctx, []string{"demo", "--uri", mongotest.URI()})
			if code != ExitFailure || !strings.Contains(errb.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q\n%s", code, errb.String(), ExitFailure, tt.want, out.String())
			}
			if took := time.Since(start); took > 20*time.Second {
				t.Errorf("the demo took %v to give up", took)
			}
		})
	}
}

// TestDemoEmbedded is `go run ./cmd/mongolock demo` with nothing set up: the
// demo starts its own FerretDB. With two instances, the one left after the
// kill is not stopped.
func TestDemoEmbedded(t *testing.T) {
	t.Parallel()
	r := runDemo(t, nil, "--duration", "8s", "--ttl", "1s", "--instances", "2")
	wantDemoOK(t, r, 2)
	for _, w := range []string{"embedded FerretDB at 127.0.0.1:", "not stopping the leader: no other instance is up"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("output lacks %q", w)
		}
	}
}

// startMain runs the test binary as the mongolock command.
func startMain(t *testing.T, args ...string) (cmd *exec.Cmd, stdin io.WriteCloser, lines <-chan string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), envRunMain+"=1", envURI+"="+mongotest.URI())
	cmd.Stderr = os.Stderr
	if stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan string)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		for range ch { // let the reader finish
		}
		<-done
		_ = cmd.Wait()
	})
	return cmd, stdin, ch
}

// nextLine returns the next line matching re, failing after d.
func nextLine(t *testing.T, lines <-chan string, re *regexp.Regexp, d time.Duration) []string {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("output ended before a line matching %s", re)
			}
			if m := re.FindStringSubmatch(l); m != nil {
				return m
			}
		case <-timeout:
			t.Fatalf("no line matching %s within %v", re, d)
		}
	}
}

// TestDemoInstanceStopsWhenStdinCloses: an instance of the demo stops
// cleanly, releasing its leadership, when its stdin closes. It is how the
// demo stops one, and how instances notice a dead demo where there is no
// parent-death signal.
func TestDemoInstanceStopsWhenStdinCloses(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	cmd, stdin, lines := startMain(t, "demo-instance", "--events", "--watch-stdin", "--name", "solo", "--db", db.Name(), "--ttl", "1s")
	event := func(kind cluster.Kind) cluster.Event {
		t.Helper()
		l := nextLine(t, lines, regexp.MustCompile(`^\{.*"ev":"`+string(kind)+`".*\}$`), 20*time.Second)[0]
		var ev cluster.Event
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		return ev
	}
	if ev := event(cluster.EvStart); ev.Instance != "solo" || ev.PID != cmd.Process.Pid || !strings.HasPrefix(ev.Keeper, "solo/") {
		t.Errorf("start event %+v", ev)
	}
	if ev := event(cluster.EvMigrated); len(ev.Applied) != 3 {
		t.Errorf("migrated event %+v", ev)
	}
	lead := event(cluster.EvLead)
	if lead.Fence == 0 {
		t.Errorf("lead event %+v", lead)
	}
	if ev := event(cluster.EvRun); ev.Firing.IsZero() || ev.Job == "" {
		t.Errorf("run event %+v", ev)
	}
	stdin.Close()
	if ev := event(cluster.EvUnlead); ev.Fence != lead.Fence || ev.Lost {
		t.Errorf("unlead event %+v; want fence %d, not lost", ev, lead.Fence)
	}
	if ev := event(cluster.EvStopped); ev.Msg != errStdinClosed.Error() {
		t.Errorf("stopped because %q", ev.Msg)
	}
	for range lines {
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("instance exited with %v", err)
	}
	l, err := lock.New(db)
	if err != nil {
		t.Fatal(err)
	}
	if h, err := l.Holder(context.Background(), demoLeaderLock); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("leader lock after a clean stop: %+v, %v; want it released", h, err)
	}
}

// TestDemoInstanceReadable is demo-instance as docker-compose runs it:
// readable lines naming the instance and what it runs.
func TestDemoInstanceReadable(t *testing.T) {
	t.Parallel()
	_, g := on(t)
	r := cli(t, args(g, "demo-instance", "--name", "app7", "--for", "2500ms")...)
	t.Logf("output:\n%s", r.stdout)
	wantOK(t, r)
	for _, w := range []string{
		"app7     started (pid ", "app7     migrations: applied -1000, -990, -980", "app7     LEADS now (fence ",
		"app7     runs tick", "app7     stopped leading: shutting down", "app7     stopped cleanly",
	} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("output lacks %q:\n%s", w, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "{") {
		t.Errorf("JSON on stdout:\n%s", r.stdout)
	}
}

func TestDemoUsage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--instances", "1"}, "--instances must be between 2 and 9"},
		{[]string{"demo", "--instances", "10"}, "--instances must be between 2 and 9"},
		{[]string{"demo", "--duration", "0s"}, "--duration must be positive"},
		{[]string{"demo", "--kill-after", "-1s"}, "must not be negative"},
		{[]string{"demo", "--duration", "10s", "--kill-after", "5s"}, "leaves less than 2 x TTL (6s)"},
		{[]string{"demo", "--ttl", "1s", "--kill-after", "5s", "--stop-after", "6s"}, "at least 2 x TTL (2s) after --kill-after"},
		{[]string{"demo", "--keep"}, "--keep needs --uri"},
		{[]string{"demo", "now"}, `takes no arguments, got "now"`},
		{[]string{"demo", "--log-level", "loud"}, "invalid --log-level"},
		{[]string{"demo-instance", "--name", ""}, "--name is empty"},
		{[]string{"demo-instance", "--for", "-1s"}, "must not be negative"},
		{[]string{"demo-instance", "extra"}, `takes no arguments, got "extra"`},
		{[]string{"demo-instance"}, "no server: set --uri or MONGODB_URI"},
		// Flags the instances would refuse are refused before anything
		// starts, embedded server included.
		{[]string{"demo", "--ttl", "0"}, "--ttl 0s: the demo's instances need a lease TTL from 300ms to 24h0m0s"},
		{[]string{"demo", "--ttl", "200ms", "--duration", "5s"}, "--ttl 200ms: the demo's instances need a lease TTL from 300ms"},
		{[]string{"demo", "--ttl", "25h"}, "--ttl 25h0m0s: the demo's instances need"},
		{[]string{"demo-instance", "--ttl", "0"}, "--ttl 0s: the demo's instances need"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			r := cli(t, tt.args...)
			wantErr(t, r, ExitUsage, tt.want)
		})
	}
}

// TestDemoRefusesWhatInstancesWould: flags an instance would refuse end
// the demo before any starts, named as flags.
func TestDemoRefusesWhatInstancesWould(t *testing.T) {
	t.Parallel()
	start := time.Now()
	r := cli(t, "demo", "--uri", mongotest.URI(), "--collection", "bad$name")
	wantErr(t, r, ExitUsage, `--collection "bad$name": not a valid collection name`)
	for l := range strings.Lines(r.stdout) { // only what it was about to do
		if !strings.HasPrefix(l, "mongolock demo: connecting") {
			t.Errorf("the demo started:\n%s", r.stdout)
		}
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %v to refuse", took)
	}
}

// TestDemoWithoutServer: a program built without WithDevServer has no
// server of its own for the demo.
func TestDemoWithoutServer(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	a := &app{cfg: config{name: "myapp"}, stdin: strings.NewReader(""), stdout: &out, stderr: &errb,
		getenv: func(string) string { return "" }, isTerminal: func(any) bool { return false }}
	code := a.main(context.Background(), []string{"demo"})
	if code != ExitUsage || !strings.Contains(errb.String(), "myapp: no server: set --uri or MONGODB_URI") || out.Len() != 0 {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

func TestDemoDefaultsYieldToFlags(t *testing.T) {
	t.Parallel()
	// A TTL given before the command wins over the demo's 3s: with 30s the
	// default plan does not fit in 30s.
	r := cli(t, "--ttl", "30s", "demo")
	wantErr(t, r, ExitUsage, "--kill-after 10s leaves less than 2 x TTL (1m0s)")
}
