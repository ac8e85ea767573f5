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

// One call: the Checker watches the process's Session and the migrator,
// the runner and the scheduler built on it (even after the call), and
// serves the probes beside the program's other endpoints.
func Example() {
	var db *mongo.Database // connected elsewhere

	locker, err := lock.New(db)
	if err != nil {
		log.Fatal(err)
	}
	session, err := lock.NewSession(locker)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close()
	checker, err := health.ForSession(session)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	checker.Register(mux) // /livez, /healthz, /readyz, /leader
	go func() { log.Fatal(http.ListenAndServe(":8080", mux)) }()

	// /readyz: 503 until Up applied everything.
	migrator, err := migrations.New(db, migrations.WithSession(session))
	if err != nil {
		log.Fatal(err)
	}
	// /leader: 200 on the leader only.
	leader, err := runner.New(session, "billing-leader")
	if err != nil {
		log.Fatal(err)
	}
	// /livez: 503 if its loop is blocked.
	sched, err := scheduler.New(db, session)
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	if _, err := migrator.Up(ctx); err != nil {
		log.Fatal(err)
	}
	if err := sched.Start(); err != nil {
		log.Fatal(err)
	}
	defer sched.Stop(ctx)
	_ = leader.Run(ctx, func(ctx context.Context) error {
		<-ctx.Done() // the leader's work, until its term ends
		return nil
	})
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
