package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/scheduler"
)

// addJob inserts the document of a job, as a Scheduler's Start makes it.
func addJob(t *testing.T, db *mongo.Database, name, spec string) {
	t.Helper()
	_, err := db.Collection(scheduler.DefaultJobsCollection).InsertOne(context.Background(),
		bson.D{{Key: "_id", Value: name}, {Key: "spec", Value: spec}, {Key: "last", Value: time.Unix(0, 0)}})
	if err != nil {
		t.Fatal(err)
	}
}

// jobsJSON runs jobs --json with rest and decodes its output.
func jobsJSON(t *testing.T, g []string, rest ...string) []jobJSON {
	t.Helper()
	r := cli(t, args(g, append([]string{"jobs", "--json"}, rest...)...)...)
	wantOK(t, r)
	var out []jobJSON
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("jobs --json: %v\n%s", err, r.stdout)
	}
	return out
}

// line returns the line of out that begins with prefix.
func line(t *testing.T, out, prefix string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("no line begins with %q:\n%s", prefix, out)
	return ""
}

func TestJobsControl(t *testing.T) {
	t.Parallel()
	db, g := on(t)
	addJob(t, db, "nightly", "0 3 * * *")
	addJob(t, db, "pause", "@every 1h") // named like a verb
	serverNow, err := mongoutil.ServerTime(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}

	// Listed before any control: active, next firing at 03:00.
	r := cli(t, args(g, "jobs")...)
	wantOK(t, r)
	if l := line(t, r.stdout, "nightly "); !regexp.MustCompile(`^nightly\s+0 3 \* \* \*\s+\S+T03:00:00.000Z\s+active\s`).MatchString(l) {
		t.Errorf("nightly before any control: %q", l)
	}

	// Paused for 30 hours: the next firing is the first at or after then.
	r = cli(t, args(g, "jobs", "pause", "nightly", "--note", "deploy freeze", "--until", "30h")...)
	wantOK(t, r)
	if !strings.HasPrefix(r.stdout, `paused "nightly" on every instance until `) {
		t.Errorf("pause output: %q", r.stdout)
	}
	jobs := jobsJSON(t, g, "nightly")
	if len(jobs) != 1 || jobs[0].Paused == nil || jobs[0].Paused.Note != "deploy freeze" || jobs[0].Paused.At == "" {
		t.Fatalf("paused job: %+v", jobs)
	}
	until, err := time.Parse(timeFormat, jobs[0].Paused.Until)
	if err != nil || until.Sub(serverNow) < 29*time.Hour || until.Sub(serverNow) > 31*time.Hour {
		t.Fatalf("until %q (%v), server time %v", jobs[0].Paused.Until, err, serverNow)
	}
	wantNext, _ := scheduler.NextFiring("0 3 * * *", until.Add(-time.Nanosecond), time.UTC)
	if jobs[0].NextFiring != jsonTime(wantNext) {
		t.Errorf("next firing while paused until %v: %q, want %v", until, jobs[0].NextFiring, wantNext)
	}
	r = cli(t, args(g, "jobs", "nightly")...)
	wantOK(t, r)
	if l := line(t, r.stdout, "nightly "); !strings.Contains(l, `paused until `+fmtTime(until)+` "deploy freeze"`) ||
		!strings.Contains(l, fmtTime(wantNext)) {
		t.Errorf("paused job's line: %q", l)
	}

	// Paused with no end: no next firing.
	wantOK(t, cli(t, args(g, "jobs", "pause", "nightly")...))
	jobs = jobsJSON(t, g, "nightly")
	if jobs[0].Paused == nil || jobs[0].Paused.Note != "" || jobs[0].Paused.Until != "" || jobs[0].NextFiring != "" {
		t.Errorf("paused with no end: %+v %+v", jobs[0], jobs[0].Paused)
	}
	r = cli(t, args(g, "jobs", "nightly")...)
	if l := line(t, r.stdout, "nightly "); !strings.Contains(l, "- (paused)") {
		t.Errorf("paused job's line: %q", l)
	}

	// Two triggers: one request. No instance runs here: the output does not
	// promise a run within a poll interval alone.
	r = cli(t, args(g, "jobs", "trigger", "nightly")...)
	wantOK(t, r)
	if !strings.HasPrefix(r.stdout, `triggered "nightly"`) || !strings.Contains(r.stdout, "when one starts") {
		t.Errorf("trigger output: %q", r.stdout)
	}
	r = cli(t, args(g, "jobs", "trigger", "nightly")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "already has a trigger waiting") {
		t.Errorf("second trigger output: %q", r.stdout)
	}
	if jobs = jobsJSON(t, g, "nightly"); jobs[0].Triggered == "" {
		t.Errorf("trigger not listed: %+v", jobs[0])
	}

	// Removed: no next firing, no trigger.
	r = cli(t, args(g, "jobs", "remove", "nightly")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "mongolock jobs resume nightly undoes it") {
		t.Errorf("remove output: %q", r.stdout)
	}
	wantErr(t, cli(t, args(g, "jobs", "trigger", "nightly")...), ExitFailure, `trigger "nightly"`, "job removed")
	jobs = jobsJSON(t, g, "nightly")
	if !jobs[0].Removed || jobs[0].Triggered != "" || jobs[0].NextFiring != "" {
		t.Errorf("removed job: %+v", jobs[0])
	}
	r = cli(t, args(g, "jobs")...)
	if l := line(t, r.stdout, "nightly "); !strings.Contains(l, "- (removed)") || !strings.Contains(l, "removed; paused") {
		t.Errorf("removed job's line: %q", l)
	}

	// Resumed: as before.
	r = cli(t, args(g, "jobs", "resume", "nightly")...)
	wantOK(t, r)
	jobs = jobsJSON(t, g, "nightly")
	if jobs[0].Removed || jobs[0].Paused != nil || jobs[0].NextFiring == "" {
		t.Errorf("resumed job: %+v", jobs[0])
	}

	// A job named like a verb is listed after "--".
	r = cli(t, args(g, "jobs", "--", "pause")...)
	wantOK(t, r)
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], "pause ") {
		t.Errorf("jobs -- pause:\n%s", r.stdout)
	}
	wantOK(t, cli(t, args(g, "jobs", "pause", "pause")...))
	if jobs = jobsJSON(t, g, "--", "pause"); len(jobs) != 1 || jobs[0].Paused == nil {
		t.Errorf("job pause after jobs pause pause: %+v", jobs)
	}

	// Bad input writes nothing.
	wantErr(t, cli(t, args(g, "jobs", "pause", "nightly", "--until", "2020-01-01T00:00:00Z")...), ExitUsage,
		`pause "nightly" until 2020-01-01T00:00:00Z: not after the server's time`)
	wantErr(t, cli(t, args(g, "jobs", "pause", "nightly", "--note", strings.Repeat("x", scheduler.MaxPauseNote+1))...), ExitUsage,
		"note of 1025 bytes")
	if jobs = jobsJSON(t, g, "nightly"); jobs[0].Paused != nil {
		t.Errorf("refused pause paused: %+v", jobs[0].Paused)
	}

	// Unknown jobs.
	for _, verb := range []string{"pause", "resume", "trigger", "remove"} {
		wantErr(t, cli(t, args(g, "jobs", verb, "nope")...), ExitFailure,
			verb+` "nope"`, "unknown job", db.Name()+"."+scheduler.DefaultJobsCollection)
	}
	wantErr(t, cli(t, args(g, "jobs", "nope")...), ExitFailure, `unknown job "nope": not in `+db.Name()+"."+scheduler.DefaultJobsCollection)
	wantErr(t, cli(t, args(g, "jobs", "nightly", "nope", "gone")...), ExitFailure, `unknown jobs "nope", "gone"`)

	// A verb comes first, flags aside; a flag of the listing is no flag of
	// the verb's.
	wantOK(t, cli(t, args(g[:2], "jobs", "--db", db.Name(), "trigger", "--ttl", "2s", "nightly")...))
	if jobs = jobsJSON(t, g, "nightly"); jobs[0].Triggered == "" {
		t.Errorf("jobs --db D trigger nightly did not trigger: %+v", jobs[0])
	}
	wantErr(t, cli(t, args(g, "jobs", "--json", "resume", "nightly")...), ExitUsage, "-json")
	wantErr(t, cli(t, args(g, "jobs", "nightly", "resume")...), ExitFailure, `unknown job "resume"`)
}

// TestJobsRegisteredControl: a job the program registers but no instance
// started has no document to control, and the error says so.
func TestJobsRegisteredControl(t *testing.T) {
	t.Parallel()
	_, g := on(t)
	var out, errb bytes.Buffer
	code := Run(context.Background(), args(g, "jobs", "pause", "weekly"), WithName("myapp"), WithStdio(nil, &out, &errb),
		WithJobs(Job{Name: "weekly", Spec: "@weekly"}))
	if code != ExitFailure || !strings.Contains(errb.String(), "myapp registers it, but no instance has started with it yet") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
	out.Reset()
	errb.Reset()
	code = Run(context.Background(), args(g, "jobs", "nope"), WithName("myapp"), WithStdio(nil, &out, &errb),
		WithJobs(Job{Name: "weekly", Spec: "@weekly"}))
	if code != ExitFailure || !strings.Contains(errb.String(), `unknown job "nope"`) || !strings.Contains(errb.String(), "nor registered by myapp") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

// TestJobsHistory: records of firings not run and retried runs are shown,
// and complete in JSON.
func TestJobsHistory(t *testing.T) {
	t.Parallel()
	db, g := on(t)
	ctx := context.Background()
	addJob(t, db, "nightly", "0 3 * * *")
	day := time.Date(2030, 1, 1, 3, 0, 0, 0, time.UTC)
	_, err := db.Collection(scheduler.DefaultRunsCollection).InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "nightly@1"}, {Key: "job", Value: "nightly"}, {Key: "keeper", Value: "k1"},
			{Key: "scheduled", Value: day}, {Key: "outcome", Value: "skipped"}, {Key: "through", Value: day.AddDate(0, 0, 2)},
			{Key: "count", Value: 3}, {Key: "reason", Value: "paused"}},
		bson.D{{Key: "_id", Value: "nightly@2"}, {Key: "job", Value: "nightly"}, {Key: "keeper", Value: "k2"},
			{Key: "scheduled", Value: day.AddDate(0, 0, 3)}, {Key: "start", Value: day.AddDate(0, 0, 3).Add(time.Second)},
			{Key: "end", Value: day.AddDate(0, 0, 3).Add(3 * time.Second)}, {Key: "outcome", Value: "succeeded"},
			{Key: "attempt", Value: 2}, {Key: "triggered", Value: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := cli(t, args(g, "jobs", "--history", "5")...)
	wantOK(t, r)
	for _, w := range []string{"nightly: last 5 runs", "skipped", "3 firings through 2030-01-03T03:00:00.000Z: paused",
		"succeeded (attempt 2) (triggered)", "2s"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("history lacks %q:\n%s", w, r.stdout)
		}
	}
	jobs := jobsJSON(t, g, "--history", "5")
	if len(jobs) != 1 || len(jobs[0].History) != 2 {
		t.Fatalf("history: %+v", jobs)
	}
	h := jobs[0].History
	if h[0].Attempt != 2 || !h[0].Triggered || h[0].Outcome != "succeeded" {
		t.Errorf("retried run: %+v", h[0])
	}
	if h[1].Outcome != "skipped" || h[1].Count != 3 || h[1].Reason != "paused" || h[1].Through != "2030-01-03T03:00:00.000Z" || h[1].Attempt != 1 {
		t.Errorf("skipped record: %+v", h[1])
	}
}

// TestJobsBadDocuments: a job document or run record that cannot be read
// (a run without its firing, wrong-typed fields) is named on stderr, and
// the listing and the history go on with the others (a run without
// scheduled panicked jobs J --history, and last: "x" failed the listing).
func TestJobsBadDocuments(t *testing.T) {
	t.Parallel()
	db, g := on(t)
	ctx := context.Background()
	addJob(t, db, "nightly", "0 3 * * *")
	day := time.Date(2030, 1, 1, 3, 0, 0, 0, time.UTC)
	if _, err := db.Collection(scheduler.DefaultJobsCollection).InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "broken"}, {Key: "last", Value: "x"}},
		bson.D{{Key: "_id", Value: "odd"}, {Key: "spec", Value: "@daily"}, {Key: "outcome", Value: 7}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection(scheduler.DefaultRunsCollection).InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "nightly@none"}, {Key: "job", Value: "nightly"}, {Key: "outcome", Value: "succeeded"}},
		bson.D{{Key: "_id", Value: "nightly@x"}, {Key: "job", Value: "nightly"}, {Key: "scheduled", Value: "x"}},
		bson.D{{Key: "_id", Value: "nightly@1"}, {Key: "job", Value: "nightly"}, {Key: "keeper", Value: "k1"},
			{Key: "scheduled", Value: day}, {Key: "start", Value: day}, {Key: "outcome", Value: "succeeded"}},
	}); err != nil {
		t.Fatal(err)
	}
	for _, rest := range [][]string{{"jobs", "--history", "5"}, {"jobs", "nightly", "broken", "--history", "5"}, {"jobs", "--json", "--history", "5"}} {
		r := cli(t, args(g, rest...)...)
		wantOK(t, r)
		if !strings.Contains(r.stdout, "nightly") || !strings.Contains(r.stdout, "k1") {
			t.Errorf("%v: the good job and its run are not listed:\n%s", rest, r.stdout)
		}
		want := []string{"mongolock_runs nightly@none scheduled", "mongolock_runs nightly@x scheduled", "mongolock_jobs broken last"}
		if rest[1] != "nightly" {
			want = append(want, "mongolock_jobs odd outcome")
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
			var e struct{ Level, Message, Collection, ID, Field, Problem string }
			if err := json.Unmarshal([]byte(l), &e); err == nil && e.Message == "connected" {
				continue // the line naming the database (every command's)
			}
			if err := json.Unmarshal([]byte(l), &e); err != nil || e.Level != "warn" || e.Problem == "" {
				t.Errorf("%v: stderr line %q: want a warning with a problem", rest, l)
			}
			got = append(got, e.Collection+" "+e.ID+" "+e.Field)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%v: warned of %q, want %q", rest, got, want)
		}
	}
}

func TestJobsHelp(t *testing.T) {
	t.Parallel()
	r := cli(t, "jobs", "-h")
	if r.code != ExitOK || !strings.Contains(r.stdout, "-tz") || !strings.Contains(r.stdout, "jobs -- pause") {
		t.Errorf("jobs -h: %v", r)
	}
	r = cli(t, "jobs", "--db", "x", "help")
	for _, w := range []string{"jobs [JOB...]", "jobs pause JOB [--note TEXT] [--until TIME]", "jobs resume JOB", "jobs trigger JOB", "jobs remove JOB", "jobs -- pause"} {
		if r.code != ExitOK || !strings.Contains(r.stdout, w) {
			t.Errorf("jobs help lacks %q: %v", w, r)
		}
	}
	r = cli(t, "jobs", "pause", "-h")
	if r.code != ExitOK || !strings.Contains(r.stdout, "-until") || !strings.Contains(r.stdout, "RFC 3339") {
		t.Errorf("jobs pause -h: %v", r)
	}
	r = cli(t, "-h")
	for _, w := range []string{"jobs [JOB...]", "jobs pause JOB", "jobs remove JOB"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("help lacks %q:\n%s", w, r.stdout)
		}
	}
}

// TestJobsOrphaned: a job that no instance up is known to register (the
// last registrant of each of its specs is gone) is flagged orphaned; one
// whose registrant holds its presence lease is active.
func TestJobsOrphaned(t *testing.T) {
	t.Parallel()
	db, g := on(t)
	ctx := context.Background()
	for name, keeper := range map[string]string{"gone": "dead", "alive": "live"} {
		_, err := db.Collection(scheduler.DefaultJobsCollection).InsertOne(ctx, bson.D{{Key: "_id", Value: name},
			{Key: "spec", Value: "@every 1h"}, {Key: "last", Value: time.Unix(0, 0)},
			{Key: "regs", Value: bson.D{{Key: "k", Value: bson.D{{Key: "spec", Value: "@every 1h"}, {Key: "by", Value: keeper}}}}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	locker, err := lock.New(db, lock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	session, err := lock.NewSession(locker, lock.WithKeeperID("live"))
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	if tk, err := session.AcquireLocks(ctx, scheduler.DefaultLockPrefix+"@instance/"+scheduler.DefaultJobsCollection+"/live/ab12"); err != nil || len(tk.Leases) != 1 {
		t.Fatalf("presence lock: %+v %v", tk, err)
	}
	r := cli(t, args(g, "jobs")...)
	wantOK(t, r)
	if l := line(t, r.stdout, "gone "); !strings.Contains(l, "orphaned: no instance up registers it") {
		t.Errorf("gone: %q, want orphaned", l)
	}
	if l := line(t, r.stdout, "alive "); !regexp.MustCompile(`\sactive\s`).MatchString(l) {
		t.Errorf("alive: %q, want active", l)
	}
	for _, j := range jobsJSON(t, g) {
		if j.Orphaned != (j.Job == "gone") {
			t.Errorf("jobs --json: %s orphaned %v", j.Job, j.Orphaned)
		}
	}
}
