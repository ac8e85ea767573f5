package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/mongolock/mongolock/health"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/metrics"
)

// observability is what an instance shows over HTTP: Prometheus metrics
// (/metrics) and health checks (/livez, /healthz, /readyz, /leader).
type observability struct {
	reg    *prometheus.Registry
	health *health.Checker
	srv    *http.Server
	ln     net.Listener
	served chan struct{}
}

// newObservability makes the metrics and checks of session: one call each
// covers the Session and everything built on it, before or after.
func newObservability(session *lock.Session) (*observability, error) {
	reg := prometheus.NewRegistry()
	if _, err := metrics.Register(reg, session); err != nil {
		return nil, err
	}
	h, err := health.ForSession(session)
	if err != nil {
		return nil, err
	}
	return &observability{reg: reg, health: h}, nil
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
	o.ln, o.srv, o.served = ln, newHTTPServer(mux), make(chan struct{})
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
