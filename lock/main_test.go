package lock_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
)

func TestMain(m *testing.M) { os.Exit(mongotest.Main(m)) }

// newLockers returns n Lockers on one fresh database, each on its own client.
func newLockers(t testing.TB, n int, opts ...lock.Option) ([]*lock.Locker, *mongo.Database) {
	t.Helper()
	db := mongotest.NewDatabase(t)
	out := make([]*lock.Locker, n)
	for i := range out {
		out[i] = onNewClient(t, db.Name(), opts...)
	}
	return out, db
}

func newDB(t testing.TB) string { return mongotest.NewDatabase(t).Name() }

// onNewClient returns a Locker on database dbName through a client of its own.
func onNewClient(t testing.TB, dbName string, opts ...lock.Option) *lock.Locker {
	t.Helper()
	l, err := lock.New(mongotest.Database(t, mongotest.NewClient(t), dbName), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t testing.TB, ctx context.Context, l *lock.Locker, id, kid string) lock.Grant {
	t.Helper()
	lease, ok, err := acquireOne(ctx, l, id, kid)
	if err != nil || !ok {
		t.Fatalf("acquire %q by %q: ok=%v err=%v", id, kid, ok, err)
	}
	return lease
}

// acquireOne takes one lock through the store API.
func acquireOne(ctx context.Context, l *lock.Locker, id, kid string) (lock.Grant, bool, error) {
	a, err := l.AcquireLocks(ctx, kid, id)
	if err != nil || len(a.Granted) == 0 {
		return lock.Grant{}, false, err
	}
	return a.Granted[0], true, nil
}

// releaseOne releases one lock through the store API; ErrNotHeld if kid
// did not hold it.
func releaseOne(ctx context.Context, l *lock.Locker, id, kid string) error {
	n, err := l.ReleaseLocks(ctx, kid, id)
	if err == nil && n == 0 {
		return fmt.Errorf("release %q: %w", id, lock.ErrNotHeld)
	}
	return err
}
