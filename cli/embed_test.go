package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/migrations"
)

// The tests below build testdata/myapp, a user's program with this package
// built in (two migrations of its own, a job, no embedded server), and run
// it as an operator would.

// buildMyapp builds testdata/myapp into dir.
func buildMyapp(t *testing.T, dir string) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	exe := filepath.Join(dir, "myapp")
	if runtime.GOOS == "windows" {
		exe += ".exe"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, gobin, "build", "-o", exe, "./testdata/myapp")
	if out, err := cmd.CombinedOutput(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			t.Skipf("no go command to build testdata/myapp: %v", err)
		}
		t.Fatalf("go build ./testdata/myapp: %v\n%s", err, out)
	}
	return exe
}

// myapp runs the built program with args, MONGODB_URI unset.
func myapp(ctx context.Context, t *testing.T, exe string, args ...string) result {
	t.Helper()
	cmd := exec.CommandContext(ctx, exe, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envURI+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run myapp: %v", err)
	}
	return r
}

// myappErr is wantErr for myapp: its errors are prefixed with its name.
func myappErr(t *testing.T, r result, code int, want ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d, got %v", code, r)
	}
	last := strings.TrimRight(r.stderr, "\n")
	last = last[strings.LastIndex(last, "\n")+1:]
	if !strings.HasPrefix(last, "myapp: ") {
		t.Errorf("error line %q is not prefixed with myapp", last)
	}
	for _, w := range want {
		if !strings.Contains(last, w) {
			t.Errorf("error %q lacks %q", last, w)
		}
	}
}

func TestEmbedded(t *testing.T) {
	t.Parallel()
	exe := buildMyapp(t, t.TempDir())

	// migrate status lists the program's migrations; ten concurrent
	// `myapp migrate up` apply each migration once.
	t.Run("migrate", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		db, g := on(t)

		r := myapp(ctx, t, exe, args(g, "migrate", "status")...)
		wantOK(t, r)
		for _, w := range []*regexp.Regexp{
			regexp.MustCompile(`(?m)^-1000\s+pending\s`),
			regexp.MustCompile(`(?m)^1\s+pending\s+record that it ran\s`),
			regexp.MustCompile(`(?m)^2\s+pending\s+ensure index "email_1" on "users"\s`),
		} {
			if !w.MatchString(r.stdout) {
				t.Errorf("status lacks %s:\n%s", w, r.stdout)
			}
		}
		if strings.Contains(r.stdout, "unknown") {
			t.Errorf("status shows unknown migrations:\n%s", r.stdout)
		}
		r = myapp(ctx, t, exe, args(g, "migrate", "plan")...)
		wantOK(t, r)
		if !strings.Contains(r.stdout, "1  record that it ran  (not applied)") || !strings.Contains(r.stdout, `create index "email_1"`) {
			t.Errorf("plan:\n%s", r.stdout)
		}

		const n = 10
		results := make([]result, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { results[i] = myapp(ctx, t, exe, args(g, "migrate", "up")...) })
		}
		wg.Wait()
		applied := map[string]int{}
		waited := 0
		for i, r := range results {
			if r.code != ExitOK {
				t.Errorf("invocation %d: %v", i, r)
				continue
			}
			if strings.Contains(r.stderr, `"message":"migration waited"`) {
				waited++
			}
			for _, m := range regexp.MustCompile(`(?m)^applied (-?\d+) `).FindAllStringSubmatch(r.stdout, -1) {
				applied[m[1]]++
			}
		}
		for _, v := range []string{"-1000", "-990", "-980", "1", "2"} {
			if applied[v] != 1 {
				t.Errorf("migration %s applied by %d invocations, want 1 (%v)", v, applied[v], applied)
			}
		}
		if len(applied) != 5 {
			t.Errorf("applied %v", applied)
		}
		if waited == 0 {
			t.Error("no invocation waited for another: they did not run concurrently")
		}
		if runs, err := db.Collection("myapp_applied").CountDocuments(ctx, bson.D{}); err != nil || runs != 1 {
			t.Errorf("migration 1 ran %d times (%v), want once", runs, err)
		}

		r = myapp(ctx, t, exe, args(g, "migrate", "status", "--json")...)
		wantOK(t, r)
		var st []statusJSON
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, r.stdout)
		}
		var versions []string
		for _, e := range st {
			versions = append(versions, strconv.FormatInt(e.Version, 10))
			if e.State != string(migrations.StateApplied) || e.Keeper == "" {
				t.Errorf("migration %d: %+v, want applied", e.Version, e)
			}
		}
		if strings.Join(versions, ",") != "-1000,-990,-980,1,2" {
			t.Errorf("status lists %v", versions)
		}
		r = myapp(ctx, t, exe, args(g, "migrate", "up")...)
		wantOK(t, r)
		if strings.TrimSpace(r.stdout) != "nothing to apply" {
			t.Errorf("up once more:\n%s", r.stdout)
		}
	})

	// jobs lists the program's job before any instance ran it.
	t.Run("jobs", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, g := on(t)
		r := myapp(ctx, t, exe, args(g, "jobs")...)
		wantOK(t, r)
		if !regexp.MustCompile(`(?m)^nightly-report\s+0 3 \* \* \*\s+\S+T03:00:00.000Z\s+active\s+-\s+-\s+-\s+-`).MatchString(r.stdout) {
			t.Errorf("jobs:\n%s", r.stdout)
		}
		r = myapp(ctx, t, exe, args(g, "jobs", "--json")...)
		wantOK(t, r)
		var jobs []jobJSON
		if err := json.Unmarshal([]byte(r.stdout), &jobs); err != nil {
			t.Fatalf("jobs --json: %v\n%s", err, r.stdout)
		}
		if len(jobs) != 1 || jobs[0].Job != "nightly-report" || !jobs[0].Registered || jobs[0].LastRun != nil {
			t.Errorf("jobs --json: %+v", jobs)
		}
	})

	// Usage, exit codes and redaction are the mongolock command's, under
	// the program's name; it has no embedded server.
	t.Run("errors", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r := myapp(ctx, t, exe, "-h")
		if r.code != ExitOK || !strings.HasPrefix(r.stdout, "Usage: myapp [global flags] COMMAND") || strings.Contains(r.stdout, "  dev ") {
			t.Errorf("-h: %v", r)
		}
		myappErr(t, myapp(ctx, t, exe, "frobnicate"), ExitUsage, `unknown command "frobnicate" (see myapp -h)`)
		myappErr(t, myapp(ctx, t, exe, "dev"), ExitUsage, `unknown command "dev"`)
		myappErr(t, myapp(ctx, t, exe, "demo"), ExitUsage, "no server: set --uri or MONGODB_URI")
		dead := "mongodb://alice:hunter2@127.0.0.1:" + strconv.Itoa(closedPort(t)) + "/"
		r = myapp(ctx, t, exe, "--uri", dead, "--timeout", "300ms", "migrate", "up")
		myappErr(t, r, ExitFailure, "cannot reach mongodb://***@127.0.0.1:")
		if strings.Contains(r.stderr+r.stdout, "hunter2") {
			t.Errorf("password printed: %s", r.stderr)
		}
	})

	// The demo runs the program itself as its instances.
	t.Run("demo", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		r := myapp(ctx, t, exe, "demo", "--uri", mongotest.URI(), "--duration", "8s", "--ttl", "1s", "--instances", "2")
		t.Logf("demo output:\n%s", r.stdout)
		wantDemoOK(t, r, 2)
	})
}
