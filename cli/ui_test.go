package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/ui"
)

// syncBuffer is a bytes.Buffer the command writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestUI serves the dashboard with `ui --listen 127.0.0.1:0` in-process, as
// a program built with the package (its migrations and jobs registered),
// reads two pages, and stops it as Ctrl-C does.
func TestUI(t *testing.T) {
	t.Parallel()
	_, globals := on(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	mig := migrations.EnsureIndex(1, migrations.Index{Collection: "users", Keys: bson.D{{Key: "email", Value: 1}}})
	a := &app{
		cfg:   config{name: "myapp", jobs: []Job{{Name: "nightly", Spec: "0 3 * * *"}}, migrations: []migrations.Migration{mig}},
		stdin: strings.NewReader(""), stdout: &out, stderr: &errb,
		getenv: func(string) string { return "" }, isTerminal: func(any) bool { return false },
	}
	code := make(chan int, 1)
	go func() { code <- a.main(ctx, args(globals, "ui", "--listen", "127.0.0.1:0", "--refresh", "1s")) }()
	re := regexp.MustCompile(`dashboard of \S+ on \S+: (http://127\.0\.0\.1:\d+)/ \(read-only`)
	var base string
	for deadline := time.Now().Add(20 * time.Second); base == ""; {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
			break
		}
		select {
		case c := <-code:
			t.Fatalf("ui exited %d: %s %s", c, out.String(), errb.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no address printed: %q", out.String())
		}
	}
	if strings.Contains(out.String(), mongotest.URI()+"?") {
		t.Errorf("printed the raw URI: %q", out.String())
	}
	for path, want := range map[string]string{
		"/":           "myapp",
		"/migrations": "ensure index",
	} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d, no %q", path, resp.StatusCode, want)
		}
	}
	resp, err := http.Post(base+"/actions/pause", "application/x-www-form-urlencoded", strings.NewReader("job=nightly"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /actions/pause: %d; mongolock ui is read-only", resp.StatusCode)
	}
	cancel()
	select {
	case c := <-code:
		if c != ExitOK {
			t.Errorf("exit %d after Ctrl-C: %s", c, errb.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("ui did not stop")
	}
}

func TestUIBadUsage(t *testing.T) {
	t.Parallel()
	_, globals := on(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ui", "extra"}, "ui takes no arguments"},
		{[]string{"ui", "--listen", "nowhere"}, "--listen"},
		{[]string{"ui", "--tz", "Mars/Olympus"}, "--tz"},
		{[]string{"ui", "--refresh", "1ms"}, "WithRefresh"},
		{[]string{"ui", "--jobs-collection", "a$b"}, "invalid collection name"},
	} {
		r := cli(t, args(globals, c.args...)...)
		wantErr(t, r, ExitUsage, c.want)
	}
}

// TestHTTPServerTimeouts: the servers of the ui command and the demo have
// the dashboard's timeouts, and close an idle keep-alive connection after
// the idle timeout (a short one here).
func TestHTTPServerTimeouts(t *testing.T) {
	t.Parallel()
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	if srv.ReadHeaderTimeout != ui.DefaultServerReadHeaderTimeout || srv.ReadTimeout != ui.DefaultServerReadTimeout ||
		srv.WriteTimeout != ui.DefaultServerWriteTimeout || srv.IdleTimeout != ui.DefaultServerIdleTimeout {
		t.Errorf("timeouts: header %v, read %v, write %v, idle %v", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout)
	}
	const idle = 200 * time.Millisecond
	srv.IdleTimeout = idle
	conn := serveAndGet(t, srv)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" || resp.Close {
		t.Fatalf("response %q, close %v: want a keep-alive", body, resp.Close)
	}
	answered := time.Now()
	// The server closes the connection: the read ends with EOF, well
	// before the deadline.
	if err := conn.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("idle connection: read %v, want EOF (closed by the server)", err)
	}
	if waited := time.Since(answered); waited < idle/2 {
		t.Errorf("closed %v after the response: before the idle timeout %v", waited, idle)
	}
}

// TestHTTPServerStalledReader: a client that sends its request and never
// reads the answer holds its handler no longer than the write timeout (a
// short one here): the write fails at the deadline and the handler
// returns. Before the servers had one, 150 such readers held their
// handlers for 45 s.
func TestHTTPServerStalledReader(t *testing.T) {
	t.Parallel()
	returned := make(chan error, 1)
	big := bytes.Repeat([]byte("x"), 1<<20)
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		var err error
		for i := 0; i < 256 && err == nil; i++ { // 256 MB: past any socket buffer
			_, err = w.Write(big)
		}
		returned <- err
	}))
	const write = 300 * time.Millisecond
	srv.WriteTimeout = write
	serveAndGet(t, srv) // a client that never reads its answer
	start := time.Now()
	select {
	case err := <-returned:
		if err == nil {
			t.Errorf("the handler wrote 256 MB to a client that reads nothing")
		}
		if took := time.Since(start); took > 10*write+5*time.Second {
			t.Errorf("the handler returned after %v, past the write timeout %v", took, write)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the handler still writes to a stalled reader after 30 s (write timeout %v)", write)
	}
}

// serveAndGet serves srv on a local port until the test ends, and returns
// a connection that sent it one GET /.
func serveAndGet(t *testing.T, srv *http.Server) net.Conn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- serveUntil(ctx, ln, srv, zerolog.Nop()) }()
	t.Cleanup(func() { cancel(); <-served })
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: dashboard\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return conn
}
