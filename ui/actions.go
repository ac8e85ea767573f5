package ui

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/scheduler"
)

// ActionKind is what an operator asks for.
type ActionKind string

// Actions the dashboard offers when WithActions enables them.
const (
	ActionPause   ActionKind = "pause"
	ActionResume  ActionKind = "resume"
	ActionTrigger ActionKind = "trigger"
	ActionRemove  ActionKind = "remove"
	// ActionRelease force-releases a lock whoever holds it
	// (lock.Locker.ForceRelease).
	ActionRelease ActionKind = "release"
)

// Action is one action an operator asks for, as the authorisation hook
// sees it.
type Action struct {
	Kind ActionKind
	// Job names the job (pause, resume, trigger, remove); Lock the lock
	// (release).
	Job, Lock string
	// Note and Until are the pause's (Until zero: until resumed).
	Note  string
	Until time.Time
}

// Authorize decides whether the request r may take action a: nil allows
// it, and it then names the operator with SetOperator (or the request
// carries HTTP basic credentials, whose user name is taken). An error
// refuses it (403), and an error wrapping ErrUnauthenticated asks the
// browser for credentials (401 with a Basic challenge).
type Authorize func(r *http.Request, a Action) error

// ErrUnauthenticated, wrapped by an Authorize error, answers 401 with a
// WWW-Authenticate: Basic challenge, so that the browser asks for a user
// name and password.
var ErrUnauthenticated = errors.New("ui: authentication required")

// WithActions enables the actions (pause with a note and an end, resume,
// trigger, remove, force-release a lock), each allowed or refused by
// authorize, which must name the operator: every action is recorded with
// who took it (DefaultActionsCollection) and shows in the job's history.
// Without it the dashboard is read-only and has no action endpoint at
// all. Default: none.
func WithActions(authorize Authorize) Option {
	return func(c *config) error {
		if authorize == nil {
			return invalid("WithActions: nil function")
		}
		c.authorize = authorize
		return nil
	}
}

// WithCSRFKey sets the key the forms' anti-forgery tokens are signed
// with: give every replica behind one address the same key, of at least
// 32 bytes. Default: a random key per Handler.
func WithCSRFKey(key []byte) Option {
	return func(c *config) error {
		if len(key) < 32 {
			return invalid("WithCSRFKey: %d bytes, want at least 32", len(key))
		}
		c.csrfKey = append([]byte(nil), key...)
		return nil
	}
}

type operatorKey struct{}

// operatorSlot is where SetOperator writes, in the request's context.
type operatorSlot struct{ name string }

// SetOperator names the operator taking the action, from an Authorize
// hook: the name recorded with the action. It does nothing outside a hook.
func SetOperator(r *http.Request, name string) {
	if s, ok := r.Context().Value(operatorKey{}).(*operatorSlot); ok {
		s.name = name
	}
}

// Limits of an action's input.
const (
	maxOperator = 256
	csrfCookie  = "mongolock_csrf"
	csrfField   = "csrf"
)

// csrfToken returns the token the page's forms carry: the HMAC of the
// browser's random cookie, set here if it has none. A forged form from
// another site cannot read the cookie, so cannot make the token, and the
// cookie itself is SameSite=Strict.
func (h *Handler) csrfToken(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(csrfCookie)
	val := ""
	if err == nil && validCookie(c.Value) {
		val = c.Value
	} else {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		val = base64.RawURLEncoding.EncodeToString(b)
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: val, Path: h.cfg.prefix + "/", HttpOnly: true,
			SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	}
	return h.sign(val)
}

func validCookie(v string) bool {
	b, err := base64.RawURLEncoding.DecodeString(v)
	return err == nil && len(b) == 32
}

func (h *Handler) sign(v string) string {
	m := hmac.New(sha256.New, h.csrfKey)
	m.Write([]byte("mongolock-ui-csrf|" + v))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkCSRF reports whether r carries the token of its cookie.
func (h *Handler) checkCSRF(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil || !validCookie(c.Value) {
		return false
	}
	want := h.sign(c.Value)
	got := r.PostFormValue(csrfField)
	return subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}

// act serves POST /actions/{kind}: it checks the form's token, reads the
// action, asks the hook, does it, records it, and redirects back to the
// job's or the lock's page with a message.
func (h *Handler) act(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, "unreadable form: "+err.Error())
		return
	}
	if !h.checkCSRF(r) {
		h.fail(w, r, http.StatusForbidden, "the form's anti-forgery token is missing or wrong: reload the page and try again")
		return
	}
	a, err := h.readAction(r)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	slot := &operatorSlot{}
	r = r.WithContext(context.WithValue(r.Context(), operatorKey{}, slot))
	if err := h.cfg.authorize(r, a); err != nil {
		if errors.Is(err, ErrUnauthenticated) {
			w.Header().Set("WWW-Authenticate", `Basic realm="mongolock", charset="UTF-8"`)
			h.fail(w, r, http.StatusUnauthorized, "not allowed: "+err.Error())
			return
		}
		h.fail(w, r, http.StatusForbidden, "not allowed: "+err.Error())
		return
	}
	by := slot.name
	if by == "" {
		by, _, _ = r.BasicAuth()
	}
	if by == "" || len(by) > maxOperator || !utf8.ValidString(by) {
		h.cfg.log.Error().Str("action", string(a.Kind)).Msg("ui: the authorisation hook allowed an action but named no operator")
		h.fail(w, r, http.StatusForbidden, "not allowed: the authorisation hook named no operator (SetOperator)")
		return
	}
	// Not ended by the browser leaving: an action begun is done and
	// recorded, or fails, within the timeout.
	ctx, cancel := lock.WithTimeout(context.WithoutCancel(r.Context()), h.cfg.clock, h.cfg.readTimeout)
	defer cancel()
	done, err := h.do(ctx, a, by)
	if err != nil {
		status := http.StatusBadGateway
		switch {
		case errors.Is(err, scheduler.ErrUnknownJob), errors.Is(err, lock.ErrNotHeld):
			status = http.StatusNotFound
		case errors.Is(err, scheduler.ErrInvalidOption), errors.Is(err, scheduler.ErrJobRemoved):
			status = http.StatusConflict
		}
		h.fail(w, r, status, fmt.Sprintf("%s: %v", a.Kind, err))
		return
	}
	h.rd.forget()
	h.cfg.log.Info().Str("action", string(a.Kind)).Str("job", a.Job).Str("lock", a.Lock).Str("by", by).Msg("ui: action")
	back := h.jobHref(a.Job)
	if a.Kind == ActionRelease {
		back = h.lockHref(a.Lock)
	}
	http.Redirect(w, r, withQuery(back, "done="+done), http.StatusSeeOther)
}

// readAction reads the action of the form: kind from the path, job or
// lock, note, until (RFC 3339, a datetime-local value in UTC, or a
// duration from now such as 2h).
func (h *Handler) readAction(r *http.Request) (Action, error) {
	a := Action{Kind: ActionKind(r.PathValue("kind"))}
	switch a.Kind {
	case ActionPause, ActionResume, ActionTrigger, ActionRemove:
		a.Job = r.PostFormValue("job")
		if a.Job == "" || len(a.Job) > 1024 {
			return a, fmt.Errorf("%s: job name empty or too long", a.Kind)
		}
		if a.Kind == ActionRemove && r.PostFormValue("confirm") != "yes" {
			return a, errors.New("remove: tick the box that confirms it: no instance will run the job until it is resumed")
		}
	case ActionRelease:
		a.Lock = r.PostFormValue("lock")
		if err := lock.ValidateID("lock", a.Lock); err != nil {
			return a, fmt.Errorf("release: %w", err)
		}
		if r.PostFormValue("confirm") != "yes" {
			return a, errors.New("release: tick the box that says the holder may go on acting until its next renewal fails")
		}
	default:
		return a, fmt.Errorf("unknown action %q", a.Kind)
	}
	if a.Kind != ActionPause {
		return a, nil
	}
	a.Note = strings.TrimSpace(r.PostFormValue("note"))
	if len(a.Note) > scheduler.MaxPauseNote || !utf8.ValidString(a.Note) {
		return a, fmt.Errorf("pause: the note must be UTF-8 of at most %d bytes", scheduler.MaxPauseNote)
	}
	if u := strings.TrimSpace(r.PostFormValue("until")); u != "" {
		if d, err := time.ParseDuration(u); err == nil {
			if d <= 0 || d > 10*365*24*time.Hour {
				return a, fmt.Errorf("pause: until %q: a duration from now must be positive and under ten years", u)
			}
			now, err := h.now(r.Context())
			if err != nil {
				return a, fmt.Errorf("pause: read the server's time: %w", err)
			}
			a.Until = now.Add(d)
		} else if a.Until, err = parseWhen("until", u); err != nil {
			return a, fmt.Errorf("pause: %w, or a duration from now such as 2h", err)
		}
	}
	return a, nil
}

// do takes action a for by, and records it. It returns the key of the
// message to show.
func (h *Handler) do(ctx context.Context, a Action, by string) (string, error) {
	jobs := h.db.Collection(h.cfg.jobs)
	var done string
	var err error
	result := ""
	switch a.Kind {
	case ActionPause:
		err, done = scheduler.PauseJob(ctx, jobs, a.Job, scheduler.Pause{Note: a.Note, Until: a.Until, By: by}), "paused"
	case ActionResume:
		err, done = scheduler.ResumeJob(ctx, jobs, a.Job), "resumed"
	case ActionRemove:
		err, done = scheduler.RemoveJob(ctx, jobs, a.Job), "removed"
	case ActionTrigger:
		var made bool
		made, err = scheduler.TriggerJob(ctx, jobs, a.Job)
		done = "trigger"
		if err == nil && !made {
			done, result = "waiting", "a trigger was already waiting"
		}
	case ActionRelease:
		err, done = h.locker.ForceRelease(ctx, a.Lock), "released"
	}
	if err != nil {
		return "", err
	}
	// The action is done; its record is the audit trail, so a failure to
	// write it is reported, not hidden.
	doc := bson.D{{Key: "kind", Value: string(a.Kind)}, {Key: "by", Value: by}}
	if a.Job != "" {
		doc = append(doc, bson.E{Key: "job", Value: a.Job})
	}
	if a.Lock != "" {
		doc = append(doc, bson.E{Key: "lock", Value: a.Lock})
	}
	if a.Note != "" {
		doc = append(doc, bson.E{Key: "note", Value: a.Note})
	}
	if !a.Until.IsZero() {
		doc = append(doc, bson.E{Key: "until", Value: a.Until})
	}
	if result != "" {
		doc = append(doc, bson.E{Key: "result", Value: result})
	}
	coll := h.db.Collection(h.cfg.actions)
	if !h.indexed.Load() {
		// The job pages read the actions by job and time; the first action
		// makes the index (a failure leaves the reads slower, not wrong).
		if ierr := h.EnsureIndexes(ctx); ierr == nil {
			h.indexed.Store(true)
		} else {
			h.cfg.log.Warn().Err(ierr).Msg("ui: index of the actions")
		}
	}
	// An upsert, not an insert, for the server's time ($currentDate), of a
	// fresh _id; its filter has the kind too: FerretDB 2.x runs an upsert
	// keyed on the _id alone as an insert that replaces whatever document
	// has that _id (docs/deployments.md), and no upsert of this module is
	// so keyed (TestActionsUpsertsNotIDOnly).
	_, err = coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "kind", Value: string(a.Kind)}},
		bson.D{{Key: "$set", Value: doc}, {Key: "$currentDate", Value: bson.D{{Key: "at", Value: true}}}},
		options.UpdateOne().SetUpsert(true))
	if err != nil {
		return "", fmt.Errorf("done, but not recorded in %s: %w", h.cfg.actions, mongoutil.WrapErr(ctx, "record the action", err))
	}
	return done, nil
}

// EnsureIndexes creates the indexes of the actions collection
// (DefaultActionsCollection or WithActionsCollection) that the job and lock
// pages read it by: by job or lock, then time. The first action makes
// them. Actions are kept until deleted: they are the audit trail.
func (h *Handler) EnsureIndexes(ctx context.Context) error {
	err := mongoutil.EnsureIndexes(ctx, h.db.Collection(h.cfg.actions), func(string) {},
		mongoutil.Index{Name: "job_at", Keys: bson.D{{Key: "job", Value: 1}, {Key: "at", Value: -1}}},
		mongoutil.Index{Name: "lock_at", Keys: bson.D{{Key: "lock", Value: 1}, {Key: "at", Value: -1}}})
	if err != nil {
		return fmt.Errorf("ui: %w", err)
	}
	return nil
}
