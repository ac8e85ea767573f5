package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/scheduler"
)

// Bounds of the pages' parameters.
const (
	maxPrefix    = 512
	maxLocksRow  = 500
	maxJobsRows  = 500
	maxHistRows  = 200
	minRows      = 10
	actionsShown = 100
)

func (h *Handler) pageOverview(w http.ResponseWriter, r *http.Request) {
	ov, err := h.overview(r.Context())
	if err != nil {
		h.failRead(w, r, err)
		return
	}
	h.render(w, r, ov.Now, "overview", "overview", "Overview", http.StatusOK, ov, "")
}

// rows reads the page size parameter n: def if absent, else from minRows
// to max.
func rows(r *http.Request, def, max int) (int, error) {
	s := r.URL.Query().Get("n")
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < minRows || n > max {
		return 0, fmt.Errorf("n %q: want a number of rows from %d to %d", s, minRows, max)
	}
	return n, nil
}

// locksPage is the data of the locks page.
type locksPage struct {
	Locks []lockView
	// Semaphores groups the slots among Locks by semaphore, by name.
	Semaphores []semaphoreView
	Prefix     string
	Kind       string
	Late       bool
	Next       string // the query of the next page, empty if none
	ReadAt     time.Time
}

// locksScan is a page of the held locks read for the locks page.
type locksScan struct {
	Locks  []lockView
	More   bool
	ReadAt time.Time
}

var lockKinds = []string{"", string(kindJob), string(kindPresence), string(kindElection), string(kindCandidate), string(kindSlot), string(kindOther)}

// semaphoreView is a semaphore as the locks page shows it: the slots of it
// that the page lists, by number. Its n is not shown: it is each caller's
// own (Session.Semaphore), and the database keeps only the slots' locks.
type semaphoreView struct {
	Name   string
	Slots  []lockView
	Held   int // of Slots, those not lapsed
	Lapsed int
}

// groupSemaphores groups the slots among locks by semaphore.
func groupSemaphores(locks []lockView) []semaphoreView {
	var out []semaphoreView
	at := map[string]int{}
	for _, l := range locks {
		if l.Kind != kindSlot {
			continue
		}
		i, ok := at[l.Semaphore]
		if !ok {
			i = len(out)
			at[l.Semaphore] = i
			out = append(out, semaphoreView{Name: l.Semaphore})
		}
		sv := &out[i]
		sv.Slots = append(sv.Slots, l)
		if l.Expired {
			sv.Lapsed++
		} else {
			sv.Held++
		}
	}
	slices.SortFunc(out, func(a, b semaphoreView) int { return strings.Compare(a.Name, b.Name) })
	for _, sv := range out {
		slices.SortFunc(sv.Slots, func(a, b lockView) int { return a.Slot - b.Slot })
	}
	return out
}

func (h *Handler) pageLocks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	prefix, err := trimmed(r, "prefix", maxPrefix)
	if err != nil {
		h.badInput(w, r, "%v", err)
		return
	}
	kind := q.Get("kind")
	if !slices.Contains(lockKinds, kind) {
		h.badInput(w, r, "kind %q: want one of job, instance, election, candidate, slot, other", kind)
		return
	}
	n, err := rows(r, 100, maxLocksRow)
	if err != nil {
		h.badInput(w, r, "%v", err)
		return
	}
	after := q.Get("after")
	pg := locksPage{Prefix: prefix, Kind: kind, Late: q.Get("late") == "1"}
	// The page is of the next snapshotLocks held locks matching the
	// prefix after after: the shared snapshot's on the first page.
	from := prefix
	switch {
	case from == "" && kind == string(kindPresence):
		from = h.cfg.lockPrefix + "@instance/"
	case from == "" && kind == string(kindJob):
		from = h.cfg.lockPrefix
	}
	var scanned []lockView
	var more bool
	if from == "" && after == "" {
		lr, err := h.readLocks(r.Context())
		if err != nil {
			h.failRead(w, r, err)
			return
		}
		scanned, more, pg.ReadAt = lr.Locks, lr.More, lr.ReadAt
	} else {
		pr, err := getItem(r.Context(), h.rd, fmt.Sprintf("locks:%q:%q", from, after), func(ctx context.Context) (locksScan, error) {
			elections, _ := h.readElectionIDs(ctx)
			var sc locksScan
			var err error
			sc.Locks, sc.More, err = h.loadLocks(ctx, from, after, snapshotLocks, elections, &sc.ReadAt)
			return sc, err
		})
		if err != nil {
			h.failRead(w, r, err)
			return
		}
		scanned, more, pg.ReadAt = pr.Locks, pr.More, pr.ReadAt
	}
	for _, l := range scanned {
		if !strings.HasPrefix(l.LockID, prefix) || (kind != "" && string(l.Kind) != kind) || (pg.Late && !l.Late && !l.Expired) {
			continue
		}
		if len(pg.Locks) == n {
			pg.Next = nextPage(r, pg.Locks[n-1].LockID)
			break
		}
		pg.Locks = append(pg.Locks, l)
	}
	if pg.Next == "" && more && len(scanned) > 0 {
		pg.Next = nextPage(r, scanned[len(scanned)-1].LockID)
	}
	pg.Semaphores = groupSemaphores(pg.Locks)
	h.render(w, r, pg.ReadAt, "locks", "locks", "Locks", http.StatusOK, pg, "")
}

// lockPage is the data of a lock's page.
type lockPage struct {
	Actions  []actionRecord // force-releases from the dashboard
	Lock     lockView
	Held     bool
	Terms    []termRow
	TermsErr string
	Source   string // where the terms come from
}

func (h *Handler) pageLock(w http.ResponseWriter, r *http.Request) {
	id := pathOrQuery(r, "id")
	if err := lock.ValidateID("lock id", id); err != nil {
		h.badInput(w, r, "%v", err)
		return
	}
	lr, err := h.readLocks(r.Context())
	if err != nil {
		h.failRead(w, r, err)
		return
	}
	pg := lockPage{}
	if v, found, known := lr.lookup(id); found {
		pg.Lock, pg.Held = v, !v.Expired
	} else {
		var hd lock.Holder
		if !known { // past the snapshot: read it
			if hd, err = h.readHolder(r.Context(), id); err != nil {
				h.failRead(w, r, err)
				return
			}
		}
		elections, _ := h.readElectionIDs(r.Context())
		if hd.LockID == "" {
			hd.LockID = id
		}
		pg.Lock = h.viewLock(hd, elections)
	}
	pg.Source = "the term log (" + h.cfg.terms + ")"
	if pg.Lock.Kind == kindJob {
		pg.Source = "the run history (" + h.cfg.runs + "): each run is a term of the job's lock"
	}
	if pg.Lock.Kind != kindPresence {
		terms, err := h.lockTerms(r.Context(), pg.Lock)
		if err != nil {
			pg.TermsErr = h.cfg.redact(err.Error())
		}
		pg.Terms = terms
	}
	if acts, err := h.lockActions(r.Context(), id); err == nil {
		pg.Actions = acts
	} else if pg.TermsErr == "" {
		pg.TermsErr = h.cfg.redact(err.Error())
	}
	if pg.Lock.KeeperID == "" && pg.Lock.RenewedAt.IsZero() && len(pg.Terms) == 0 && len(pg.Actions) == 0 {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("lock %q: no document in %s.%s and no recorded term", id, h.db.Name(), h.cfg.locks))
		return
	}
	h.render(w, r, lr.ReadAt, "lock", "locks", "Lock "+h.cfg.redact(id), http.StatusOK, pg, "")
}

func (h *Handler) pageElections(w http.ResponseWriter, r *http.Request) {
	lr, err := h.readLocks(r.Context())
	if err != nil {
		h.failRead(w, r, err)
		return
	}
	evs, err := h.elections(r.Context())
	if err != nil {
		h.failRead(w, r, err)
		return
	}
	h.render(w, r, lr.ReadAt, "elections", "elections", "Elections", http.StatusOK, struct {
		Elections []electionView
		Terms     string
	}{evs, h.cfg.terms}, "")
}

func (h *Handler) pageJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	prefix, err := trimmed(r, "prefix", maxPrefix)
	if err != nil {
		h.badInput(w, r, "%v", err)
		return
	}
	after, err := trimmed(r, "after", maxPrefix)
	if err != nil {
		h.badInput(w, r, "%v", err)
		return
	}
	n, err := rows(r, 100, maxJobsRows)
	if err != nil {
		h.badInput(w, r, "%v", err)
		return
	}
	att := q.Get("attention")
	if att != "" && att != "1" {
		h.badInput(w, r, "attention %q: want 1 or nothing", att)
		return
	}
	pg, err := h.jobs(r.Context(), scheduler.RecordsQuery{Prefix: prefix, After: after, Attention: att == "1", Limit: n})
	if err != nil {
		h.failRead(w, r, err)
		return
	}
	if pg.Next != "" {
		pg.Next = nextPage(r, pg.Next)
	}
	h.render(w, r, pg.ReadAt, "jobs", "jobs", "Jobs", http.StatusOK, pg, "")
}

// filters of the history table, by the outcome parameter.
var outcomeFilters = []struct{ Value, Label string }{
	{"", "any outcome"},
	{"ran", "ran (succeeded)"},
	{"failed", "failed"},
	{"retried", "retried attempts"},
	{"skipped", "not run (skipped or misfired)"},
	{"misfired", "misfired"},
}

// jobPage is the data of a job's page.
type jobPage struct {
	Job      jobRow
	Bad      string // why the job's document cannot be read, if it cannot
	Rows     []histRow
	Timeline timeline
	Outcome  string
	From, To string
	N        int
	Older    string // query of the older page, empty if none
	Newer    string
	Newest   string
	Filters  []struct{ Value, Label string }
	Legend   []tlCount
	Pending  bool
	// Name is the job's name when the page's address holds it in its
	// query (a name no path can hold: see namePath), for the page's own
	// links and form; Clear is the address of the page with no filter.
	Name  string
	Clear string
}

// histRow is a row of the history table: a run, or an operator's action.
type histRow struct {
	Run    *runView
	Action *actionRecord
}

// parseWhen reads a time parameter: RFC 3339, or the browser's
// datetime-local value (read in UTC).
func parseWhen(key, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			if t.Year() < 1970 || t.Year() > 9999 {
				break
			}
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%s %q: want a time such as 2026-01-02T15:04 (UTC) or RFC 3339", key, s)
}

// pathOrQuery is the name of the page r asks for: the path's wildcard
// param, else the query's (see namePath).
func pathOrQuery(r *http.Request, param string) string {
	if v := r.PathValue(param); v != "" {
		return v
	}
	return r.URL.Query().Get(param)
}

// nextPage is the query of the page after the one r shows: r's, with
// after.
func nextPage(r *http.Request, after string) string {
	q := r.URL.Query()
	q.Set("after", after)
	q.Del("done")
	return "?" + q.Encode()
}

func (h *Handler) pageJob(w http.ResponseWriter, r *http.Request) {
	name := pathOrQuery(r, "name")
	q := r.URL.Query()
	if name == "" || len(name) > 1024 {
		h.badInput(w, r, "job name: empty or too long")
		return
	}
	hq := scheduler.HistoryQuery{Job: name}
	outcome := q.Get("outcome")
	switch outcome {
	case "":
	case "ran":
		hq.Outcomes = []scheduler.Outcome{scheduler.OutcomeSucceeded}
	case "failed":
		hq.Outcomes = []scheduler.Outcome{scheduler.OutcomeFailed}
	case "retried":
		hq.Retries = true
	case "skipped":
		hq.Outcomes = []scheduler.Outcome{scheduler.OutcomeSkipped}
	case "misfired":
		hq.Outcomes, hq.ReasonPrefix = []scheduler.Outcome{scheduler.OutcomeSkipped}, scheduler.ReasonMisfired
	default:
		h.badInput(w, r, "outcome %q: want ran, failed, retried, skipped or misfired", outcome)
		return
	}
	var err error
	if hq.From, err = parseWhen("from", q.Get("from")); err != nil {
		h.badInput(w, r, "%v", err)
		return
	}
	if hq.To, err = parseWhen("to", q.Get("to")); err != nil {
		h.badInput(w, r, "%v", err)
		return
	}
	if !hq.From.IsZero() && !hq.To.IsZero() && !hq.From.Before(hq.To) {
		h.badInput(w, r, "from must be before to")
		return
	}
	if hq.Limit, err = rows(r, DefaultPageSize, maxHistRows); err != nil {
		h.badInput(w, r, "%v", err)
		return
	}
	if c := q.Get("c"); c != "" {
		cur, err := scheduler.ParseHistoryCursor(c)
		if err != nil {
			h.badInput(w, r, "c %q: not a page of this table (follow the Older and Newer links)", c)
			return
		}
		hq.Cursor = &cur
	}
	ctx := r.Context()
	rec, err := h.readJob(ctx, name)
	var badJob string // the job's document cannot be read: its history can
	switch {
	case errors.Is(err, errBadJob):
		badJob, rec = err.Error(), scheduler.Record{Name: name}
	case errors.Is(err, errUnknownJob):
		h.fail(w, r, http.StatusNotFound, err.Error())
		return
	case err != nil:
		h.failRead(w, r, err)
		return
	}
	lr, err := h.readLocks(ctx)
	if err != nil {
		h.failRead(w, r, err)
		return
	}
	load := func(q scheduler.HistoryQuery) (scheduler.HistoryPage, error) {
		return getItem(ctx, h.rd, "hist:"+cacheKey(q), func(ctx context.Context) (scheduler.HistoryPage, error) {
			return h.loadHistoryPage(ctx, q)
		})
	}
	// The timeline: every outcome, up to the table's newest row. On the
	// newest page of every outcome (the page most viewed) the table is the
	// timeline's first rows: one read for both.
	tq := scheduler.HistoryQuery{Job: name, From: hq.From, To: hq.To, Limit: DefaultTimelineSize}
	var page, tpage scheduler.HistoryPage
	if hq.Cursor == nil && outcome == "" && hq.Limit <= tq.Limit {
		if tpage, err = load(tq); err != nil {
			h.failRead(w, r, err)
			return
		}
		page = firstRows(tpage, hq.Limit)
	} else {
		if page, err = load(hq); err != nil {
			h.failRead(w, r, err)
			return
		}
		if page.Newer != nil && len(page.Runs) > 0 {
			upper := page.Runs[0].Scheduled.Add(time.Nanosecond)
			if tq.To.IsZero() || upper.Before(tq.To) {
				tq.To = upper
			}
		}
		if tpage, err = load(tq); err != nil {
			h.failRead(w, r, err)
			return
		}
	}
	// Operators' actions within the span of the page (all of them
	// newer than its oldest row on the newest page).
	var acts, tacts []actionRecord
	if len(tpage.Runs) > 0 || page.Newer == nil {
		var from time.Time
		if n := len(tpage.Runs); n > 0 {
			from = tpage.Runs[n-1].Scheduled
		}
		if tacts, err = h.jobActions(ctx, name, from, tq.To, actionsShown); err != nil {
			h.failRead(w, r, err)
			return
		}
	}
	if outcome == "" {
		var lo, hi time.Time
		if n := len(page.Runs); n > 0 {
			lo = page.Runs[n-1].Scheduled
			if page.Newer != nil {
				hi = page.Runs[0].Scheduled
			}
		}
		if page.Older == nil {
			lo = time.Time{}
		}
		for _, a := range tacts {
			if (lo.IsZero() || !a.At.Before(lo)) && (hi.IsZero() || a.At.Before(hi)) {
				acts = append(acts, a)
			}
		}
	}
	present := presentKeepers(lr)
	retried := make(map[int64]int)
	for _, rs := range [][]scheduler.Run{page.Runs, tpage.Runs} {
		for _, run := range rs {
			k := run.Scheduled.UnixNano()
			retried[k] = max(retried[k], run.Attempt)
		}
	}
	jp := jobPage{Job: h.jobRow(rec, lr), Outcome: outcome, N: hq.Limit, Filters: outcomeFilters, Pending: rec.Pending, Bad: badJob}
	if !hq.From.IsZero() {
		jp.From = hq.From.UTC().Format("2006-01-02T15:04")
	}
	if !hq.To.IsZero() {
		jp.To = hq.To.UTC().Format("2006-01-02T15:04")
	}
	base := url.Values{}
	if r.PathValue("name") == "" {
		base.Set("name", name)
		jp.Name = name
	}
	jp.Clear = "?" + base.Encode()
	for k, v := range map[string]string{"outcome": outcome, "from": q.Get("from"), "to": q.Get("to"), "n": q.Get("n")} {
		if v != "" {
			base.Set(k, v)
		}
	}
	withCursor := func(c *scheduler.HistoryCursor) string {
		v := url.Values{}
		for k, vs := range base {
			v[k] = vs
		}
		if c != nil {
			v.Set("c", c.String())
		}
		return v.Encode()
	}
	if page.Older != nil {
		jp.Older = "?" + withCursor(page.Older)
	}
	if page.Newer != nil {
		jp.Newer = "?" + withCursor(page.Newer)
		jp.Newest = "?" + withCursor(nil)
	}
	// Merge runs and actions, newest first.
	ai := 0
	for i := range page.Runs {
		v := h.viewRun(page.Runs[i], present, retried)
		for ai < len(acts) && acts[ai].At.After(v.Scheduled) {
			jp.Rows = append(jp.Rows, histRow{Action: &acts[ai]})
			ai++
		}
		jp.Rows = append(jp.Rows, histRow{Run: &v})
	}
	for ; ai < len(acts); ai++ {
		jp.Rows = append(jp.Rows, histRow{Action: &acts[ai]})
	}
	tviews := make([]runView, len(tpage.Runs))
	onPage := make(map[string]bool)
	for _, row := range jp.Rows {
		if row.Run != nil {
			onPage[row.Run.Anchor] = true
		}
	}
	for i, run := range tpage.Runs {
		tviews[i] = h.viewRun(run, present, retried)
	}
	link := func(run scheduler.Run) string {
		v := h.viewRun(run, nil, nil)
		if onPage[v.Anchor] {
			return "#" + v.Anchor
		}
		c := scheduler.HistoryCursor{At: run.Scheduled.Add(time.Nanosecond)}
		return "?" + withCursor(&c) + "#" + v.Anchor
	}
	jp.Timeline = h.buildTimeline(rec, tviews, tacts, link)
	jp.Legend = jp.Timeline.Counts
	if len(jp.Legend) == 0 {
		for _, k := range classes {
			jp.Legend = append(jp.Legend, tlCount{Class: k.Class, Symbol: k.Symbol, Label: k.Label, Means: k.Means})
		}
	}
	h.render(w, r, lr.ReadAt, "job", "jobs", "Job "+h.cfg.redact(name), http.StatusOK, jp, "")
}

// cacheKey names a history query in the shared reader.
func cacheKey(q scheduler.HistoryQuery) string {
	c := ""
	if q.Cursor != nil {
		c = q.Cursor.String()
	}
	return fmt.Sprintf("%q|%v|%q|%v|%d|%d|%s|%d", q.Job, q.Outcomes, q.ReasonPrefix, q.Retries, q.From.UnixNano(), q.To.UnixNano(), c, q.Limit)
}

func (h *Handler) pageMigrations(w http.ResponseWriter, r *http.Request) {
	entries, err := h.readMigrations(r.Context())
	if err != nil {
		h.failRead(w, r, err)
		return
	}
	h.render(w, r, time.Time{}, "migrations", "migrations", "Migrations", http.StatusOK, entries, "")
}

// firstRows is the newest page of n rows of p, a newest page of more rows
// read with the same filters: its rows, and the cursor to the older ones.
func firstRows(p scheduler.HistoryPage, n int) scheduler.HistoryPage {
	if len(p.Runs) <= n {
		return scheduler.HistoryPage{Runs: p.Runs, Older: p.Older}
	}
	runs := p.Runs[:n]
	at := runs[n-1].Scheduled
	skip := 0
	for _, r := range runs {
		if r.Scheduled.Equal(at) {
			skip++
		}
	}
	return scheduler.HistoryPage{Runs: runs, Older: &scheduler.HistoryCursor{At: at.UTC(), Skip: skip}}
}
