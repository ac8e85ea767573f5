package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/migrations"
)

// TestMigrateDefaultDatabase: WithDatabase sets the database the commands
// act on without --db (a program's own, not "mongolock"), --db still
// overrides it, and every command that connects names the database it
// acted on, in one log line on stderr; the library's fallback, with
// neither, is named at warning level. Before, `billing migrate up`
// migrated "mongolock" without saying so.
func TestMigrateDefaultDatabase(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, other := mongotest.NewDatabase(t), mongotest.NewDatabase(t)
	uri := []string{"--uri", mongotest.URI(), "--ttl", "2s"}
	run := func(opts []Option, a ...string) result {
		var out, errb bytes.Buffer
		code := Run(ctx, a, append([]Option{WithStdio(strings.NewReader(""), &out, &errb)}, opts...)...)
		return result{code: code, stdout: out.String(), stderr: errb.String()}
	}
	names := func(r result, db, level string) {
		t.Helper()
		var n int
		for l := range strings.Lines(r.stderr) {
			if strings.Contains(l, `"db":"`+db+`"`) && strings.Contains(l, `"level":"`+level+`"`) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("stderr names database %q at %s %d times, want once:\n%s", db, level, n, r.stderr)
		}
	}
	mine := []Option{WithDatabase(db.Name())}

	r := run(mine, args(uri, "migrate", "up")...)
	wantOK(t, r)
	names(r, db.Name(), "info")
	if n, err := db.Collection(migrations.DefaultCollection).CountDocuments(ctx, bson.D{}); err != nil || n == 0 {
		t.Fatalf("migrate up without --db recorded %d migrations in the program's database (%v)", n, err)
	}
	for _, cmd := range [][]string{{"migrate", "status"}, {"locks", "list"}, {"jobs"}} {
		r := run(mine, args(uri, cmd...)...)
		wantOK(t, r)
		names(r, db.Name(), "info")
	}
	r = run(mine, args(uri, "--db", other.Name(), "locks", "list")...)
	wantOK(t, r)
	names(r, other.Name(), "info")
	r = run(nil, args(uri, "locks", "list")...)
	wantOK(t, r)
	names(r, defaultDB, "warn")
}
