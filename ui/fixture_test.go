package ui_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/scheduler"
)

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		os.Exit(runMain())
	}
	os.Exit(mongotest.Main(m))
}

// fixture is a database with a small cluster running on it: one instance
// runs a scheduler with a job that succeeds, one that fails and is
// retried, one paused and one that leaks a secret in its error, and a
// leader election recorded in the term log.
type fixture struct {
	db      *mongo.Database
	keeper  string
	session *lock.Session
}

// secret is a password that must never show on a page.
const secret = "s3cr3t-pw"

// newFixture builds a fixture in a database of its own; the test's
// cleanup stops what it runs.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	f, stop, err := buildFixture(mongotest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return f
}

func buildFixture(db *mongo.Database) (*fixture, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	locker, err := lock.New(db, lock.WithTTL(3*time.Second))
	if err != nil {
		return nil, nil, err
	}
	terms, err := runner.NewTermLog(db)
	if err != nil {
		return nil, nil, err
	}
	session, err := lock.NewSession(locker, lock.WithObserver(terms), lock.WithKeeperID("fixture/1"))
	if err != nil {
		return nil, nil, err
	}
	m, err := migrations.New(db, migrations.WithSession(session))
	if err != nil {
		return nil, nil, err
	}
	if _, err := m.Up(ctx); err != nil {
		return nil, nil, err
	}
	s, err := scheduler.New(db, session)
	if err != nil {
		return nil, nil, err
	}
	var mu sync.Mutex
	calls := 0
	for _, j := range []struct {
		name string
		fn   func(context.Context) error
		opts []scheduler.JobOption
	}{
		{"ok", func(context.Context) error { return nil }, nil},
		{"flaky", func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if calls%2 == 1 {
				return errors.New("flaky: first attempts fail")
			}
			return nil
		}, []scheduler.JobOption{scheduler.JobRetries(1, lock.Backoff{First: 50 * time.Millisecond, Max: 50 * time.Millisecond})}},
		{"leaky", func(context.Context) error {
			return fmt.Errorf("cannot reach mongodb://admin:%s@db.internal:27017/app", secret)
		}, nil},
		{"idle", func(context.Context) error { return nil }, nil},
	} {
		if err := s.AddJob(j.name, "@every 1s", j.fn, j.opts...); err != nil {
			return nil, nil, err
		}
	}
	if err := s.Start(); err != nil {
		return nil, nil, err
	}
	// A second instance registers ok with another spec: the instances
	// disagree.
	session2, err := lock.NewSession(locker, lock.WithKeeperID("fixture/2"))
	if err != nil {
		return nil, nil, err
	}
	s2, err := scheduler.New(db, session2)
	if err != nil {
		return nil, nil, err
	}
	if err := s2.AddJob("ok", "*/3 * * * * *", func(context.Context) error { return nil }); err != nil {
		return nil, nil, err
	}
	if err := s2.Start(); err != nil {
		return nil, nil, err
	}
	r, err := runner.New(session, "elect")
	if err != nil {
		return nil, nil, err
	}
	rctx, rcancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.Run(rctx, func(ctx context.Context) error { <-ctx.Done(); return nil }) })
	stop := func() {
		sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer scancel()
		_ = s.Stop(sctx)
		_ = s2.Stop(sctx)
		_ = session2.Close()
		rcancel()
		wg.Wait()
		_ = session.Close()
		_ = terms.Close(sctx)
	}
	// Wait until each job has a few records and a retry happened.
	runs := db.Collection(scheduler.DefaultRunsCollection)
	for {
		n, err := runs.CountDocuments(ctx, bson.D{{Key: "job", Value: "flaky"}, {Key: "attempt", Value: 2}})
		if err != nil {
			stop()
			return nil, nil, err
		}
		ok, err := runs.CountDocuments(ctx, bson.D{{Key: "job", Value: "ok"}})
		if err != nil {
			stop()
			return nil, nil, err
		}
		recs, _, err := scheduler.LoadRecords(ctx, db.Collection(scheduler.DefaultJobsCollection), "ok")
		if err != nil {
			stop()
			return nil, nil, err
		}
		if n >= 1 && ok >= 3 && len(recs) == 1 && len(recs[0].Specs) == 2 {
			break
		}
		if err := lock.Sleep(ctx, locker.Clock(), 200*time.Millisecond); err != nil {
			stop()
			return nil, nil, fmt.Errorf("the fixture's jobs did not run: %w", err)
		}
	}
	// Older history of ok, for the pages of its table: 30 firings a minute
	// apart, a day before, every fifth missed.
	var old []any
	day := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 30 {
		f := day.Add(time.Duration(i) * time.Minute)
		d := bson.D{{Key: "_id", Value: "ok@" + f.Format(time.RFC3339Nano)}, {Key: "job", Value: "ok"}, {Key: "scheduled", Value: f},
			{Key: "end", Value: f.Add(time.Second)}}
		if i%5 == 0 {
			d = append(d, bson.E{Key: "outcome", Value: "skipped"}, bson.E{Key: "reason", Value: scheduler.ReasonMisfired},
				bson.E{Key: "through", Value: f}, bson.E{Key: "count", Value: 1})
		} else {
			d = append(d, bson.E{Key: "outcome", Value: "succeeded"}, bson.E{Key: "keeper", Value: "old/1"},
				bson.E{Key: "start", Value: f.Add(50 * time.Millisecond)}, bson.E{Key: "fence", Value: bson.Timestamp{T: 1, I: uint32(i)}})
		}
		old = append(old, d)
	}
	if _, err := runs.InsertMany(ctx, old); err != nil {
		stop()
		return nil, nil, err
	}
	if err := scheduler.PauseJob(ctx, db.Collection(scheduler.DefaultJobsCollection), "idle",
		scheduler.Pause{Note: "maintenance", By: "setup"}); err != nil {
		stop()
		return nil, nil, err
	}
	return &fixture{db: db, keeper: session.KeeperID(), session: session}, stop, nil
}

// get fetches path from srv and returns the status and body.
func get(t *testing.T, srv *httptest.Server, path string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b []byte
	b, err = readAll(resp)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
