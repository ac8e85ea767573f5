package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/lock"
)

// startDev runs `mongolock dev` (the test binary as the command) with args
// and returns it, its output and the URI and data directory it printed.
func startDev(t *testing.T, args ...string) (cmd *exec.Cmd, lines <-chan string, uri, dir string) {
	t.Helper()
	cmd, _, lines = startMain(t, append([]string{"dev"}, args...)...)
	uri = nextLine(t, lines, regexp.MustCompile(`^  uri:\s+(mongodb://\S+)$`), 60*time.Second)[1]
	dir = nextLine(t, lines, regexp.MustCompile(`^  data:\s+(.+) \(`), 5*time.Second)[1]
	if m := nextLine(t, lines, regexp.MustCompile(`^  use:\s+export MONGODB_URI='(.*)'$`), 5*time.Second); m[1] != uri {
		t.Errorf("export line has %q, uri line %q", m[1], uri)
	}
	nextLine(t, lines, regexp.MustCompile(`^Ctrl-C stops it\.$`), 5*time.Second)
	return cmd, lines, uri, dir
}

// stopDev sends sig and waits for a clean exit.
func stopDev(t *testing.T, cmd *exec.Cmd, lines <-chan string, sig os.Signal, want *regexp.Regexp) {
	t.Helper()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	nextLine(t, lines, want, 30*time.Second)
	for range lines {
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("dev exited with %v after %v, want exit 0", err, sig)
	}
}

func devClient(t *testing.T, uri string) *mongo.Client {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetServerSelectionTimeout(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// freePort returns a port of 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// TestDev: dev serves clients, keeps the data of --dir and its URI across
// restarts and stops cleanly on Ctrl-C.
func TestDev(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	port := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	cmd, lines, uri, dir := startDev(t, "--dir", dataDir, "--port", port)
	if want := "mongodb://127.0.0.1:" + port + "/"; uri != want {
		t.Errorf("uri %s, want %s", uri, want)
	}
	if dir != dataDir {
		t.Errorf("data in %q, want %q", dir, dataDir)
	}
	client := devClient(t, uri)
	db := client.Database("app")
	if _, err := db.Collection("orders").InsertOne(ctx, bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	l, err := lock.New(db, lock.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if a, err := l.AcquireLocks(ctx, "keeper-1", "nightly"); err != nil || len(a.Granted) != 1 {
		t.Fatalf("acquire: %+v, %v", a, err)
	}
	if a, err := l.AcquireLocks(ctx, "keeper-2", "nightly"); err != nil || len(a.Refused) != 1 {
		t.Fatalf("a contender: %+v, %v; want it refused", a, err)
	}
	_ = client.Disconnect(ctx)
	stopDev(t, cmd, lines, os.Interrupt, regexp.MustCompile(`^stopped; data kept in `+regexp.QuoteMeta(dataDir)+`$`))

	// Again on the same directory: the URI, the document and the lock are
	// there.
	first := uri
	cmd, lines, uri, _ = startDev(t, "--dir", dataDir, "--port", port)
	if uri != first {
		t.Errorf("uri %s after a restart, was %s", uri, first)
	}
	client = devClient(t, uri)
	db = client.Database("app")
	if n, err := db.Collection("orders").CountDocuments(ctx, bson.D{}); err != nil || n != 1 {
		t.Errorf("after a restart: %d orders, %v; want 1", n, err)
	}
	if l, err = lock.New(db, lock.WithTTL(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if h, err := l.Holder(ctx, "nightly"); err != nil || h.KeeperID != "keeper-1" {
		t.Errorf("after a restart: holder %+v, %v; want keeper-1", h, err)
	}
	_ = client.Disconnect(ctx)
	stopDev(t, cmd, lines, os.Interrupt, regexp.MustCompile(`^stopped; data kept in `))
	if entries, err := os.ReadDir(dataDir); err != nil || len(entries) == 0 {
		t.Errorf("data directory after dev: %v, %v", entries, err)
	}
}

// TestDevTemporary: without --dir the data goes in a temporary directory,
// removed at exit, here on SIGTERM.
func TestDevTemporary(t *testing.T) {
	t.Parallel()
	cmd, lines, uri, dir := startDev(t, "--port", "0")
	client := devClient(t, uri)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := client.Ping(ctx, nil); err != nil {
		t.Fatal(err)
	}
	_ = client.Disconnect(ctx)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("data directory while running: %v", err)
	}
	stopDev(t, cmd, lines, syscall.SIGTERM, regexp.MustCompile(`^stopped; removed `))
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary directory %s after dev: %v; want it removed", dir, err)
	}
}

// TestDevOneServerPerDir: a second dev on a --dir in use is refused,
// naming the first; once the first is killed (no clean-up), a new one
// starts there. A --port in use is refused, naming the flag.
func TestDevOneServerPerDir(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	cmd, lines, uri, _ := startDev(t, "--dir", dataDir, "--port", "0")
	wantErr(t, cli(t, "dev", "--dir", dataDir, "--port", "0"), ExitFailure,
		"--dir "+dataDir+" is in use by another server (pid "+strconv.Itoa(cmd.Process.Pid)+", "+uri+"): stop it, or give this one another --dir")
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for range lines {
	}
	_ = cmd.Wait()
	cmd, lines, _, _ = startDev(t, "--dir", dataDir, "--port", "0")
	stopDev(t, cmd, lines, os.Interrupt, regexp.MustCompile(`^stopped; data kept in `))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	wantErr(t, cli(t, "dev", "--port", port), ExitFailure,
		"--port "+port+": 127.0.0.1:"+port+" is in use (by another mongolock dev, or a MongoDB server?): stop it, or pick another --port")
}

func TestDevUsage(t *testing.T) {
	t.Parallel()
	wantErr(t, cli(t, "dev", "extra"), ExitUsage, `dev takes no arguments, got "extra"`)
	wantErr(t, cli(t, "dev", "--dir"), ExitUsage, "flag needs an argument: -dir")
	wantErr(t, cli(t, "dev", "--log-level", "loud"), ExitUsage, "invalid --log-level")
	wantErr(t, cli(t, "dev", "--port", "-1"), ExitUsage, "--port -1: want a port from 0 to 65535")
	// dev uses no server, database or lock: those flags are not its.
	wantErr(t, cli(t, "dev", "--uri", "mongodb://h"), ExitUsage, "flag provided but not defined: -uri")
	wantErr(t, cli(t, "--ttl", "5s", "dev"), ExitUsage, "dev does not use --ttl")
	r := cli(t, "dev", "-h")
	var listed []string
	for _, m := range regexp.MustCompile(`(?m)^  -(\S+)`).FindAllStringSubmatch(r.stdout, -1) {
		listed = append(listed, m[1])
	}
	if r.code != ExitOK || strings.Join(listed, " ") != "dir log-level port" ||
		!strings.Contains(r.stdout, fmt.Sprintf("(default %d)", DefaultDevPort)) {
		t.Errorf("dev -h lists %q: %v", listed, r)
	}
	// A program built without WithDevServer has no dev command.
	var a app
	a.cfg.name = "myapp"
	for _, c := range a.commands() {
		if c.name == "dev" {
			t.Error("dev listed without WithDevServer")
		}
	}
}
