package runner_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
)

// The newest build leads: each instance's priority is its build number, so
// during a rolling deploy a new build's instance, once it has waited the
// preference grace, takes over from the old one, which steps down when
// its task has returned. Equal builds never swap.
func Example_preferNewestBuild() {
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI(mongotest.URI())) // your MongoDB URI
	if err != nil {
		log.Fatal(err)
	}
	defer client.Disconnect(ctx)
	db := client.Database("example_runner_candidates")
	defer db.Drop(ctx)
	locker, err := lock.New(db, lock.WithTTL(3*time.Second)) // short, for the example
	if err != nil {
		log.Fatal(err)
	}
	var sessions []*lock.Session
	defer func() {
		for _, s := range sessions {
			s.Close()
		}
	}()
	instance := func(build int) *runner.LeaderAwareRunner {
		session, err := lock.NewSession(locker, lock.WithKeeperID(fmt.Sprintf("build-%d", build)))
		if err != nil {
			log.Fatal(err)
		}
		sessions = append(sessions, session)
		r, err := runner.New(session, "report-leader",
			runner.WithPriority(build), runner.WithPreferenceGrace(time.Second))
		if err != nil {
			log.Fatal(err)
		}
		return r
	}

	ctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 2)
	led := make(chan struct{})
	old := instance(41)
	go func() {
		done <- old.Run(ctx, func(ctx context.Context) error {
			fmt.Println("build-41 leads")
			close(led)
			<-ctx.Done()
			fmt.Println("build-41 steps down:", errors.Is(context.Cause(ctx), runner.ErrSteppedDown))
			return ctx.Err()
		})
	}()
	<-led
	newer := instance(42)
	go func() {
		done <- newer.Run(ctx, func(ctx context.Context) error {
			fmt.Println("build-42 leads")
			stop() // the end of the example
			<-ctx.Done()
			return nil
		})
	}()
	for range 2 {
		if err := <-done; err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// build-41 leads
	// build-41 steps down: true
	// build-42 leads
}
