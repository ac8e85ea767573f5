//go:build unix

package ui_test

import (
	"context"
	"html"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/scheduler"
	"github.com/mongolock/mongolock/ui"
)

// TestBrowserDotNames: as Chromium resolves them, the links of the jobs
// page to jobs named with "." and ".." segments lead to those jobs' pages
// (TestDotNames checks the same by the URL standard's rules).
func TestBrowserDotNames(t *testing.T) {
	browser := newBrowser(t)
	db := mongotest.NewDatabase(t)
	names := []string{"..", ".", "../admin", "a/../../locks", "a/./b", "./x", "a//b", "%2e%2E"}
	var jobs []any
	for _, n := range names {
		jobs = append(jobs, bson.D{{Key: "_id", Value: n}, {Key: "spec", Value: "@daily"}, {Key: "last", Value: time.Unix(0, 0)}})
	}
	if _, err := db.Collection(scheduler.DefaultJobsCollection).InsertMany(context.Background(), jobs); err != nil {
		t.Fatal(err)
	}
	h, err := ui.New(db, ui.WithPrefix("/ops"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(browser, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/ops/jobs")); err != nil {
		t.Fatal(err)
	}
	// Each job's name and its link's address, as the browser resolves it.
	links, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](
		`Object.fromEntries(Array.from(document.querySelectorAll("td > a")).map(a => [a.textContent, a.href]))`))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		href, ok := links[n]
		if !ok {
			t.Errorf("no link to %q: %v", n, links)
			continue
		}
		u, err := url.Parse(href)
		if err != nil || !strings.HasPrefix(u.Path, "/ops/jobs/") {
			t.Errorf("the link to %q leads to %s", n, href)
			continue
		}
		if err := chromedp.Do(ctx, chromedp.Navigate(href)); err != nil {
			t.Fatal(err)
		}
		title, err := chromedp.Run(ctx, chromedp.Title())
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(title, "Job "+n) {
			t.Errorf("the link to %q, %s, shows %q", n, href, html.UnescapeString(title))
		}
	}
}
