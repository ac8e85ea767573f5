package scheduler_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/scheduler"
)

// Every instance of a service runs this; each firing of each job runs on
// one of them only: the one that wins the firing's claim and holds the
// job's lock.
func Example() {
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://localhost:27017"))
	if err != nil {
		log.Fatal(err)
	}
	db := client.Database("myapp")

	locker, err := lock.New(db, lock.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	// The Session owns this process's keeper id and keeps the job locks'
	// leases alive; its logger logs the scheduler's events too.
	session, err := lock.NewSession(locker, lock.WithSessionLogger(zerolog.New(os.Stderr)))
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close() // after Stop, below
	s, err := scheduler.New(db, session)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := s.EnsureIndexes(ctx); err != nil {
		log.Fatal(err)
	}

	// Every night at 02:00 in Paris, on one instance.
	err = s.AddJob("nightly-report", "CRON_TZ=Europe/Paris 0 2 * * *", func(ctx context.Context) error {
		run, _ := scheduler.RunFromContext(ctx)
		// Pass run.Fence to anything that can reject stale writers.
		return buildReport(ctx, run.Scheduled, run.Fence)
	}, scheduler.JobTimeout(time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	// Every ten minutes, at :00, :10, ... whatever time each instance started.
	if err := s.AddJob("sweep", "@every 10m", sweep); err != nil {
		log.Fatal(err)
	}
	if err := s.Start(); err != nil {
		log.Fatal(err)
	}

	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Stop(stopCtx); err != nil {
		log.Print(err)
	}
}

// Any instance, or a tool, can tell when each job runs next and how its
// last run went, wherever it ran.
func ExampleScheduler_Jobs() {
	var s *scheduler.Scheduler // as in the package example
	jobs, err := s.Jobs(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	for _, j := range jobs {
		fmt.Printf("%s (%s): next %v", j.Name, j.Spec, j.Next)
		if r := j.LastRun; r != nil {
			fmt.Printf(", last run for %v on %s: %s %s", r.Scheduled, r.Keeper, r.Outcome, r.Error)
		}
		fmt.Println()
	}
}

// All jobs on the one instance that leads the runner's election, instead
// of each firing on whichever instance claims it. Every firing still goes
// through its claim and its job's lock: a new leader takes over what the
// previous one claimed and did not start.
func ExampleWithLeaderOnly() {
	var db *mongo.Database      // as in the package example
	var session *lock.Session   // as in the package example
	ctx := context.Background() // the application's
	leader, err := runner.New(session, "myapp/leader")
	if err != nil {
		log.Fatal(err)
	}
	// The election runs alongside; its task only waits.
	go func() {
		_ = leader.Run(ctx, func(leaderCtx context.Context) error {
			<-leaderCtx.Done()
			return nil
		})
	}()
	s, err := scheduler.New(db, session, scheduler.WithLeaderOnly(leader),
		// Firings missed while no instance led run, up to ten, within the hour.
		scheduler.WithMisfirePolicy(scheduler.MisfireRunAll(time.Hour, 10)))
	if err != nil {
		log.Fatal(err)
	}
	err = s.AddJob("sweep", "@every 1m", sweep,
		scheduler.JobRetries(3, lock.Backoff{First: time.Second, Max: 10 * time.Second}),
		scheduler.JobOverlap(scheduler.OverlapWait))
	if err != nil {
		log.Fatal(err)
	}
	_ = s.Start()
}

// Operators pause, resume, trigger and remove jobs from any instance or
// tool (and `mongolock jobs pause NAME`): every instance obeys by the job's
// next firing, and the state survives restarts.
func ExamplePauseJob() {
	var db *mongo.Database // as in the package example
	jobs := db.Collection(scheduler.DefaultJobsCollection)
	ctx := context.Background()
	err := scheduler.PauseJob(ctx, jobs, "nightly-report",
		scheduler.Pause{Note: "warehouse migration", Until: time.Now().Add(6 * time.Hour)})
	if err != nil {
		log.Fatal(err)
	}
	// One run now, through the same claim and lock as a firing, paused or not.
	if _, err := scheduler.TriggerJob(ctx, jobs, "nightly-report"); err != nil {
		log.Fatal(err)
	}
}

var _ scheduler.Leader = (*runner.LeaderAwareRunner)(nil)

func buildReport(context.Context, time.Time, uint64) error { return nil }

func sweep(context.Context) error { return nil }
