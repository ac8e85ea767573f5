package metrics_test

import (
	"context"
	"log"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/metrics"
	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/scheduler"
)

// One call: the Metrics observes the process's Session, its Locker's
// server clock, and the runner, the scheduler and the migrator built on it
// (even those built after the call), registered on the program's own
// registry, served at /metrics.
func Example() {
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://localhost:27017"))
	if err != nil {
		log.Fatal(err)
	}
	db := client.Database("myapp")
	locker, err := lock.New(db)
	if err != nil {
		log.Fatal(err)
	}
	session, err := lock.NewSession(locker)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close()

	reg := prometheus.NewRegistry()
	if _, err := metrics.Register(reg, session); err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	mig, err := migrations.New(db, migrations.WithSession(session))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := mig.Up(ctx); err != nil {
		log.Fatal(err)
	}
	r, err := runner.New(session, "reports-leader") // its leader series at 0 before any campaign
	if err != nil {
		log.Fatal(err)
	}
	s, err := scheduler.New(db, session)
	if err != nil {
		log.Fatal(err)
	}
	// Every job's series at 0 from the next scrape.
	if err := s.AddJob("sweep", "@every 10m", func(ctx context.Context) error { return nil }); err != nil {
		log.Fatal(err)
	}

	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	go func() { log.Fatal(http.ListenAndServe(":9090", nil)) }()
	if err := s.Start(); err != nil {
		log.Fatal(err)
	}
	defer s.Stop(context.Background())
	err = r.Run(ctx, func(ctx context.Context) error {
		<-ctx.Done() // the leader's work, until the term ends
		return nil
	})
	if err != nil {
		log.Print(err)
	}
}
