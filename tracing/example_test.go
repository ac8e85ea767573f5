package tracing_test

import (
	"context"
	"fmt"
	"log"

	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	otelprom "go.opentelemetry.io/contrib/bridges/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/tracing"
)

// Trace a Session: each acquisition and release is a span, a child of the
// caller's, and so is the work run under the lock.
func Example() {
	ctx := context.Background()
	// Your TracerProvider, with your exporter; here one that keeps the spans.
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(ctx)

	client, err := mongo.Connect(options.Client().ApplyURI(mongotest.URI())) // your MongoDB URI
	if err != nil {
		log.Fatal(err)
	}
	defer client.Disconnect(ctx)
	db := client.Database("example_tracing")
	defer db.Drop(ctx)
	locker, err := lock.New(db)
	if err != nil {
		log.Fatal(err)
	}

	tr, err := tracing.New(tp)
	if err != nil {
		log.Fatal(err)
	}
	session, err := lock.NewSession(locker, lock.WithTracer(tr))
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close()

	err = session.Do(ctx, "nightly-report", func(ctx context.Context) error {
		_, work := tp.Tracer("report").Start(ctx, "write report") // a child of the caller's span
		defer work.End()
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range spans.GetSpans() {
		fmt.Println(s.Name)
	}
	// Output:
	// mongolock.acquire
	// write report
	// mongolock.release
}

// Export the Prometheus metrics through OpenTelemetry: the bridge makes your
// registry a metric producer of an OpenTelemetry MeterProvider.
func Example_prometheusBridge() {
	ctx := context.Background()
	reg := prometheus.NewRegistry() // register the metrics package's collector on it
	runs := prometheus.NewCounter(prometheus.CounterOpts{Name: "example_runs_total", Help: "A stand-in."})
	reg.MustRegister(runs)
	runs.Inc()

	// Your reader, for example a PeriodicReader of an OTLP exporter; here a
	// manual one, read below. WithGatherer: never Prometheus's global
	// registry.
	reader := sdkmetric.NewManualReader(sdkmetric.WithProducer(otelprom.NewMetricProducer(otelprom.WithGatherer(reg))))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum := m.Data.(metricdata.Sum[float64])
			fmt.Println(m.Name, sum.DataPoints[0].Value)
		}
	}
	// Output:
	// example_runs_total 1
}
