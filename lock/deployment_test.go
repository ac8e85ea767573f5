package lock_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/internal/wirefault"
	"github.com/mongolock/mongolock/lock"
)

// buildInfoAs plays another server in buildInfo replies: FerretDB's fields
// go, extra comes in.
func buildInfoAs(extra ...bson.E) wirefault.Rule {
	return wirefault.RuleFuncs{OnReply: func(cmd, reply bson.D) bson.D {
		if len(cmd) == 0 || !strings.EqualFold(cmd[0].Key, "buildInfo") {
			return nil
		}
		out := bson.D{}
		for _, e := range reply {
			switch e.Key {
			case "ferretdbVersion", "ferretdbFeatures", "ferretdb":
			default:
				out = append(out, e)
			}
		}
		return append(out, extra...)
	}}
}

// serializedAsked counts mongoutil.SerializedCommand. With answer set it
// answers it: {ok: 1} as the serializing proxy does, or CommandNotFound as
// FerretDB does; otherwise the command goes on.
func serializedAsked(asked *atomic.Int32, answer bool, ok bool) wirefault.Rule {
	return wirefault.RuleFuncs{OnRequest: func(cmd bson.D) (bson.D, bson.D) {
		if len(cmd) == 0 || cmd[0].Key != mongoutil.SerializedCommand {
			return nil, nil
		}
		asked.Add(1)
		switch {
		case !answer:
			return nil, nil
		case ok:
			return nil, bson.D{{Key: "ok", Value: 1.0}}
		}
		return nil, bson.D{{Key: "ok", Value: 0.0}, {Key: "errmsg", Value: "no such command: '" + mongoutil.SerializedCommand + "'"},
			{Key: "code", Value: int32(mongoutil.CodeCommandNotFound)}, {Key: "codeName", Value: "CommandNotFound"}}
	}}
}

// syncBuffer is a log destination for several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestFerretDB1Warning: a Locker on FerretDB 1.x with no serializing proxy
// in front of it logs once, at warning level, that mutual exclusion is not
// guaranteed, however many calls probe the deployment at once, and every
// Session on it reports one DeploymentWarning. Behind the proxy, on FerretDB
// 2.x and on MongoDB it says nothing; only FerretDB 1.x is asked about the
// proxy. The deployments are played with wire rules, so the test runs on
// any backend.
func TestFerretDB1Warning(t *testing.T) {
	t.Parallel()
	ferret1 := bson.E{Key: "ferretdbVersion", Value: "v1.24.0"}
	embedded := mongotest.Backend() == mongotest.BackendFerretDB
	cases := []struct {
		name  string
		rules func(asked *atomic.Int32) []wirefault.Rule
		warn  bool
		asked int32
	}{
		{"FerretDB 1.x alone", func(asked *atomic.Int32) []wirefault.Rule {
			return []wirefault.Rule{buildInfoAs(ferret1), serializedAsked(asked, true, false)}
		}, true, 1},
		{"FerretDB 1.x behind the proxy", func(asked *atomic.Int32) []wirefault.Rule {
			if embedded { // the embedded server's own proxy answers
				return []wirefault.Rule{serializedAsked(asked, false, false)}
			}
			return []wirefault.Rule{buildInfoAs(ferret1), serializedAsked(asked, true, true)}
		}, false, 1},
		{"FerretDB 2.x", func(asked *atomic.Int32) []wirefault.Rule {
			return []wirefault.Rule{buildInfoAs(bson.E{Key: "ferretdb", Value: bson.D{{Key: "version", Value: "v2.5.0"}}}),
				serializedAsked(asked, true, false)}
		}, false, 0},
		{"MongoDB", func(asked *atomic.Int32) []wirefault.Rule {
			return []wirefault.Rule{buildInfoAs(), serializedAsked(asked, true, false)}
		}, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t, 30*time.Second)
			var asked atomic.Int32
			var log syncBuffer
			l := rewritten(t, newDB(t), tc.rules(&asked), lock.WithLogger(zerolog.New(&log)))

			var wg sync.WaitGroup
			for i := range 4 { // first calls at once: one probe
				wg.Go(func() {
					if _, err := l.AcquireLocks(ctx, "k", fmt.Sprint("store", i)); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()

			var seen [2]atomic.Int32
			for i := range seen {
				s, err := lock.NewSession(l, lock.WithObserver(lock.ObserverFunc(func(e lock.Event) {
					if e.Kind == lock.DeploymentWarning {
						seen[i].Add(1)
						if !strings.Contains(e.Reason, "FerretDB 1.x") {
							t.Errorf("reason %q", e.Reason)
						}
					}
				})))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				for j := range 2 {
					if _, err := s.AcquireLocks(ctx, fmt.Sprint("session", i, j)); err != nil {
						t.Fatal(err)
					}
				}
			}

			want := 0
			if tc.warn {
				want = 1
			}
			if n := strings.Count(log.String(), "mutual exclusion is not guaranteed"); n != want {
				t.Errorf("warned %d times, want %d; log:\n%s", n, want, log.String())
			}
			if tc.warn && !strings.Contains(log.String(), `"level":"warn"`) {
				t.Errorf("not at warning level: %s", log.String())
			}
			for i := range seen {
				if n := seen[i].Load(); n != int32(want) {
					t.Errorf("session %d saw %d DeploymentWarning events, want %d", i, n, want)
				}
			}
			if n := asked.Load(); n != tc.asked {
				t.Errorf("asked for a serializing proxy %d times, want %d", n, tc.asked)
			}
		})
	}
}

// TestDeadServerErrors: against a server that is not there, with no
// deadline but the client's server selection timeout, errors say what was
// being done and name the lock collection as such.
func TestDeadServerErrors(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	client, err := mongo.Connect(options.Client().SetHosts([]string{addr}).SetDirect(true).
		SetServerSelectionTimeout(200 * time.Millisecond).SetConnectTimeout(200 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	l, err := lock.New(client.Database("app"), lock.WithCollection("leases"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background() // no deadline, as a user might
	calls := []struct {
		op   string
		call func() error
	}{
		{`acquire "x": probe the deployment`, func() error { _, err := l.AcquireLocks(ctx, "k", "x"); return err }},
		{"renew: probe the deployment", func() error { _, err := l.Renew(ctx, "k", "x"); return err }},
		{`holder of "x": probe the deployment`, func() error { _, err := l.Holder(ctx, "x"); return err }},
		{"list locks: probe the deployment", func() error { _, err := l.Locks(ctx); return err }},
		{"purge: probe the deployment", func() error { _, err := l.Purge(ctx); return err }},
		{`ensure indexes of lock collection "app.leases": `, func() error { return l.EnsureIndexes(ctx) }},
	}
	for _, c := range calls {
		err := c.call()
		msg := fmt.Sprint(err)
		if !strings.HasPrefix(msg, c.op) || strings.Count(msg, `lock collection "app.leases"`) != 1 ||
			!strings.Contains(msg, "server selection") {
			t.Errorf("%s: %v", c.op, err)
		}
	}
}

// TestServerGoneErrors: once the server is gone, a Locker that knew it
// reads its clock again after a failed command, and says so, naming the
// lock collection.
func TestServerGoneErrors(t *testing.T) {
	t.Parallel()
	client, fault := mongotest.NewProxiedClient(t, options.Client().
		SetServerSelectionTimeout(300*time.Millisecond).SetRetryWrites(false))
	db := mongotest.Database(t, client, newDB(t))
	l, err := lock.New(db, lock.WithCollection("leases"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 30*time.Second)
	mustAcquire(t, ctx, l, "a", "k")
	fault.Cut()
	coll := fmt.Sprintf("lock collection %q", db.Name()+".leases")
	// The first failure calls the clock estimate into doubt; the next
	// acquisition reads the clock first.
	for _, want := range []string{`acquire "b": `, `acquire "b": read the server's clock (` + coll + `): `} {
		_, err := l.AcquireLocks(ctx, "k", "b")
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("err = %v, want it to begin %q", err, want)
		}
	}
}
