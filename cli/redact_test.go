package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/scheduler"
)

// probeURI and probeNote are issue 28's: quoted fragments of the password
// in a note must show as any other fragment does, or a viewer learns the
// password by bisection.
const (
	probeURI  = "mongodb://alice:S3cretPw@127.0.0.1:27099/?authMechanism=PLAIN&authSource=$external"
	probeNote = `probe "S" "3" "q" "S3c" "XYZ" "cret" "Pw" "ice:S" "zz" "2026"`
)

func TestRedactProbeNote(t *testing.T) {
	t.Parallel()
	r := newRedactor(probeURI)
	for _, s := range []string{probeNote, `scheme must be "mongodb" or "mongodb+srv"`, "S3cretPw", "alice:S3cretPw"} {
		if got := r.oneLine(s); got != s {
			t.Errorf("oneLine(%q) = %q: text with no URI in it is changed", s, got)
		}
	}
	// Of a mangled URI, the old redactor hid the driver's own words.
	msg := `invalid URI: scheme must be "mongodb" or "mongodb+srv"`
	if got := newRedactor("mongodb:/u:pw@host").oneLine(msg); got != msg {
		t.Errorf("oneLine(%q) = %q", msg, got)
	}
	// The URI itself, in text, is hidden by its structure.
	if got := r.oneLine("dial " + probeURI + ": refused"); strings.Contains(got, "S3cretPw") || strings.Contains(got, "alice") {
		t.Errorf("oneLine kept the credentials: %q", got)
	}
}

// TestSecretsFromTheDatabase: credentials in what the database holds (a
// run's error, a pause's note and its author, keeper and lock ids) are
// printed by no command, as text or JSON.
func TestSecretsFromTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, g := on(t)
	const secret = "S3cretPw"
	uri := "mongodb://alice:" + secret + "@db.internal:27017/?authMechanismProperties=AWS_SESSION_TOKEN:" + secret + "2"
	now := time.Now().UTC().Truncate(time.Millisecond)
	_, err := db.Collection(scheduler.DefaultJobsCollection).InsertOne(ctx, bson.D{
		{Key: "_id", Value: "nightly"}, {Key: "spec", Value: "0 3 * * *"}, {Key: "last", Value: now}, {Key: "by", Value: uri},
		{Key: "keeper", Value: uri}, {Key: "scheduled", Value: now}, {Key: "start", Value: now}, {Key: "end", Value: now.Add(time.Second)},
		{Key: "outcome", Value: "failed"}, {Key: "error", Value: "dial " + uri + ": refused"},
		{Key: "regs", Value: bson.D{{Key: "0 3 * * *", Value: bson.D{{Key: "by", Value: uri}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := scheduler.PauseJob(ctx, db.Collection(scheduler.DefaultJobsCollection), "nightly",
		scheduler.Pause{Note: "see " + uri, By: "op " + uri}); err != nil {
		t.Fatal(err)
	}
	_, err = db.Collection(scheduler.DefaultRunsCollection).InsertOne(ctx, bson.D{
		{Key: "_id", Value: "nightly@1"}, {Key: "job", Value: "nightly"}, {Key: "keeper", Value: uri},
		{Key: "scheduled", Value: now}, {Key: "start", Value: now}, {Key: "end", Value: now.Add(time.Second)},
		{Key: "outcome", Value: "failed"}, {Key: "error", Value: "dial " + uri + ": refused"}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := lock.New(db, lock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	presence := scheduler.DefaultLockPrefix + "@instance/" + scheduler.DefaultJobsCollection + "/" + uri
	if _, ok, err := acquireAs(ctx, l, presence, uri); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	g = args(g, "--ttl", "1m")
	for _, cmd := range [][]string{
		{"jobs"}, {"jobs", "--history", "5"}, {"jobs", "--json", "--history", "5"}, {"jobs", "nightly"},
		{"locks"}, {"locks", "list", "--json"}, {"locks", "show", presence}, {"locks", "show", "--json", presence},
	} {
		r := cli(t, args(g, cmd...)...)
		wantOK(t, r)
		if strings.Contains(r.stdout+r.stderr, secret) || strings.Contains(r.stdout+r.stderr, "alice") {
			t.Errorf("%s prints the credentials:\n%s%s", strings.Join(cmd, " "), r.stdout, r.stderr)
		}
		if !strings.Contains(r.stdout, "mongodb://***@db.internal:27017/") {
			t.Errorf("%s: no redacted URI:\n%s", strings.Join(cmd, " "), r.stdout)
		}
	}
}
