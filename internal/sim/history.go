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
	leaders []*LeaderTask // leadership.go
	trace   []traceLine
	// sends are the fates each link's plan gave its commands, by link
	// name, in the order sent; inFlight the commands sent and not yet
	// applied (by their first element), for applied to tell a change's
	// fate.
	sends    map[string][]sentCmd
	jobs     []string // the world's jobs, by index
	fateMu   sync.Mutex
	inFlight map[*bson.E]sentCmd
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
	// SchedStarted is when its schedulers started (true time), if
	// SchedUp: they all did.
	SchedStarted time.Duration
	SchedUp      bool
	Jobs         []string
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
	Srv  time.Time // the server's clock when it applied the write
	Link string
	// Sent is the command's sending and fate (zero for a link without a
	// plan: the operator's).
	Sent sentCmd
	simdb.Change
}

// sentCmd is a command a link sent, when (true time) and with what fate.
// Mentions has bit i set if the command names the world's job i (its
// document, lock or history records), and bit 63 if it names a presence
// lock.
type sentCmd struct {
	At       time.Duration
	Fate     simdb.Fate
	Mentions uint64
}

const mentionsPresence = 1 << 63

// mentions tells what of jobs cmd names.
func mentions(cmd bson.D, jobs []string) uint64 {
	var m uint64
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case bson.D:
			for _, e := range x {
				walk(e.Value)
			}
		case bson.A:
			for _, e := range x {
				walk(e)
			}
		case string:
			// The presence locks, and the election's lock: in leader-only
			// mode leading is presence.
			if strings.Contains(x, "@instance/") || x == leaderLockID {
				m |= mentionsPresence
			}
			for i, j := range jobs {
				if namesJob(x, j) {
					m |= 1 << i
				}
			}
		}
	}
	walk(cmd)
	return m
}

// namesJob reports whether x is job j's name, or ends in "/"+j (its lock,
// its document) or begins with j+"@" (a history record's id).
func namesJob(x, j string) bool {
	n := len(j)
	return x == j ||
		len(x) > n && x[len(x)-n-1] == '/' && x[len(x)-n:] == j ||
		len(x) > n && x[n] == '@' && x[:n] == j
}

// faulty reports whether the command met a fault: dropped, its reply
// lost, or late, slow or queued beyond the plan's latencies.
func (c sentCmd) faulty() bool {
	f := c.Fate
	return f.Drop || f.LoseReply || f.Queue > 0 || f.Send > 2*time.Millisecond || f.Reply > 2*time.Millisecond
}

// recordFates wraps plan so that the history keeps each command's fate.
func (h *History) recordFates(link string, plan simdb.Plan) simdb.Plan {
	return func(cmd bson.D) simdb.Fate {
		fate := plan(cmd)
		sc := sentCmd{At: h.now(), Fate: fate, Mentions: mentions(cmd, h.jobs)}
		h.fateMu.Lock()
		if h.inFlight == nil {
			h.inFlight, h.sends = map[*bson.E]sentCmd{}, map[string][]sentCmd{}
		}
		if len(cmd) > 0 && !fate.Drop {
			h.inFlight[&cmd[0]] = sc
		}
		h.sends[link] = append(h.sends[link], sc)
		h.fateMu.Unlock()
		return fate
	}
}

// OpAction is an operator's control, as applied by the server.
type OpAction struct {
	Begin time.Duration // when the operator sent it; At, when it returned
	At    time.Duration
	Kind  EventKind
	Job   string
	D     time.Duration
	Err   error
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
	var sc sentCmd
	if len(a.Command) > 0 {
		h.fateMu.Lock()
		sc = h.inFlight[&a.Command[0]]
		delete(h.inFlight, &a.Command[0])
		h.fateMu.Unlock()
	}
	for _, c := range a.Changed {
		h.changes = append(h.changes, Change{At: at, Srv: a.At, Link: a.Link, Sent: sc, Change: c})
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
