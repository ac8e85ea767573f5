package ui_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/scheduler"
	"github.com/mongolock/mongolock/ui"
)

// TestActionsUpsertsNotIDOnly: no upsert the dashboard sends (the record
// of an action, the actions themselves) has a filter of the _id alone,
// which FerretDB 2.x runs as an insert that replaces a racer's document
// (docs/deployments.md). The record of an action was an upsert keyed on a
// fresh ObjectID alone.
func TestActionsUpsertsNotIDOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ups := mongotest.NewUpserts()
	client := mongotest.NewClient(t, options.Client().SetMonitor(ups.Monitor()))
	db := mongotest.Database(t, client, mongotest.NewDatabase(t).Name())
	if _, err := db.Collection(scheduler.DefaultJobsCollection).InsertOne(ctx,
		bson.D{{Key: "_id", Value: "j"}, {Key: "last", Value: time.Unix(0, 0)}, {Key: "spec", Value: "@daily"}}); err != nil {
		t.Fatal(err)
	}
	h, err := ui.New(db, ui.WithActions(func(r *http.Request, _ ui.Action) error {
		ui.SetOperator(r, "alice")
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	c := srv.Client()
	c.Jar = newJar()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	code, body := get2(t, c, srv.URL+"/jobs/j")
	token := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	if code != http.StatusOK || token == nil {
		t.Fatalf("job page: %d, token %v", code, token)
	}
	for _, path := range []string{"/actions/pause", "/actions/resume", "/actions/trigger"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(url.Values{"job": {"j"}, "csrf": {token[1]}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode >= 400 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
	}
	if n, err := db.Collection(ui.DefaultActionsCollection).CountDocuments(ctx, bson.D{}); err != nil || n != 3 {
		t.Errorf("%d actions recorded (%v), want 3", n, err)
	}
	if ups.Count(ui.DefaultActionsCollection) == 0 {
		t.Errorf("no upsert into %q seen: the exercise no longer covers the record of an action", ui.DefaultActionsCollection)
	}
	for _, u := range ups.IDOnly() {
		t.Errorf("%s: its filter is the _id alone", u)
	}
}
