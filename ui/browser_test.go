//go:build unix

package ui_test

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/ui"
)

var (
	shotsDir   = flag.String("ui.shots", "", "directory to save a screenshot of each page in (browser test)")
	readmeShot = flag.String("ui.readme-shot", "", "file to save the README's screenshot of a job's firings to, such as ../docs/ui-job-firings.png (browser test)")
)

// chromiumPath is the browser the tests drive: $MONGOLOCK_CHROMIUM, else
// Debian's chromium, else Google Chrome.
func chromiumPath() (string, error) {
	if p := os.Getenv("MONGOLOCK_CHROMIUM"); p != "" {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p, nil
	}
	return exec.LookPath("google-chrome") // GitHub's runners have Chrome
}

// newBrowser starts headless Chromium with a fresh profile, or skips the
// test with the reason; the test's cleanup stops it.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	path, err := chromiumPath()
	if err != nil {
		t.Skipf("no Chromium to drive (apt-get install chromium, or set MONGOLOCK_CHROMIUM): %v", err)
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Skipf("Chromium at %s does not start: %v", path, err)
	}
	return ctx
}

// demoRun is `mongolock demo --ui` run by this test binary as the command.
type demoRun struct {
	cmd       *exec.Cmd
	lines     chan string
	done      chan struct{} // closed when stdout is read to its end
	mu        sync.Mutex
	out       strings.Builder
	db, url   string
	waitErr   error
	waitedFor chan struct{}
}

// startDemo runs the demo with its dashboard against the test server, and
// returns once it printed the database and the dashboard's address.
func startDemo(t *testing.T, args ...string) *demoRun {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"demo", "--ui"}, args...)...)
	cmd.Env = append(os.Environ(), envRunMain+"=1", "MONGODB_URI="+mongotest.URI())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &demoRun{cmd: cmd, lines: make(chan string, 1024), done: make(chan struct{}), waitedFor: make(chan struct{})}
	go func() {
		defer close(d.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			d.mu.Lock()
			d.out.WriteString(sc.Text() + "\n")
			d.mu.Unlock()
			select {
			case d.lines <- sc.Text():
			default:
			}
		}
	}()
	go func() {
		<-d.done
		d.waitErr = cmd.Wait()
		close(d.waitedFor)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // an error means it ended
		<-d.waitedFor
		if t.Failed() {
			t.Logf("demo output:\n%s", d.output())
		}
	})
	dbRe := regexp.MustCompile(`^\s+database:\s+(\S+)`)
	urlRe := regexp.MustCompile(`^\s+dashboard: (http://\S+)/ `)
	deadline := time.After(60 * time.Second)
	for d.db == "" || d.url == "" {
		select {
		case l := <-d.lines:
			if m := dbRe.FindStringSubmatch(l); m != nil {
				d.db = m[1]
			}
			if m := urlRe.FindStringSubmatch(l); m != nil {
				d.url = m[1]
			}
		case <-d.done:
			t.Fatalf("the demo ended before printing its dashboard:\n%s", d.output())
		case <-deadline:
			t.Fatalf("the demo printed no dashboard in a minute:\n%s", d.output())
		}
	}
	return d
}

func (d *demoRun) output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.String()
}

// waitFor evaluates expr in the tab every 100ms until it is true, across
// navigations (an evaluation that a navigation interrupts is tried again),
// and returns an error if it is not true within timeout.
func waitFor(ctx context.Context, expr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err == nil && ok {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("not true within %v: %s (last error: %v)", timeout, expr, last)
}

// consoleLog keeps the console messages of a tab that are errors.
type consoleLog struct {
	mu   sync.Mutex
	errs []string
}

func watchConsole(ctx context.Context, c *consoleLog) {
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == "error" || m.Type == chromedp.ConsoleException {
				c.mu.Lock()
				c.errs = append(c.errs, string(m.Type)+": "+m.Text+" ("+m.URL+")")
				c.mu.Unlock()
			}
		}
	}()
}

// unexpected returns the errors but those of requests the test expects to
// be refused.
func (c *consoleLog) unexpected(refused ...string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, e := range c.errs {
		ok := false
		for _, r := range refused {
			ok = ok || strings.Contains(e, r)
		}
		if !ok {
			out = append(out, e)
		}
	}
	return out
}

// TestBrowser runs `mongolock demo --ui` and drives its dashboard in
// headless Chromium: every page renders with the cluster's data, the
// overview changes without a reload when the demo kills the leader, the
// read-only dashboard has no action, and a dashboard with actions refuses
// them without authorisation and takes them with it. No page logs a
// console error. With -ui.shots it saves each page; with -ui.readme-shot
// the README's picture of a job's firings.
func TestBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster for half a minute or more")
	}
	browser := newBrowser(t)
	// The test kills the leader (SIGUSR1) once it has seen every page with
	// the three instances up, and ends the demo (SIGUSR2) once done: on a
	// loaded machine the pages take their time.
	demo := startDemo(t, "--duration", "10m", "--kill-after", "0", "--stop-after", "0", "--ttl", "2s")
	base := demo.url
	var console consoleLog

	// Tab 1 stays on the overview and watches it change.
	overview, cancel1 := chromedp.NewContext(browser)
	defer cancel1()
	watchConsole(overview, &console)
	leaderJS := `(() => { for (const tr of document.querySelectorAll('#live tr')) {
		const c = tr.querySelectorAll('td'); if (c.length > 1 && c[0].innerText.trim() === 'demo/leader') return c[1].innerText.trim(); }
		return ''; })()`
	poll := waitFor
	if err := chromedp.Do(overview, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#live"))); err != nil {
		t.Fatalf("overview: %v", err)
	}
	if err := poll(overview, `document.querySelectorAll('#live .o-ran').length >= 3 && `+leaderJS+` !== ''`, 30*time.Second); err != nil {
		t.Fatalf("the overview shows no three instances and a leader: %v", err)
	}
	leader, err := chromedp.Run(overview, chromedp.Evaluate[string](leaderJS))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(overview, chromedp.Evaluate[chromedp.Void](`window.__sameDocument = true`)); err != nil {
		t.Fatal(err)
	}
	t.Logf("leader before the kill: %s", leader)

	// Tab 2 visits every page meanwhile.
	pages, cancel2 := chromedp.NewContext(browser)
	defer cancel2()
	watchConsole(pages, &console)
	visit := func(url string) string {
		t.Helper()
		if err := chromedp.Do(pages, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("main"))); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		text, err := chromedp.Run(pages, chromedp.Text(chromedp.CSS("main")))
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		return text
	}
	shoot := func(name string) {
		t.Helper()
		if *shotsDir == "" {
			return
		}
		png, err := chromedp.Run(pages, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(*shotsDir, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []struct {
		name, path string
		want       []string
	}{
		{"overview", "/", []string{"Instances", "app1/", "app2/", "app3/", "Leaders", "demo/leader"}},
		{"locks", "/locks", []string{"demo/leader", "scheduler/@instance/", "election", "held"}},
		{"lock", "/locks/demo/leader", []string{"Terms", "the term log", "holds it now"}},
		{"elections", "/elections", []string{"demo/leader", "Leader:", "leads now"}},
		{"jobs", "/jobs", []string{"tick", "even-second", "@every 1s", "active", "Last run", "Next firings"}}, // a last run may be running
		{"job", "/jobs/tick", []string{"Spec", "Firings", "History", "ran", "app"}},
		{"migrations", "/migrations", []string{"-1000", "-990", "-980", "applied"}},
	} {
		// What a page shows is read when it is served: an instance whose
		// presence lease lapsed a moment (its renewals slowed by a loaded
		// machine) is missing until it takes it again. Read it again until
		// it shows everything, for a while.
		var text string
		for deadline := time.Now().Add(30 * time.Second); ; {
			text = visit(base + p.path)
			missing := slices.DeleteFunc(slices.Clone(p.want), func(w string) bool { return strings.Contains(text, w) })
			if len(missing) == 0 {
				break
			}
			if time.Now().After(deadline) {
				for _, w := range missing {
					t.Errorf("%s: no %q on the page:\n%.2000s", p.path, w, text)
				}
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		n, err := chromedp.Run(pages, chromedp.Evaluate[int](`document.querySelectorAll('form[method=post]').length`))
		if err != nil || n != 0 {
			t.Errorf("%s: %d forms that post on a read-only dashboard (%v)", p.path, n, err)
		}
		shoot(p.name)
		if p.name == "job" {
			// The timeline is a picture with a mark per firing, each a
			// link the keyboard reaches.
			// The page updates itself as the firings come.
			if err := waitFor(pages, `document.querySelectorAll('svg.tl a .mk').length >= 3`, 20*time.Second); err != nil {
				t.Errorf("the timeline has not three marks: %v", err)
			}
		}
	}
	// A read-only dashboard has no action endpoint.
	status, err := chromedp.Run(pages, chromedp.Evaluate[int](`fetch('/actions/pause', {method: 'POST', body: new URLSearchParams({job: 'tick'})}).then(r => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil || (status != http.StatusNotFound && status != http.StatusMethodNotAllowed) {
		t.Errorf("POST /actions/pause on the read-only dashboard: %d (%v)", status, err)
	}

	// The overview, never reloaded, shows the failover the demo causes.
	if err := demo.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatalf("kill the leader: %v", err)
	}
	// The killed leader's instance shows its lease lapsed, or is gone
	// from the list once another instance took its pending claim over
	// (which takes its presence lock, and releases it).
	killedUp := fmt.Sprintf(`[...document.querySelectorAll('#live tr')].some(tr => { const c = tr.querySelectorAll('td');
		return c.length > 1 && c[0].innerText.trim().startsWith(%q) && c[1].innerText.includes('up'); })`, leader+"/")
	changed := fmt.Sprintf(`window.__sameDocument === true && %s !== '' && %s !== %q && !%s`, leaderJS, leaderJS, leader, killedUp)
	if err := poll(overview, changed, 30*time.Second); err != nil {
		t.Fatalf("the overview did not show the failover after the kill: %v\n%s", err, demo.output())
	}
	now, _ := chromedp.Run(overview, chromedp.Evaluate[string](leaderJS))
	t.Logf("leader after the kill: %s", now)
	if *shotsDir != "" {
		if png, err := chromedp.Run(overview, chromedp.FullScreenshot(100)); err == nil {
			_ = os.WriteFile(filepath.Join(*shotsDir, "overview-after-kill.png"), png, 0o644)
		}
	}

	testBrowserActions(t, pages, demo.db)

	if *readmeShot != "" {
		// The job's facts and its timeline, without the filters, the table
		// and the live updates' controls.
		visit(base + "/jobs/tick")
		err := chromedp.Do(pages, chromedp.Evaluate[chromedp.Void](`document.getElementById('live-toggle').click();
			for (const e of document.querySelectorAll('.filters, .readat, .skip-inline, #h-hist, #h-hist ~ *, footer')) e.style.display = 'none'`))
		if err != nil {
			t.Fatal(err)
		}
		png, err := chromedp.Run(pages, chromedp.Screenshot(chromedp.CSS("main")))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(*readmeShot, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	if errs := console.unexpected("/actions/"); len(errs) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(errs, "\n"))
	}
	if err := demo.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatalf("end the demo: %v", err)
	}
	select {
	case <-demo.waitedFor:
	case <-time.After(90 * time.Second):
		t.Fatal("the demo did not end")
	}
	if demo.waitErr != nil || !strings.Contains(demo.output(), "OK: no firing ran twice.") {
		t.Errorf("the demo with --ui failed: %v", demo.waitErr)
	}
}

// testBrowserActions drives a dashboard with actions on the demo's
// database: a pause is refused without authorisation, and taken, recorded
// and shown with it.
func testBrowserActions(t *testing.T, tab context.Context, dbName string) {
	db := mongotest.Database(t, mongotest.NewClient(t), dbName)
	h, err := ui.New(db, ui.WithActions(func(r *http.Request, a ui.Action) error {
		c, err := r.Cookie("operator")
		if err != nil || c.Value != "alice" {
			return errors.New("sign in first")
		}
		ui.SetOperator(r, c.Value)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	// landed waits for the page an action's form leads to.
	landed := func(what string) {
		t.Helper()
		err := waitFor(tab, `document.readyState === 'complete' && (!!document.querySelector('.flash') || (!!document.querySelector('main h1') && document.querySelector('main h1').innerText !== 'Job tick'))`, 20*time.Second)
		if err != nil {
			t.Fatalf("%s: no page after the form: %v", what, err)
		}
	}
	pause := func() string {
		t.Helper()
		err := chromedp.Do(tab,
			chromedp.Navigate(srv.URL+"/jobs/tick"),
			chromedp.WaitVisible(chromedp.CSS("#a-note")),
			chromedp.SendKeys(chromedp.CSS("#a-note"), "from the browser test"),
			chromedp.SendKeys(chromedp.CSS("#a-until"), "1h"),
			chromedp.Click(chromedp.CSS(`form[action="/actions/pause"] button`)),
		)
		if err != nil {
			t.Fatalf("pause: %v", err)
		}
		landed("pause")
		text, err := chromedp.Run(tab, chromedp.Text(chromedp.CSS("main")))
		if err != nil {
			t.Fatal(err)
		}
		return text
	}
	if text := pause(); !strings.Contains(text, "not allowed: sign in first") {
		t.Errorf("a pause without authorisation was not refused:\n%.1000s", text)
	}
	if err := chromedp.Do(tab, chromedp.Evaluate[chromedp.Void](`document.cookie = 'operator=alice; path=/'`)); err != nil {
		t.Fatal(err)
	}
	text := pause()
	for _, w := range []string{"Paused: every instance", "paused by alice", "from the browser test", "by alice"} {
		if !strings.Contains(text, w) {
			t.Errorf("after the pause: no %q:\n%.1500s", w, text)
		}
	}
	if *shotsDir != "" {
		if png, err := chromedp.Run(tab, chromedp.FullScreenshot(100)); err == nil {
			_ = os.WriteFile(filepath.Join(*shotsDir, "job-with-actions.png"), png, 0o644)
		}
	}
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(`form[action="/actions/resume"] button`))); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(tab, `!!document.querySelector('.flash') && document.querySelector('.flash').innerText.startsWith('Resumed')`, 20*time.Second); err != nil {
		t.Errorf("no resume: %v", err)
	}
}
