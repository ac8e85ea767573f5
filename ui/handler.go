package ui

import (
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/migrations"
)

//go:embed templates/*.html static/*
var assets embed.FS

// Handler is the dashboard: an http.Handler serving its pages, its static
// files and, with WithActions, its action endpoints. It is safe for
// concurrent use.
type Handler struct {
	cfg      config
	db       *mongo.Database
	locker   *lock.Locker
	migrator *migrations.Migrator
	rd       *reader
	mux      *http.ServeMux
	pages    map[string]*template.Template
	static   http.Handler
	csrfKey  []byte
	indexed  atomic.Bool // the actions collection's index was made
	bad      badLog      // the bad documents reported (reportBad)
}

var _ http.Handler = (*Handler)(nil)

// fragmentHeader asks for a page's live part alone: the pages' script
// sends it when it refreshes them.
const fragmentHeader = "X-Mongolock-Fragment"

// New returns the dashboard of the mongolock collections of db. It does no
// I/O: pages read the database when they are asked for, through one
// shared reader (WithRefresh).
func New(db *mongo.Database, opts ...Option) (*Handler, error) {
	if db == nil {
		return nil, invalid("nil database")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, invalid("nil option")
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	h := &Handler{cfg: cfg, db: db, rd: newReader(cfg.clock, cfg.refresh, cfg.readTimeout)}
	var err error
	if h.locker, err = lock.New(db, lock.WithCollection(cfg.locks), lock.WithClock(cfg.clock), lock.WithLogger(cfg.log),
		lock.WithBadDocuments(func(b lock.BadDocument) { h.reportBad(b) })); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	h.migrator = cfg.migrator
	if h.migrator == nil {
		if h.migrator, err = migrations.New(db, migrations.WithLockCollection(cfg.locks), migrations.WithSchedulerHistory(cfg.runs, 0),
			migrations.WithTermLog(cfg.terms, 7*24*time.Hour)); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
	}
	if cfg.authorize != nil {
		h.csrfKey = cfg.csrfKey
		if h.csrfKey == nil {
			h.csrfKey = make([]byte, 32)
			_, _ = rand.Read(h.csrfKey)
		}
	}
	if err := h.parse(); err != nil {
		return nil, err
	}
	sub, _ := fs.Sub(assets, "static")
	h.static = http.StripPrefix(cfg.prefix+"/static/", http.FileServerFS(sub))
	h.routes()
	return h, nil
}

func (h *Handler) parse() error {
	h.pages = make(map[string]*template.Template)
	for _, p := range []string{"overview", "locks", "lock", "elections", "jobs", "job", "migrations", "error"} {
		t, err := template.New("layout.html").Funcs(h.funcs()).ParseFS(assets, "templates/layout.html", "templates/parts.html", "templates/"+p+".html")
		if err != nil {
			return fmt.Errorf("ui: parse template %s: %w", p, err)
		}
		h.pages[p] = t
	}
	return nil
}

func (h *Handler) routes() {
	p := h.cfg.prefix
	m := http.NewServeMux()
	m.HandleFunc("GET "+p+"/{$}", h.pageOverview)
	m.HandleFunc("GET "+p+"/locks", h.pageLocks)
	m.HandleFunc("GET "+p+"/locks/{id...}", h.pageLock)
	m.HandleFunc("GET "+p+"/elections", h.pageElections)
	m.HandleFunc("GET "+p+"/jobs", h.pageJobs)
	m.HandleFunc("GET "+p+"/jobs/{name...}", h.pageJob)
	m.HandleFunc("GET "+p+"/migrations", h.pageMigrations)
	m.Handle("GET "+p+"/static/", h.static)
	if h.cfg.authorize != nil {
		// A read-only dashboard has no such route: POSTs get 404 (or 405).
		m.Handle("POST "+p+"/actions/{kind}", http.NewCrossOriginProtection().Handler(http.HandlerFunc(h.act)))
	}
	if p != "" {
		m.Handle("GET "+p, http.RedirectHandler(p+"/", http.StatusMovedPermanently))
	}
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusNotFound, "no such page: "+r.URL.Path)
	})
	h.mux = m
}

// ServeHTTP serves the dashboard.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("X-Frame-Options", "DENY")
	// Only the dashboard's own script and styles, no inline code.
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.mux.ServeHTTP(w, r)
}

// page is what every page template gets.
type page struct {
	App     string
	Prefix  string
	DB      string
	Nav     string
	Title   string
	Refresh int // milliseconds
	Now     time.Time
	Data    any
	Err     string
	Flash   string
	Actions bool
	CSRF    string
	Path    string // the request's path and query, for forms' return
	Status  int
}

// render writes page p with data, or its live part alone when the pages'
// script asks for it.
//
// now is the server's time of the page's data (the lock reading's), which
// every "ago" and "expires in" of the page is counted from; zero: the
// Locker's estimate of the server's clock now.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, now time.Time, name, nav, title string, status int, data any, errText string) {
	pg := page{App: h.cfg.title, Prefix: h.cfg.prefix, DB: h.db.Name(), Nav: nav, Title: title,
		Refresh: int(h.cfg.refresh / time.Millisecond), Data: data, Err: errText, Actions: h.cfg.authorize != nil,
		Path: r.URL.RequestURI(), Status: status}
	pg.Now = now
	if lo, _, ok := h.locker.ServerTime(); ok && now.IsZero() {
		pg.Now = lo
	}
	if msg, ok := flashes[r.URL.Query().Get("done")]; ok {
		pg.Flash = msg
	}
	if pg.Actions {
		pg.CSRF = h.csrfToken(w, r)
	}
	t := h.pages[name]
	what := "layout.html"
	if r.Header.Get(fragmentHeader) == "live" {
		what = "live"
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, what, pg); err != nil {
		h.cfg.log.Error().Err(err).Str("page", name).Msg("ui: render")
		http.Error(w, "ui: cannot render the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// fail writes an error page.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.render(w, r, time.Time{}, "error", "", http.StatusText(status), status, nil, h.cfg.redact(msg))
}

// failRead writes the error page of a failed reading: 503, or 504 when the
// read timed out, with the reason (redacted).
func (h *Handler) failRead(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusServiceUnavailable
	if errors.Is(err, context.DeadlineExceeded) {
		status = http.StatusGatewayTimeout
	}
	if r.Context().Err() != nil {
		return // the viewer left
	}
	if errors.Is(err, errBusy) {
		w.Header().Set("Retry-After", strconv.Itoa(max(int(h.cfg.refresh/time.Second), 1)))
		h.fail(w, r, status, err.Error())
		return
	}
	h.cfg.log.Warn().Str("error", h.cfg.redact(err.Error())).Str("path", h.cfg.redact(r.URL.Path)).Msg("ui: read failed")
	h.fail(w, r, status, "the database could not be read: "+err.Error())
}

// badInput writes the error page of bad input: 400.
func (h *Handler) badInput(w http.ResponseWriter, r *http.Request, format string, args ...any) {
	h.fail(w, r, http.StatusBadRequest, fmt.Sprintf(format, args...))
}

// flashes are the messages shown after an action, by the key its
// redirect carries: never text from the request.
var flashes = map[string]string{
	"paused":   "Paused: every instance skips its firings from the next one on.",
	"resumed":  "Resumed: it runs again from its next firing.",
	"trigger":  "Triggered: one instance runs it within its poll interval.",
	"waiting":  "A trigger was already waiting: it runs once.",
	"removed":  "Removed: no instance runs it from its next firing on (resume brings it back).",
	"released": "Force-released: the next acquirer gets a larger fence. The holder may act until its next renewal fails.",
}

// query helpers

func trimmed(r *http.Request, key string, max int) (string, error) {
	v := strings.TrimSpace(r.URL.Query().Get(key))
	if len(v) > max {
		return "", fmt.Errorf("%s: longer than %d bytes", key, max)
	}
	return v, nil
}
