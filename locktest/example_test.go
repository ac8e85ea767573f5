package locktest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/devserver"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/scheduler"
)

// Test a leader task without a database: the runner takes its lock from
// the in-memory store, on a fake clock. While renewals succeed the task
// leads; when the database goes away, the task's context is cancelled
// with lock.ErrLeaseLost at the renew deadline, before anyone else could
// take the lock over.
func Example() {
	clk := clockwork.NewFakeClock()
	store := locktest.New(locktest.WithClock(clk)) // TTL 30s: renew every 10s, trust 20s
	renewed := make(chan lock.Event, 10)
	session, err := lock.NewSession(store, lock.WithKeeperID("me"),
		lock.WithObserver(lock.ObserverFunc(func(e lock.Event) {
			if e.Kind == lock.Renewed {
				renewed <- e
			}
		})))
	if err != nil {
		panic(err)
	}
	defer session.Close()
	leader, err := runner.New(session, "report-leader")
	if err != nil {
		panic(err)
	}

	leases, stopped := make(chan *lock.Lease, 1), make(chan time.Time, 1)
	go leader.RunTaskOnLeader(context.Background(), func(ctx context.Context) error {
		lease, _ := lock.LeaseFrom(ctx)
		leases <- lease
		<-ctx.Done() // the task under test: it stops when told to
		if errors.Is(context.Cause(ctx), lock.ErrLeaseLost) {
			stopped <- lease.Deadline()
		}
		return nil
	})
	lease := <-leases
	// To the first renewal, a second at a time: the keep-alive's timer and
	// the task's are set in no fixed order, and the clock may have moved
	// on a little by the time the renewal is seen, so what is printed is
	// told by the renewal itself.
	var e lock.Event
	advanceUntil(clk, func() bool { return receive(renewed, &e) })
	fmt.Println("leading after the first renewal:", leader.IsLeader(), store.HeldBy("report-leader"))
	fmt.Println("the renewal trusts the lease for", e.Took+e.Remaining, "from its sending")

	store.Fail(locktest.OpRenew, locktest.Always, nil) // the database goes away
	last := lease.Deadline()                           // what the last renewal gave
	var at time.Time
	advanceUntil(clk, func() bool { return receive(stopped, &at) })
	fmt.Println("task told to stop at the deadline of the last renewal:", at.Equal(last))
	fmt.Println("leading:", leader.IsLeader())
	// Output:
	// leading after the first renewal: true me
	// the renewal trusts the lease for 20s from its sending
	// task told to stop at the deadline of the last renewal: true
	// leading: false
}

// Test a scheduled job: the scheduler keeps its claims and runs in a
// database (here the public test server, devserver), and takes the job's
// lock from the in-memory store, whose fake clock also drives the
// schedule. The job learns that another instance took its lock over from
// its context.
func Example_scheduledJob() {
	ctx := context.Background()
	db, cleanup := testDatabase(ctx)
	defer cleanup()

	clk := clockwork.NewFakeClock()
	store := locktest.New(locktest.WithClock(clk))
	session, err := lock.NewSession(store)
	if err != nil {
		panic(err)
	}
	defer session.Close()
	s, err := scheduler.New(db, session)
	if err != nil {
		panic(err)
	}
	started, stopped := make(chan uint64, 1), make(chan error, 1)
	err = s.AddJob("nightly-report", "@every 1m", func(ctx context.Context) error {
		run, _ := scheduler.RunFromContext(ctx)
		started <- run.Fence
		<-ctx.Done() // the job under test: it stops when told to
		stopped <- context.Cause(ctx)
		return context.Cause(ctx)
	})
	if err != nil {
		panic(err)
	}
	if err := s.Start(); err != nil {
		panic(err)
	}
	defer s.Stop(ctx)

	// To the first firing in one step, once the Session's keep-alive, the
	// scheduler's loop and its poll all wait on the clock (a jump between
	// the loop's reading of the clock and its setting of a timer would
	// make the timer fire a minute late): the claim and the start are then
	// written to the database in real time, with the clock still.
	advanceBy(clk, 3, time.Minute)
	fence := <-started
	fmt.Println("running with a fence:", fence > 0)
	store.TakeOver(s.LockID("nightly-report"), "other-instance")
	var cause error
	advanceUntil(clk, func() bool { return receive(stopped, &cause) }) // to the renewal that finds it lost
	fmt.Println("job stopped:", cause)
	// Output:
	// running with a fence: true
	// job stopped: lock: lease lost
}

// Test a deploy step while another deploy holds the migration lock: the
// migrator keeps its records in a database (the public test server), and
// takes its lock from the in-memory store, where the test holds it for
// another keeper and then lets it go.
func Example_migrationLock() {
	ctx := context.Background()
	db, cleanup := testDatabase(ctx)
	defer cleanup()

	clk := clockwork.NewFakeClock()
	store := locktest.New(locktest.WithClock(clk))
	session, err := lock.NewSession(store)
	if err != nil {
		panic(err)
	}
	defer session.Close()
	// A deploy step that must not wait (WithWait(0)) fails at once while
	// another deploy holds the lock. (With a wait, the fake clock would
	// have to be moved on while it waits, and only then.)
	m, err := migrations.New(db, migrations.WithSession(session), migrations.WithWait(0),
		migrations.WithMigrations(migrations.EnsureIndex(1, migrations.Index{
			Collection: "users", Keys: bson.D{{Key: "email", Value: 1}}, Unique: true,
		})))
	if err != nil {
		panic(err)
	}

	store.TakeOver(migrations.DefaultLockID, "other-deploy") // for a TTL; the fake clock does not move
	_, err1 := m.Up(ctx)
	fmt.Println("while another deploy holds the lock:", errors.Is(err1, migrations.ErrWaitTimeout))

	store.ForceRelease(migrations.DefaultLockID) // the other deploy finished
	res, err := m.Up(ctx)
	fmt.Println("then:", len(res.Applied), "applied", err)
	// Output:
	// while another deploy holds the lock: true
	// then: 4 applied <nil>
}

// advanceBy moves clk forward d once waiters goroutines of the code under
// test wait on it.
func advanceBy(clk *clockwork.FakeClock, waiters int, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := clk.BlockUntilContext(ctx, waiters); err != nil {
		panic("nothing waits on the clock")
	}
	clk.Advance(d)
}

// advanceUntil moves clk forward a second at a time until done reports
// true, giving the code under test 50 ms of real time after each step to
// act on it: stepped back to back, the clock ran ahead of a keep-alive not
// yet scheduled, past the lease's deadline (a clean-clone .ci/run hung so:
// the renewal due at 10s never came, the task's lease ended at 20s).
func advanceUntil(clk *clockwork.FakeClock, done func() bool) {
	deadline := time.Now().Add(time.Minute)
	for ok := done(); !ok; {
		if time.Now().After(deadline) {
			panic("advanceUntil: nothing happened within a minute")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		if clk.BlockUntilContext(ctx, 1) == nil {
			clk.Advance(time.Second)
		}
		cancel()
		for wait := time.Now().Add(50 * time.Millisecond); !ok && time.Now().Before(wait); {
			time.Sleep(time.Millisecond)
			ok = done()
		}
	}
}

func receive[T any](c <-chan T, v *T) bool {
	select {
	case *v = <-c:
		return true
	default:
		return false
	}
}

// testDatabase starts the public test server and returns a database on
// it, and a function that stops it.
func testDatabase(ctx context.Context) (*mongo.Database, func()) {
	srv, err := devserver.Start(ctx, "", nil)
	if err != nil {
		panic(err)
	}
	client, err := mongo.Connect(options.Client().ApplyURI(srv.URI()))
	if err != nil {
		panic(err)
	}
	return client.Database("app"), func() {
		_ = client.Disconnect(ctx)
		_ = srv.Close()
	}
}
