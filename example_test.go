package mongolock_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/scheduler"
)

func Example() {
	// Run until SIGINT or SIGTERM; this example also stops itself after 5 s.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()

	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	db := client.Database("myapp")

	locker, err := lock.New(db) // leases in the collection "locks"
	if err != nil {
		log.Fatal(err)
	}
	session, err := lock.NewSession(locker) // one per process suffices: keeper id and keep-alive
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close() // last: releases whatever is still held

	// A cron job: each firing runs once, on one instance of the cluster.
	s, err := scheduler.New(db, session)
	if err != nil {
		log.Fatal(err)
	}
	var runs atomic.Int64
	err = s.AddJob("report", "@every 1s", func(ctx context.Context) error {
		runs.Add(1) // the job's work; ctx ends if its lease is lost
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Start(); err != nil {
		log.Fatal(err)
	}

	// A leader task: runs on one instance at a time, until ctx ends.
	leader, err := runner.New(session, "myapp/leader")
	if err != nil {
		log.Fatal(err)
	}
	err = leader.Run(ctx, func(ctx context.Context) error {
		fmt.Println("leading")
		<-ctx.Done() // shutting down, or leadership lost: stop
		return nil
	})
	if err != nil {
		log.Print(err)
	}
	if err := s.Stop(context.Background()); err != nil {
		log.Print(err)
	}
	fmt.Println("stopped; the job ran here:", runs.Load() > 0)
	// Output:
	// leading
	// stopped; the job ran here: true
}
