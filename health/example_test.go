package health_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/health"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/scheduler"
)

// A program observes its Session with a Checker, watches what it built on
// it, and serves the probes beside its other endpoints.
func Example() {
	var db *mongo.Database // connected elsewhere

	checker, err := health.New()
	if err != nil {
		log.Fatal(err)
	}
	locker, err := lock.New(db)
	if err != nil {
		log.Fatal(err)
	}
	session, err := lock.NewSession(locker, lock.WithObserver(checker))
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close()

	migrator, err := migrations.New(db, migrations.WithSession(session))
	if err != nil {
		log.Fatal(err)
	}
	checker.WatchMigrations(migrator) // /readyz: 503 until Up applied everything
	leader, err := runner.New(session, "billing-leader")
	if err != nil {
		log.Fatal(err)
	}
	checker.WatchRunner(leader) // /leader: 200 on the leader only
	sched, err := scheduler.New(db, session)
	if err != nil {
		log.Fatal(err)
	}
	checker.WatchScheduler(sched) // /livez: 503 if its loop is blocked

	mux := http.NewServeMux()
	checker.Register(mux) // /livez, /healthz, /readyz, /leader
	go func() { log.Fatal(http.ListenAndServe(":8080", mux)) }()

	if _, err := migrator.Up(context.Background()); err != nil {
		log.Fatal(err)
	}
	// ... Start the scheduler, Run the leader's task.
}

// For a health-check library that takes a func(context.Context) error.
func ExampleReport_Err() {
	checker, err := health.New()
	if err != nil {
		log.Fatal(err)
	}
	live := func(ctx context.Context) error { return checker.Live(ctx).Err() }
	fmt.Println(live(context.Background()))

	// What a Session reports when a task ignored its cancelled context.
	checker.Observe(lock.Event{Kind: lock.TaskAbandoned, KeeperID: "k1", LockID: "billing-leader", Fence: 7,
		Err: runner.ErrTaskDidNotStop})
	err = live(context.Background())
	fmt.Println(errors.Is(err, health.ErrUnhealthy))
	// Output:
	// <nil>
	// true
}
