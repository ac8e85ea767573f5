package ui_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/jonboulle/clockwork"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/scheduler"
	"github.com/mongolock/mongolock/ui"
)

// TestHandler serves every page of a running cluster's database, with bad
// input, a read-only and an acting dashboard, and counts the reads of many
// viewers. One fixture serves the subtests, which run in order: the
// actions come last.
func TestHandler(t *testing.T) {
	f := newFixture(t)
	h, err := ui.New(f.db)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	t.Run("pages", func(t *testing.T) {
		for _, c := range []struct {
			path string
			want []string
		}{
			{"/", []string{"Instances", f.keeper, "Leaders", "elect", "Jobs to look at", "leaky", "Locks about to expire"}},
			{"/locks", []string{"scheduler/@instance/", "elect", "Fence", "Expires in"}},
			{"/locks?kind=election", []string{"elect"}},
			{"/locks/elect", []string{"Terms", "the term log", "holds it now"}},
			{"/locks/scheduler/ok", []string{"the run history"}},
			{"/elections", []string{"elect", "Failover gap before", f.keeper}},
			{"/jobs", []string{"ok", "flaky", "leaky", "idle", "paused by setup", "maintenance", "@every 1s", "Next firings"}},
			{"/jobs?attention=1", []string{"leaky", "idle"}},
			{"/jobs?prefix=fl", []string{"flaky"}},
			{"/jobs/ok", []string{"Timeline of the firings of ok", "<svg", "History", "o-ran", "fixture", "Registered specs",
				"instances up registered different specs", "*/3 * * * * *"}},
			{"/jobs/flaky", []string{"retried", "◆", "attempt 1 failed, retried"}},
			{"/jobs/flaky?outcome=retried", []string{"(attempt 2)"}},
			{"/jobs/leaky?outcome=failed", []string{"o-failed", "mongodb://***@db.internal"}},
			{"/jobs/idle", []string{"paused by setup", "maintenance"}},
			{"/migrations", []string{"-1000", "-990", "-980", "applied", "fixture/1"}},
			{"/static/app.css", []string{".m-failed"}},
			{"/static/app.js", []string{"X-Mongolock-Fragment"}},
		} {
			code, body := get(t, srv, c.path)
			if code != http.StatusOK {
				t.Errorf("GET %s: %d\n%s", c.path, code, body)
				continue
			}
			for _, w := range c.want {
				if !strings.Contains(body, w) {
					t.Errorf("GET %s: no %q in the page", c.path, w)
				}
			}
			if strings.Contains(body, secret) {
				t.Errorf("GET %s shows the secret", c.path)
			}
			if strings.Contains(body, `method="post"`) {
				t.Errorf("GET %s: a read-only dashboard shows a form that posts", c.path)
			}
		}
		// The live part alone, for the pages' script.
		code, body := get(t, srv, "/jobs", "X-Mongolock-Fragment", "live")
		if code != http.StatusOK || strings.Contains(body, "<html") || !strings.Contains(body, "flaky") {
			t.Errorf("fragment: %d %.200q", code, body)
		}
	})

	t.Run("paging", func(t *testing.T) {
		// Following the Older links visits every record of ok once, newest
		// first; the Newer links lead back.
		all, _, err := scheduler.LoadHistory(context.Background(), f.db.Collection(scheduler.DefaultRunsCollection), "ok", 0)
		if err != nil {
			t.Fatal(err)
		}
		rowRe := regexp.MustCompile(`<tr id="(r-[^"]+)">`)
		olderRe := regexp.MustCompile(`href="(\?[^"]*)" rel="next"`)
		newerRe := regexp.MustCompile(`href="(\?[^"]*)" rel="prev"`)
		seen := map[string]bool{}
		next, pages, rows := "?n=10", 0, 0
		var last string
		for next != "" && pages < 20 {
			code, body := get(t, srv, "/jobs/ok"+strings.ReplaceAll(next, "&amp;", "&"))
			if code != http.StatusOK {
				t.Fatalf("page %d: %d", pages, code)
			}
			pages++
			for _, m := range rowRe.FindAllStringSubmatch(body, -1) {
				if seen[m[1]] {
					t.Errorf("row %s on two pages", m[1])
				}
				seen[m[1]] = true
				rows++
			}
			if pages > 1 && !newerRe.MatchString(body) {
				t.Errorf("page %d has no Newer link", pages)
			}
			last, next = next, ""
			if m := olderRe.FindStringSubmatch(body); m != nil {
				next = m[1]
			}
		}
		// Records written since the first page may push some across; none
		// may be lost.
		if rows < len(all)-5 || pages < 3 {
			t.Errorf("%d rows on %d pages, %d records", rows, pages, len(all))
		}
		_ = last
	})

	t.Run("bad input", func(t *testing.T) {
		for _, c := range []struct {
			path string
			code int
		}{
			{"/jobs/nope", http.StatusNotFound},
			{"/jobs/ok?outcome=exploded", http.StatusBadRequest},
			{"/jobs/ok?from=yesterday", http.StatusBadRequest},
			{"/jobs/ok?from=2026-01-02T10:00&to=2026-01-01T10:00", http.StatusBadRequest},
			{"/jobs/ok?to=0001-01-01T00:00", http.StatusBadRequest},
			{"/jobs/ok?n=100000000000000000000", http.StatusBadRequest},
			{"/jobs/ok?n=-5", http.StatusBadRequest},
			{"/jobs/ok?c=garbage", http.StatusBadRequest},
			{"/jobs/ok?c=o99999999999999999999999.1", http.StatusBadRequest},
			{"/jobs/ok?c=o9223372036854775807.0", http.StatusOK},  // past the newest: the newest records
			{"/jobs/ok?c=n-9223372036854775807.0", http.StatusOK}, // before the oldest: the newest page
			{"/jobs/ok?c=o-9223372036854775807.0", http.StatusOK}, // before the oldest: empty
			{"/jobs?n=1000000", http.StatusBadRequest},
			{"/jobs?attention=yes", http.StatusBadRequest},
			{"/jobs?prefix=" + strings.Repeat("x", 600), http.StatusBadRequest},
			{"/jobs?after=" + url.QueryEscape("\xff\xfe"), http.StatusOK},
			{"/locks?kind=castle", http.StatusBadRequest},
			{"/locks?n=0", http.StatusBadRequest},
			{"/locks/" + strings.Repeat("x", 2000), http.StatusBadRequest},
			{"/locks/never-held", http.StatusNotFound},
			{"/nowhere", http.StatusNotFound},
			{"/static/nothing.js", http.StatusNotFound},
		} {
			code, body := get(t, srv, c.path)
			if code != c.code {
				t.Errorf("GET %.80s: %d, want %d\n%.300s", c.path, code, c.code, body)
			}
			if code >= 400 && code != http.StatusNotFound && !strings.Contains(body, "role=\"alert\"") && !strings.HasPrefix(c.path, "/static/") {
				t.Errorf("GET %.80s: error page without an alert", c.path)
			}
		}
		// A read-only dashboard has no action endpoint.
		resp, err := srv.Client().PostForm(srv.URL+"/actions/pause", url.Values{"job": {"ok"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("POST /actions/pause on a read-only dashboard: %d", resp.StatusCode)
		}
	})

	t.Run("shared reader", func(t *testing.T) {
		// However many viewers load a page within a refresh, the database
		// sees the reads of one. The fake clock never moves: every
		// reading stays fresh.
		client, counter := mongotest.CountingClient(t)
		db := mongotest.Database(t, client, f.db.Name())
		clk := clockwork.NewFakeClock()
		h, err := ui.New(db, ui.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		s := httptest.NewServer(h)
		defer s.Close()
		pages := []string{"/", "/locks", "/elections", "/jobs", "/jobs/ok", "/migrations"}
		for _, p := range pages {
			if code, body := get(t, s, p); code != http.StatusOK {
				t.Fatalf("GET %s: %d %s", p, code, body)
			}
		}
		one := counter.Total()
		var wg sync.WaitGroup
		for range 20 {
			for _, p := range pages {
				wg.Go(func() {
					req, _ := http.NewRequest(http.MethodGet, s.URL+p, nil)
					req.Header.Set("X-Mongolock-Fragment", "live")
					resp, err := s.Client().Do(req)
					if err == nil {
						resp.Body.Close()
					}
				})
			}
		}
		wg.Wait()
		if more := counter.Total() - one; more != 0 {
			t.Errorf("120 more viewers within one refresh cost %d more commands (%v); the first cost %d", more, counter.Counts(), one)
		}
		t.Logf("one viewer of the %d pages: %d commands (%v)", len(pages), one, counter.Counts())
	})

	t.Run("actions", func(t *testing.T) { testActions(t, f) })
}

// testActions checks the actions: refused without a token, from another
// site, by the hook, without a named operator; done and recorded with
// the operator's name with all of them.
func testActions(t *testing.T, f *fixture) {
	refuse := errors.New("only alice may")
	h, err := ui.New(f.db, ui.WithActions(func(r *http.Request, a ui.Action) error {
		switch r.Header.Get("X-User") {
		case "alice":
			ui.SetOperator(r, "alice")
			return nil
		case "nobody":
			return nil // allowed, but names nobody
		case "":
			return ui.ErrUnauthenticated
		}
		return refuse
	}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := srv.Client()
	jar := newJar()
	client.Jar = jar

	code, body := get2(t, client, srv.URL+"/jobs/ok")
	if code != http.StatusOK || !strings.Contains(body, `method="post"`) {
		t.Fatalf("job page with actions: %d, forms: %v", code, strings.Contains(body, `method="post"`))
	}
	token := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	if token == nil {
		t.Fatal("no anti-forgery token in the forms")
	}
	post := func(path string, form url.Values, header ...string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		c := *client
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := readAll(resp)
		return resp, string(b)
	}
	pause := url.Values{"job": {"ok"}, "note": {"deploy freeze"}, "until": {"2h"}, "csrf": {token[1]}}
	for _, c := range []struct {
		name   string
		form   url.Values
		header []string
		code   int
	}{
		{"no token", url.Values{"job": {"ok"}}, []string{"X-User", "alice"}, http.StatusForbidden},
		{"wrong token", url.Values{"job": {"ok"}, "csrf": {"AAAA"}}, []string{"X-User", "alice"}, http.StatusForbidden},
		{"another site", pause, []string{"X-User", "alice", "Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"another origin", pause, []string{"X-User", "alice", "Origin", "https://evil.example"}, http.StatusForbidden},
		{"refused", pause, []string{"X-User", "mallory"}, http.StatusForbidden},
		{"unauthenticated", pause, nil, http.StatusUnauthorized},
		{"no operator", pause, []string{"X-User", "nobody"}, http.StatusForbidden},
		{"unknown job", url.Values{"job": {"nope"}, "csrf": {token[1]}}, []string{"X-User", "alice"}, http.StatusNotFound},
		{"bad until", url.Values{"job": {"ok"}, "until": {"soonish"}, "csrf": {token[1]}}, []string{"X-User", "alice"}, http.StatusBadRequest},
		{"remove unconfirmed", url.Values{"job": {"ok"}, "csrf": {token[1]}}, []string{"X-User", "alice"}, http.StatusBadRequest},
	} {
		path := "/actions/pause"
		if c.name == "remove unconfirmed" {
			path = "/actions/remove"
		}
		resp, body := post(path, c.form, c.header...)
		if resp.StatusCode != c.code {
			t.Errorf("%s: %d, want %d: %.300s", c.name, resp.StatusCode, c.code, body)
		}
		if c.code == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic") {
			t.Errorf("%s: no Basic challenge", c.name)
		}
	}
	recs, _, err := scheduler.LoadRecords(context.Background(), f.db.Collection(scheduler.DefaultJobsCollection), "ok")
	if err != nil || recs[0].Paused != nil {
		t.Fatalf("a refused action paused the job: %+v %v", recs, err)
	}
	resp, body := post("/actions/pause", pause, "X-User", "alice")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/jobs/ok?done=paused" {
		t.Fatalf("pause: %d %s %.300s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	recs, _, err = scheduler.LoadRecords(context.Background(), f.db.Collection(scheduler.DefaultJobsCollection), "ok")
	if err != nil || recs[0].Paused == nil || recs[0].Paused.By != "alice" || recs[0].Paused.Note != "deploy freeze" || recs[0].Paused.Until.IsZero() {
		t.Fatalf("after the pause: %+v %v", recs[0].Paused, err)
	}
	for _, a := range []struct {
		path string
		form url.Values
		done string
	}{
		{"/actions/trigger", url.Values{"job": {"ok"}}, "trigger"},
		{"/actions/resume", url.Values{"job": {"ok"}}, "resumed"},
		{"/actions/remove", url.Values{"job": {"idle"}, "confirm": {"yes"}}, "removed"},
		{"/actions/resume", url.Values{"job": {"idle"}}, "resumed"},
		{"/actions/release", url.Values{"lock": {"elect"}, "confirm": {"yes"}}, "released"},
	} {
		a.form.Set("csrf", token[1])
		resp, body := post(a.path, a.form, "X-User", "alice")
		if resp.StatusCode != http.StatusSeeOther || !strings.HasSuffix(resp.Header.Get("Location"), "?done="+a.done) {
			t.Errorf("%s %v: %d %s %.300s", a.path, a.form, resp.StatusCode, resp.Header.Get("Location"), body)
		}
	}
	n, err := f.db.Collection(ui.DefaultActionsCollection).CountDocuments(context.Background(), bson.D{{Key: "by", Value: "alice"}})
	if err != nil || n != 6 {
		t.Errorf("%d actions recorded by alice (%v), want 6", n, err)
	}
	code, body = get2(t, client, srv.URL+"/locks/elect?done=released")
	for _, w := range []string{"Force-released", "Operators' actions", "release", "alice"} {
		if !strings.Contains(body, w) {
			t.Errorf("lock page after the release (%d): no %q", code, w)
		}
	}
	code, body = get2(t, client, srv.URL+"/jobs/ok?done=paused")
	for _, w := range []string{"Paused: every instance", "⚑", "by <strong>alice</strong>", "deploy freeze", "trigger", "resume"} {
		if !strings.Contains(body, w) {
			t.Errorf("job page after the actions (%d): no %q", code, w)
		}
	}
}

func get2(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := readAll(resp)
	return resp.StatusCode, string(b)
}
