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

// One Metrics observes the process's Session, and through it the runner,
// the scheduler and the migrator built on it; it is registered on the
// program's own registry, served at /metrics.
func Example() {
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://localhost:27017"))
	if err != nil {
		log.Fatal(err)
	}
	db := client.Database("myapp")

	m, err := metrics.New()
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)

	locker, err := lock.New(db)
	if err != nil {
		log.Fatal(err)
	}
	m.WatchLocker(locker) // the server-clock uncertainty
	session, err := lock.NewSession(locker, lock.WithObserver(m))
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close()

	ctx := context.Background()
	mig, err := migrations.New(db, migrations.WithSession(session))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := mig.Up(ctx); err != nil {
		log.Fatal(err)
	}

	r, err := runner.New(session, "reports-leader")
	if err != nil {
		log.Fatal(err)
	}
	m.AddElections(r.LockID()) // leader series at 0 before any campaign

	s, err := scheduler.New(db, session)
	if err != nil {
		log.Fatal(err)
	}
	if err := s.AddJob("sweep", "@every 10m", func(ctx context.Context) error { return nil }); err != nil {
		log.Fatal(err)
	}
	m.WatchScheduler(s) // every job's series at 0 from the start

	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	go func() { log.Fatal(http.ListenAndServe(":9090", nil)) }()
	// ... s.Start(), r.Run(ctx, task), and Stop/Close at shutdown.
}
