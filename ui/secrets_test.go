package ui_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/scheduler"
	"github.com/mongolock/mongolock/ui"
)

// hostile is a connection string whose credentials no page may show.
const (
	hostilePw  = "S3cretPw"
	hostileURI = "mongodb://alice:" + hostilePw + "@db.internal:27017/?authMechanismProperties=AWS_SESSION_TOKEN:tok" + hostilePw
)

// seedHostile writes, as programs and operators could, documents whose
// text carries hostileURI: a job's last run, its history, its pause, an
// action, a keeper id (in its presence lock's id too), a lock id and a
// lock's value.
func seedHostile(t *testing.T, db *mongo.Database) (presence string) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	run := bson.D{{Key: "keeper", Value: hostileURI}, {Key: "scheduled", Value: now}, {Key: "start", Value: now},
		{Key: "end", Value: now.Add(time.Second)}, {Key: "outcome", Value: "failed"}, {Key: "error", Value: "dial " + hostileURI + ": refused"}}
	job := append(bson.D{{Key: "_id", Value: "nightly"}, {Key: "spec", Value: "0 3 * * *"}, {Key: "last", Value: now}, {Key: "by", Value: hostileURI},
		{Key: "regs", Value: bson.D{{Key: "0 3 * * *", Value: bson.D{{Key: "by", Value: hostileURI}}}}}}, run...)
	if _, err := db.Collection(scheduler.DefaultJobsCollection).InsertOne(ctx, job); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection(scheduler.DefaultRunsCollection).InsertOne(ctx,
		append(bson.D{{Key: "_id", Value: "nightly@1"}, {Key: "job", Value: "nightly"}}, run...)); err != nil {
		t.Fatal(err)
	}
	if err := scheduler.PauseJob(ctx, db.Collection(scheduler.DefaultJobsCollection), "nightly",
		scheduler.Pause{Note: "see " + hostileURI, By: hostileURI}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection(ui.DefaultActionsCollection).InsertOne(ctx, bson.D{{Key: "kind", Value: "pause"}, {Key: "job", Value: "nightly"},
		{Key: "by", Value: hostileURI}, {Key: "note", Value: hostileURI}, {Key: "at", Value: now}}); err != nil {
		t.Fatal(err)
	}
	l, err := lock.New(db, lock.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	presence = scheduler.DefaultLockPrefix + "@instance/" + scheduler.DefaultJobsCollection + "/" + hostileURI
	for _, id := range []string{presence, "cache/" + hostileURI} {
		a, err := l.AcquireLocks(ctx, hostileURI, id)
		if err != nil || len(a.Granted) != 1 {
			t.Fatalf("acquire %s: %+v %v", id, a, err)
		}
		// Its value, as a leader publishes its address.
		if err := l.SetValue(ctx, hostileURI, lock.Term{LockID: id, Fence: a.Granted[0].Fence}, []byte(hostileURI)); err != nil {
			t.Fatal(err)
		}
	}
	return presence
}

// TestNoSecretOnAnyPage: whatever text the database holds, no page shows
// the credentials of a URI in it; the pages show it redacted, and text
// with no URI as it is.
func TestNoSecretOnAnyPage(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	presence := seedHostile(t, db)
	probe := `probe "S" "3" "q" "S3c" "XYZ" "cret" "Pw" "ice:S" "zz" "2026"`
	if err := scheduler.PauseJob(context.Background(), db.Collection(scheduler.DefaultJobsCollection), "nightly",
		scheduler.Pause{Note: probe + " " + hostileURI, By: hostileURI}); err != nil {
		t.Fatal(err)
	}
	h, err := ui.New(db)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	redactedPresence := ui.RedactURIs(presence)
	for _, p := range []string{"/", "/locks", "/locks?kind=instance", "/locks/" + url.PathEscape(redactedPresence), "/elections",
		"/locks/" + url.PathEscape(ui.RedactURIs("cache/"+hostileURI)), "/locks/" + url.PathEscape("cache/"+hostileURI),
		"/jobs", "/jobs/nightly", "/migrations", "/locks/" + url.PathEscape(presence)} {
		code, body := get(t, srv, p)
		if code >= 500 {
			t.Errorf("GET %s: %d", p, code)
		}
		page := html.UnescapeString(body)
		if strings.Contains(page, hostilePw) || strings.Contains(page, "alice") {
			i := strings.Index(page, hostilePw)
			t.Errorf("GET %s (%d) shows the credentials: …%s…", p, code, page[max(i-120, 0):min(i+40, len(page))])
		}
	}
	for p, want := range map[string][]string{
		"/locks":        {"mongodb://***@db.internal:27017/", "cache/mongodb://***@db.internal"},
		"/":             {"mongodb://***@db.internal:27017/"}, // the instance up
		"/jobs/nightly": {probe, "dial mongodb://***@db.internal:27017/"},
		"/locks/" + url.PathEscape(ui.RedactURIs("cache/"+hostileURI)): {"<code>mongodb://***@db.internal:27017/"},
	} {
		_, body := get(t, srv, p)
		for _, w := range want {
			if !strings.Contains(html.UnescapeString(body), w) {
				t.Errorf("GET %s: no %q", p, w)
			}
		}
	}
	// The presence lock is still known as one, by its redacted keeper.
	if _, body := get(t, srv, "/locks?kind=instance"); !strings.Contains(html.UnescapeString(body), redactedPresence) {
		t.Errorf("/locks?kind=instance does not list the presence lock %q", redactedPresence)
	}
}

// TestWithRedact: the program's function and RedactURIs both apply to
// what the pages show.
func TestWithRedact(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	seedHostile(t, db)
	h, err := ui.New(db, ui.WithRedact(func(s string) string { return strings.ReplaceAll(s, "nightly", "n*****") }))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	_, body := get(t, srv, "/jobs")
	if page := html.UnescapeString(body); strings.Contains(page, hostilePw) || !strings.Contains(page, "n*****") {
		t.Errorf("/jobs: the program's redaction or RedactURIs did not apply")
	}
}

// TestNextPage: the Next links of the locks and jobs pages lead to the
// next items (they were escaped twice: page 2 showed nothing).
func TestNextPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := mongotest.NewDatabase(t)
	l, err := lock.New(db, lock.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var jobs []any
	for i := range 15 {
		id := fmt.Sprintf("entity/%03d", i)
		if _, err := l.AcquireLocks(ctx, "k", id); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, bson.D{{Key: "_id", Value: id}, {Key: "spec", Value: "@daily"}, {Key: "last", Value: time.Unix(0, 0)}})
	}
	if _, err := db.Collection(scheduler.DefaultJobsCollection).InsertMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	h, err := ui.New(db)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	next := regexp.MustCompile(`href="([^"]*)" rel="next"`)
	for _, page := range []string{"/locks", "/jobs"} {
		first := page + "?prefix=entity%2F&n=10"
		code, body := get(t, srv, first)
		m := next.FindStringSubmatch(body)
		if code != http.StatusOK || m == nil || !strings.Contains(body, "entity/009") || strings.Contains(body, "entity/010") {
			t.Errorf("GET %s: %d, next %v", first, code, m)
			continue
		}
		u, err := url.Parse(srv.URL + first)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := url.Parse(html.UnescapeString(m[1]))
		if err != nil {
			t.Fatal(err)
		}
		second := u.ResolveReference(ref).RequestURI()
		code, body = get(t, srv, second)
		for i := range 15 {
			id := fmt.Sprintf("entity/%03d", i)
			if strings.Contains(body, ">"+id+"<") != (i >= 10) {
				t.Errorf("GET %s (%d, the Next link of %s): %s shown %v", second, code, page, id, i < 10)
			}
		}
	}
}

// TestDotNames: jobs and locks named with . or .. segments link to their
// own pages: no link can lead elsewhere, as a browser resolves it.
func TestDotNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := mongotest.NewDatabase(t)
	names := []string{"..", ".", "../admin", "a/../../locks", "a/./b", "./x", "a/", "a//b", "%2e%2E", "?x#y"}
	l, err := lock.New(db, lock.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var jobs []any
	for _, n := range names {
		if _, err := l.AcquireLocks(ctx, "k", n); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, bson.D{{Key: "_id", Value: n}, {Key: "spec", Value: "@daily"}, {Key: "last", Value: time.Unix(0, 0)}})
	}
	if _, err := db.Collection(scheduler.DefaultJobsCollection).InsertMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	h, err := ui.New(db, ui.WithPrefix("/ops"), ui.WithActions(func(r *http.Request, a ui.Action) error { ui.SetOperator(r, "op"); return nil }))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := srv.Client()
	client.Jar = newJar()
	for _, c := range []struct{ list, page, title string }{{"/ops/jobs", "/ops/jobs/", "Job "}, {"/ops/locks", "/ops/locks/", "Lock "}} {
		code, body := get2(t, client, srv.URL+c.list)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d", c.list, code)
		}
		for _, n := range names {
			m := regexp.MustCompile(`<a href="([^"]*)">` + regexp.QuoteMeta(html.EscapeString(n)) + `</a>`).FindStringSubmatch(body)
			if m == nil {
				t.Errorf("%s: no link to %q", c.list, n)
				continue
			}
			href := html.UnescapeString(m[1])
			target := resolve(t, srv.URL+c.list, href)
			if !strings.HasPrefix(target.Path, c.page) && target.Path != strings.TrimSuffix(c.page, "/") {
				t.Errorf("%s: the link to %q, %q, leads to %s", c.list, n, href, target.Path)
			}
			code, body := get2(t, client, target.String())
			if code != http.StatusOK || !strings.Contains(body, "<title>"+html.EscapeString(c.title+n)) {
				t.Errorf("%s: the link to %q, %q: %d, not its page", c.list, n, href, code)
			}
		}
	}
	// An action on such a job comes back to its page.
	_, body := get2(t, client, srv.URL+"/ops/jobs/a%2F.%2Fb")
	token := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	if token == nil {
		t.Fatal("no token")
	}
	for _, n := range names {
		c := *client
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		resp, err := c.PostForm(srv.URL+"/ops/actions/trigger", url.Values{"job": {n}, "csrf": {token[1]}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		if target := resolve(t, srv.URL+"/ops/actions/trigger", loc); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(target.Path, "/ops/jobs/") {
			t.Errorf("trigger %q: %d, back to %q", n, resp.StatusCode, loc)
		} else if code, body := get2(t, client, target.String()); code != http.StatusOK || !strings.Contains(body, "<title>"+html.EscapeString("Job "+n)) {
			t.Errorf("trigger %q: back to %q: %d, not its page", n, loc, code)
		}
	}
}

// resolve resolves href against base as a browser does: "." and ".."
// segments, escaped or not, are removed.
func resolve(t *testing.T, base, href string) *url.URL {
	t.Helper()
	b, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	r, err := url.Parse(href)
	if err != nil {
		t.Fatalf("href %q: %v", href, err)
	}
	u := b.ResolveReference(r)
	segs := strings.Split(u.EscapedPath(), "/")
	var out []string
	for i, s := range segs {
		switch strings.ToLower(s) {
		case ".", "%2e":
			if i == len(segs)-1 {
				out = append(out, "")
			}
		case "..", ".%2e", "%2e.", "%2e%2e":
			if len(out) > 1 {
				out = out[:len(out)-1]
			}
			if i == len(segs)-1 {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	u.RawPath = strings.Join(out, "/")
	p, err := url.PathUnescape(u.RawPath)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = p
	return u
}
