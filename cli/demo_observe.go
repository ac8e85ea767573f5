package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/mongolock/mongolock/health"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/metrics"
	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/scheduler"
)

// observability is what an instance shows over HTTP: Prometheus metrics
// (/metrics) and health checks (/livez, /healthz, /readyz, /leader).
type observability struct {
	reg     *prometheus.Registry
	metrics *metrics.Metrics
	health  *health.Checker
	srv     *http.Server
	ln      net.Listener
	served  chan struct{}
}

func newObservability() (*observability, error) {
	m, err := metrics.New()
	if err != nil {
		return nil, err
	}
	h, err := health.New()
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(m); err != nil {
		return nil, err
	}
	return &observability{reg: reg, metrics: m, health: h}, nil
}

// sessionOptions make the Session's events feed the metrics and checks.
func (o *observability) sessionOptions() []lock.SessionOption {
	return []lock.SessionOption{lock.WithObserver(o.metrics), lock.WithObserver(o.health)}
}

// watch adds what the metrics and checks read at scrape or probe time.
func (o *observability) watch(l *lock.Locker, s *scheduler.Scheduler, r *runner.LeaderAwareRunner, m *migrations.Migrator) {
	o.metrics.WatchLocker(l)
	o.metrics.WatchScheduler(s)
	o.metrics.AddElections(r.LockID())
	o.health.WatchScheduler(s)
	o.health.WatchRunner(r)
	if m != nil {
		o.health.WatchMigrations(m)
	}
}

// serve listens on addr and serves until close; it returns the address.
func (o *observability) serve(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("--http: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(o.reg, promhttp.HandlerOpts{}))
	o.health.Register(mux)
	o.ln, o.srv, o.served = ln, &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, make(chan struct{})
	go func() {
		defer close(o.served)
		_ = o.srv.Serve(ln) // ends with close
	}()
	return ln.Addr().String(), nil
}

// close stops serving.
func (o *observability) close(ctx context.Context) {
	if o.srv == nil {
		return
	}
	_ = o.srv.Shutdown(ctx)
	<-o.served
}

// runsStarted scrapes the instance's own /metrics, as Prometheus would, and
// returns the runs started per job (the count of the start lateness
// histogram).
func (o *observability) runsStarted(ctx context.Context) (map[string]int, error) {
	if o.ln == nil {
		return nil, errors.New("not serving")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+o.ln.Addr().String()+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse /metrics: %w", err)
	}
	out := map[string]int{}
	fam, ok := families["mongolock_job_start_lateness_seconds"]
	if !ok {
		return nil, errors.New("/metrics has no mongolock_job_start_lateness_seconds")
	}
	for _, m := range fam.GetMetric() {
		out[labelOf(m, "job_name")] = int(m.GetHistogram().GetSampleCount())
	}
	return out, nil
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
