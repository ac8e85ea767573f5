package health_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/health"
	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/migrations"
)

// closedPort returns the address of a local port nothing listens on:
// connections to it are refused.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// TestReadyWithUnreachableDatabase: in the recommended setup (a Session on
// a lock.Locker, ForSession, no migrator in the service), readiness fails
// when the database refuses connections, naming it, and reads no
// migration status then; liveness still passes: restarting the process
// would not bring the database back. Before, /readyz and /livez both
// answered 200.
func TestReadyWithUnreachableDatabase(t *testing.T) {
	t.Parallel()
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + closedPort(t) + "/?connectTimeoutMS=200"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	in := newInstance(t, client.Database("unreachable"), "k1", []health.Option{health.WithCheckTimeout(300 * time.Millisecond)})

	code, rep := in.get(health.ReadyPath)
	db, mig := rep.Checks[health.CheckDatabase], rep.Checks[health.CheckMigrations]
	if code != http.StatusServiceUnavailable || db.OK || !strings.Contains(db.Reason, `database "unreachable" did not answer`) {
		t.Fatalf("readiness with the database down: %d %+v", code, rep)
	}
	if mig.OK || !strings.Contains(mig.Reason, "not read") {
		t.Errorf("migrations check with the database down: %+v", mig)
	}
	if code, rep := in.get(health.LivePath); code != http.StatusOK {
		t.Errorf("liveness with the database down: %d %+v, want 200", code, rep)
	}
}

// TestDBReadyNeedsMigrations: with no migrator in the service, readiness
// fails until mongolock's own migrations are applied (a forgotten
// `migrate up` at deploy), and until the program's own, given with
// WithMigrationOptions, are too; then it passes, with the database's
// answer.
func TestDBReadyNeedsMigrations(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := mongotest.NewDatabase(t)
	mine := migrations.EnsureIndex(1, migrations.Index{Collection: "users", Keys: bson.D{{Key: "email", Value: 1}}})
	bare := newInstance(t, db, "k1", []health.Option{health.WithCheckTimeout(10 * time.Second)})
	withMine := newInstance(t, db, "k2", []health.Option{health.WithCheckTimeout(10 * time.Second),
		health.WithMigrationOptions(migrations.WithMigrations(mine))})

	for _, in := range []*instance{bare, withMine} {
		code, rep := in.get(health.ReadyPath)
		ch := rep.Checks[health.CheckMigrations]
		if code != http.StatusServiceUnavailable || ch.OK || !strings.Contains(ch.Reason, "lock collection") {
			t.Fatalf("before any migration: %d %+v", code, rep)
		}
		if d := rep.Checks[health.CheckDatabase]; !d.OK {
			t.Fatalf("database check: %+v", d)
		}
	}
	builtins, err := migrations.New(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := builtins.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if code, rep := bare.get(health.ReadyPath); code != http.StatusOK {
		t.Fatalf("after the module's migrations: %d %+v", code, rep)
	}
	code, rep := withMine.get(health.ReadyPath)
	if ch := rep.Checks[health.CheckMigrations]; code != http.StatusServiceUnavailable || !strings.Contains(ch.Reason, "1 of 4 migrations not applied") {
		t.Fatalf("the program's migration not applied: %d %+v", code, rep)
	}
	all, err := migrations.New(db, migrations.WithMigrations(mine))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := all.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if code, rep := withMine.get(health.ReadyPath); code != http.StatusOK {
		t.Fatalf("after every migration: %d %+v", code, rep)
	}
}

// TestReadyHidesCredentials: what a probe answers quotes text read from
// the database (a failed migration's error, as its migrator stored it),
// which may hold a connection string; the probe's body shows its
// credentials hidden (the structure-based redaction of the dashboard and
// the CLI), never the password.
func TestReadyHidesCredentials(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := mongotest.NewDatabase(t)
	builtins, err := migrations.New(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := builtins.Up(ctx); err != nil {
		t.Fatal(err)
	}
	const pw = "S3cretPw"
	uri := "mongodb://alice:" + pw + "@db.internal:27017/?authMechanismProperties=AWS_SESSION_TOKEN:tok" + pw
	if _, err := db.Collection(migrations.DefaultCollection).UpdateOne(ctx, bson.D{},
		bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: "failed"}, {Key: "error", Value: "dial " + uri + ": refused"}}}}); err != nil {
		t.Fatal(err)
	}
	in := newInstance(t, db, "k1", []health.Option{health.WithCheckTimeout(10 * time.Second)})
	resp, err := http.Get(in.url + health.ReadyPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "failed") {
		t.Fatalf("readiness with a failed migration: %d %s", resp.StatusCode, body)
	}
	if strings.Contains(string(body), pw) || strings.Contains(string(body), "alice") {
		t.Errorf("the probe shows the credentials: %s", body)
	}
	if !strings.Contains(string(body), "mongodb://***@db.internal:27017/") {
		t.Errorf("the probe does not show the redacted URI: %s", body)
	}
}
