package runner_test

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

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
)

// Lead once: the runner takes the lock through the session, runs the task
// while it leads, and releases the lock when the task returns.
func Example() {
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI(mongotest.URI())) // your MongoDB URI
	if err != nil {
		log.Fatal(err)
	}
	defer client.Disconnect(ctx)
	db := client.Database("example_runner")
	defer db.Drop(ctx)

	locker, err := lock.New(db)
	if err != nil {
		log.Fatal(err)
	}
	// One session per process: it owns the keeper id and renews the lease.
	session, err := lock.NewSession(locker)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close()

	r, err := runner.New(session, "report-leader", runner.WithCampaignAgain(false))
	if err != nil {
		log.Fatal(err)
	}
	err = r.Run(ctx, func(ctx context.Context) error {
		fence, _ := runner.FenceFrom(ctx)
		fmt.Println("leading, fence > 0:", fence > 0)
		return nil
	})
	fmt.Println("run returned:", err)
	// Output:
	// leading, fence > 0: true
	// run returned: <nil>
}

// A long-running leader task: Run campaigns until the process is told to
// stop, runs the task while this instance leads, and releases the lock on the
// way out so another instance takes over at once.
func ExampleLeaderAwareRunner_Run() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://localhost:27017"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	locker, err := lock.New(client.Database("app"), lock.WithTTL(15*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	logger := zerolog.New(os.Stderr).With().Timestamp().Logger()
	// The session's logger logs the lock's and the runner's events (terms
	// started and ended, leaders seen).
	session, err := lock.NewSession(locker, lock.WithSessionLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close()
	r, err := runner.New(session, "billing-leader", runner.WithStallTimeout(time.Minute))
	if err != nil {
		log.Fatal(err)
	}

	err = r.Run(ctx, func(ctx context.Context) error {
		fence, _ := runner.FenceFrom(ctx)
		ticker := time.NewTicker(time.Second)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				// context.Cause(ctx) is lock.ErrLeaseLost if leadership was lost.
				return ctx.Err()
			case <-ticker.C:
				runner.Heartbeat(ctx)
				_ = fence // pass it along with every write to the protected resource
			}
		}
	})
	logger.Info().Err(err).Msg("runner stopped")
}

// Short, repeated tasks: every instance calls RunTaskOnLeader from its own
// ticker, and the task runs on exactly one of them. Leadership lasts between
// calls: the session renews the lease.
func ExampleLeaderAwareRunner_RunTaskOnLeader() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://localhost:27017"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	locker, err := lock.New(client.Database("app"))
	if err != nil {
		log.Fatal(err)
	}
	session, err := lock.NewSession(locker)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close() // releases whatever the session still holds
	r, err := runner.New(session, "report-leader")
	if err != nil {
		log.Fatal(err)
	}
	// Hand over at once on the way out.
	defer r.Resign(context.Background())

	ticker := time.NewTicker(5 * time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		ran, err := r.RunTaskOnLeader(ctx, func(ctx context.Context) error {
			fence, _ := runner.FenceFrom(ctx)
			log.Printf("sending the report as leader, fence %d", fence)
			return nil
		})
		if err != nil {
			log.Printf("report: ran=%v: %v", ran, err)
		}
	}
}
