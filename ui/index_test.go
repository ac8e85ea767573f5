package ui_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/ui"
)

// TestQueriesUseIndexes renders every page of a seeded database, captures
// each find the pages send, and asks the server to explain it: none may
// scan a collection, but the overview's list of jobs to look at (a scan of
// the jobs collection, one document per job) and the migrations page (every
// migration record). Only MongoDB explains its
// plans this way; on FerretDB, which scans for every filter but a lone
// _id, the test skips.
func TestQueriesUseIndexes(t *testing.T) {
	if mongotest.Backend() != mongotest.BackendMongoDB {
		t.Skipf("needs MongoDB's query planner (MONGODB_URI); the backend is %s", mongotest.Backend())
	}
	t.Parallel()
	var mu sync.Mutex
	var finds []bson.Raw
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "find" {
			mu.Lock()
			finds = append(finds, append(bson.Raw(nil), e.Command...))
			mu.Unlock()
		}
	}}
	client := mongotest.NewClient(t, options.Client().SetMonitor(mon))
	db := mongotest.Database(t, client, mongotest.NewDatabase(t).Name())
	seed(t, db, 50, 5000)
	h, err := ui.New(db)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, p := range []string{"/", "/locks", "/elections", "/jobs", "/jobs?prefix=job-00", "/jobs/job-0005", "/jobs/job-0005?outcome=failed", "/locks/leader", "/locks/scheduler/job-0005"} {
		if code, body := get(t, srv, p); code != http.StatusOK {
			t.Fatalf("GET %s: %d %.300s", p, code, body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, cmd := range finds {
		var c bson.D
		if err := bson.Unmarshal(cmd, &c); err != nil {
			t.Fatal(err)
		}
		var find bson.D
		for _, e := range c {
			switch e.Key {
			case "find", "filter", "sort", "limit", "skip", "projection":
				find = append(find, e)
			}
		}
		var res bson.M
		if err := db.RunCommand(context.Background(), bson.D{{Key: "explain", Value: find}, {Key: "verbosity", Value: "queryPlanner"}}).Decode(&res); err != nil {
			t.Fatalf("explain %v: %v", find, err)
		}
		plan := res["queryPlanner"].(bson.M)["winningPlan"]
		text := strings.ToUpper(fmtPlan(plan))
		coll := find[0].Value.(string)
		allowed := (coll == "mongolock_jobs" && strings.Contains(cmd.String(), "$or")) || // the jobs to look at
			coll == "mongolock_migrations" // every record, a few dozen documents
		if strings.Contains(text, "COLLSCAN") && !allowed {
			t.Errorf("%s scans the collection: %v\nplan %s", coll, find, text)
		}
	}
}

func fmtPlan(p any) string {
	b, _ := bson.MarshalExtJSON(bson.M{"p": p}, false, false)
	return string(b)
}
