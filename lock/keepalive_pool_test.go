package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/wirefault"
	"github.com/mongolock/mongolock/lock"
)

// busyPool returns a database on a client with a pool of one connection,
// and a function that takes that connection with a command that does not
// end until the test ends: the application's own commands using up the
// pool.
func busyPool(t *testing.T, dbName string) (*mongo.Database, func()) {
	t.Helper()
	taken := make(chan struct{}, 1)
	release := make(chan struct{})
	hold := wirefault.RuleFuncs{OnRequest: func(cmd bson.D) (bson.D, bson.D) {
		if len(cmd) > 0 && cmd[0].Key == "find" && cmd[0].Value == "busy" {
			taken <- struct{}{}
			<-release
		}
		return nil, nil
	}}
	client := mongotest.NewRewrittenClient(t, []wirefault.Rule{hold}, options.Client().SetMaxPoolSize(1))
	db := mongotest.Database(t, client, dbName)
	t.Cleanup(func() { close(release) }) // before the client disconnects (cleanups run last first)
	take := func() {
		go func() { _ = db.Collection("busy").FindOne(context.Background(), bson.D{}).Err() }()
		<-taken
	}
	return db, take
}

// TestRenewOnTheKeepAlivesOwnClient: with every connection of the
// application's client taken, Renew through the keep-alive's client
// (WithKeepAliveDatabase) still renews; without it, it waits for a
// connection until its context ends.
func TestRenewOnTheKeepAlivesOwnClient(t *testing.T) {
	t.Parallel()
	dbName := newDB(t)
	ctx := testCtx(t, 30*time.Second)

	app, take := busyPool(t, dbName)
	keepAlive := mongotest.Database(t, mongotest.NewClient(t, options.Client().SetMaxPoolSize(2)), dbName)
	own, err := lock.New(app, lock.WithKeepAliveDatabase(keepAlive))
	if err != nil {
		t.Fatal(err)
	}
	shared, err := lock.New(app)
	if err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, ctx, own, "a", "k")
	take()

	r, err := own.Renew(ctx, "k", "a")
	if err != nil || len(r.Held) != 1 {
		t.Fatalf("renew through the keep-alive's client: %+v, %v", r, err)
	}
	// The pool stays taken until the test ends: the shared Locker's renew
	// can only give up.
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := shared.Renew(sctx, "k", "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("renew through the busy pool: %v, want it to wait for a connection until its deadline", err)
	}
}

func TestKeepAliveDatabaseRefused(t *testing.T) {
	t.Parallel()
	client := mongotest.NewClient(t)
	for _, tc := range []struct {
		db   *mongo.Database
		want string
	}{
		{nil, "WithKeepAliveDatabase: nil database"},
		{client.Database("other"), `WithKeepAliveDatabase: database "other" is not the Locker's database "app"`},
	} {
		_, err := lock.New(client.Database("app"), lock.WithKeepAliveDatabase(tc.db))
		if !errors.Is(err, lock.ErrInvalidOption) || err.Error() != "lock: invalid option: "+tc.want {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}
