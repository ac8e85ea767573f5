package runner_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
)

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
	r, err := runner.New(locker, "billing-leader", lock.NewKeeperID(),
		runner.WithLogger(logger),
		runner.WithStallTimeout(time.Minute),
		runner.OnNewLeader(func(id string) { logger.Info().Str("leader", id).Msg("leader changed") }),
	)
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
// ticker, and the task runs on exactly one of them.
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
	r, err := runner.New(locker, "report-leader", lock.NewKeeperID())
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
