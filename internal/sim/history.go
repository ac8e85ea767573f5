package sim

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/simdb"
	"github.com/mongolock/mongolock/lock"
)

// History is what a run observed: every action taken under a lease, every
// job run, every change the server made, and the instances' lives, at true
// times. The checks read it after the run.
type History struct {
	mu      sync.Mutex
	start   time.Time
	acts    []Act
	runs    []*JobRun
	lives   []*Life
	changes []Change
	ops     []OpAction
	migs    []MigRun
	trace   []traceLine
	// unrecorded are runs whose instance reported that their history
	// record could not be written (the server failed for longer than the
	// scheduler retries it): a gap the checks accept, being reported.
	unrecorded map[firingKey]bool
	// endUnrecorded are runs whose instance reported that their end could
	// not be written to the job document, and when it reported it.
	endUnrecorded map[firingKey]time.Duration
	// spentLease are firings whose start was recorded but whose lease was
	// lost before the job was called, another claim coming meanwhile.
	spentLease map[firingKey]bool
	// movedOn are firings whose start's reply never came and whose claim
	// moved on before the start could be undone: spent if the start
	// applied (a start record of the firing shows it), the taker's to run
	// if not.
	movedOn map[firingKey]bool
}

// Act is one action taken under a lease the actor trusted.
type Act struct {
	At       time.Duration
	Instance string
	LockID   string
	Fence    uint64
	What     string
}

// JobRun is one call of a job's function.
type JobRun struct {
	Job       string
	Scheduled time.Time
	Triggered bool
	Attempt   int
	Fence     uint64
	Keeper    string
	Instance  string
	Began     time.Duration
	Ended     time.Duration // 0 while running, or if its instance died
	Err       error
}

// Life is one instance process: from its start to its death or stop.
type Life struct {
	Name   string
	Slot   int
	Keeper string
	// Offsets are its wall clock's offsets from true time, from the
	// instant each began.
	Offsets []OffsetAt
	Started time.Duration
	Down    time.Duration // 0 while up
	Died    bool          // killed rather than stopped
	// Frozen are the intervals it was stopped or suspended.
	Frozen [][2]time.Duration
	// SchedStarted is when its schedulers started (true time).
	SchedStarted time.Duration
	// Present are the intervals it held a presence lease of its own (one
	// of its Schedulers did, by its events: from Acquired to LeaseLost or
	// Released; an open one ends at 0); presence holds the lock ids held.
	Present  [][2]time.Duration
	presence map[string]bool
	Jobs     []string
}

// present reports whether l held a presence lease at true time t.
func (l *Life) present(t time.Duration) bool {
	for _, p := range l.Present {
		if p[0] <= t && (p[1] == 0 || t < p[1]) {
			return true
		}
	}
	return false
}

// notePresence follows l's presence leases by the event e.
func (l *Life) notePresence(e lock.Event, now time.Duration) {
	if !strings.Contains(e.LockID, "@instance/") || !strings.Contains(e.LockID, "/"+l.Keeper+"/") {
		return
	}
	was := len(l.presence) > 0
	switch e.Kind {
	case lock.Acquired:
		if l.presence == nil {
			l.presence = map[string]bool{}
		}
		l.presence[e.LockID] = true
	case lock.LeaseLost, lock.Released:
		delete(l.presence, e.LockID)
	default:
		return
	}
	switch is := len(l.presence) > 0; {
	case is && !was:
		l.Present = append(l.Present, [2]time.Duration{now, 0})
	case !is && was:
		l.Present[len(l.Present)-1][1] = now
	}
}

// OffsetAt is a clock offset from true time At on.
type OffsetAt struct {
	At, Offset time.Duration
}

// offset is the wall clock's offset at true time t.
func (l *Life) offset(t time.Duration) time.Duration {
	off := l.Offsets[0].Offset
	for _, o := range l.Offsets {
		if o.At <= t {
			off = o.Offset
		}
	}
	return off
}

// Change is a document the server wrote.
type Change struct {
	At   time.Duration
	Link string
	simdb.Change
}

// OpAction is an operator's control, as applied by the server.
type OpAction struct {
	At   time.Duration
	Kind EventKind
	Job  string
	D    time.Duration
	Err  error
}

// MigRun is a migration's Up, called.
type MigRun struct {
	Version  int64
	Instance string
	Fence    uint64
	Began    time.Duration
	Ended    time.Duration
	Err      error
}

func (h *History) now() time.Duration { return time.Since(h.start) }

func (h *History) act(a Act) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a.At = h.now()
	h.acts = append(h.acts, a)
}

func (h *History) runBegan(r *JobRun) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r.Began = h.now()
	h.runs = append(h.runs, r)
}

func (h *History) runEnded(r *JobRun, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r.Ended, r.Err = h.now(), err
}

func (h *History) life(l *Life) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lives = append(h.lives, l)
}

func (h *History) update(fn func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fn()
}

func (h *History) applied(a simdb.Applied) {
	// Called with the server's lock held: only record.
	h.mu.Lock()
	defer h.mu.Unlock()
	at := h.now()
	for _, c := range a.Changed {
		h.changes = append(h.changes, Change{At: at, Link: a.Link, Change: c})
	}
}

// traceLine is a line of the trace and when it was written.
type traceLine struct {
	at   time.Duration
	text string
}

func (h *History) logf(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.trace = append(h.trace, traceLine{at: h.now(), text: fmt.Sprintf(format, args...)})
}

// lines is the trace, in the order of time, and of text among the lines
// written at one instant: goroutines that run at one instant of the
// bubble's clock run in any order, and a line's place among that
// instant's others tells nothing.
func (h *History) lines() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	sorted := slices.Clone(h.trace)
	slices.SortStableFunc(sorted, func(a, b traceLine) int {
		return cmp.Or(cmp.Compare(a.at, b.at), strings.Compare(a.text, b.text))
	})
	out := make([]string, len(sorted))
	for i, l := range sorted {
		out[i] = fmt.Sprintf("%9.3fs  ", l.at.Seconds()) + l.text
	}
	return out
}

// docString shows a document briefly, for traces.
func docString(d bson.D) string {
	b, err := bson.MarshalExtJSON(d, false, false)
	if err != nil {
		return fmt.Sprint(d)
	}
	return string(b)
}
