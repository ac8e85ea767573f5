package health

import (
	"context"
	"encoding/json"
	"net/http"
)

// Paths Register serves the probes on.
const (
	// LivePath serves LiveHandler, as Kubernetes names it.
	LivePath = "/livez"
	// HealthzPath serves LiveHandler too, under its older, common name.
	HealthzPath = "/healthz"
	// ReadyPath serves ReadyHandler.
	ReadyPath = "/readyz"
	// LeaderPath serves LeaderHandler.
	LeaderPath = "/leader"
)

// LiveHandler answers GET and HEAD with Live's report: 200 when it is OK,
// 503 when it is not, and the report as a JSON body that says why.
func (c *Checker) LiveHandler() http.Handler { return reportHandler(c.Live) }

// ReadyHandler answers GET and HEAD with Ready's report: 200 when it is
// OK, 503 when it is not, and the report as a JSON body. The request's
// context bounds the wait for a migrator's status.
func (c *Checker) ReadyHandler() http.Handler { return reportHandler(c.Ready) }

// LeaderHandler answers GET and HEAD with Leader's report: 200 on the
// leader, 503 elsewhere, and the report as a JSON body that names the
// leader as last observed.
func (c *Checker) LeaderHandler() http.Handler { return reportHandler(c.Leader) }

// Register serves the probes on mux: LiveHandler on LivePath and
// HealthzPath, ReadyHandler on ReadyPath, LeaderHandler on LeaderPath. It
// panics, as http.ServeMux.Handle does, if one of them is taken.
func (c *Checker) Register(mux *http.ServeMux) {
	live := c.LiveHandler()
	mux.Handle(LivePath, live)
	mux.Handle(HealthzPath, live)
	mux.Handle(ReadyPath, c.ReadyHandler())
	mux.Handle(LeaderPath, c.LeaderHandler())
}

func reportHandler(probe func(context.Context) Report) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
			return
		}
		rep := probe(req.Context())
		body, err := json.Marshal(rep)
		if err != nil { // a Report always marshals; this is for the record
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		status := http.StatusOK
		if !rep.OK {
			status = http.StatusServiceUnavailable
		}
		w.WriteHeader(status)
		if req.Method != http.MethodHead {
			_, _ = w.Write(append(body, '\n'))
		}
	})
}
