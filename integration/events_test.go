//go:build unix

package integration

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Kinds of event an instance reports.
const (
	evMigrated  = "migrated"   // migrations.Up returned
	evMigration = "migration"  // the test migration's Up ran (its side effect)
	evUp        = "up"         // scheduler and runner started
	evLeadStart = "lead_start" // the leader task started (fence)
	evWork      = "work"       // the leader task tried a fenced write
	evLeadStop  = "lead_stop"  // the leader task's context ended (cause)
	evProbe     = "probe"      // after losing the lease: late renewal and release
	evJob       = "job"        // a cron job ran (job, scheduled)
	evDown      = "down"       // stopped cleanly
	evError     = "error"      // the instance failed
)

// event is one line an instance reports. Times are wall-clock readings of
// the real clock (never the skewed one an instance may be given), which every
// process on the machine shares: they order events across instances.
type event struct {
	Kind   string    `json:"ev"`
	Keeper string    `json:"keeper"`
	At     time.Time `json:"at"`

	Fence     uint64    `json:"fence,omitzero"`
	Job       string    `json:"job,omitzero"`
	Scheduled time.Time `json:"scheduled,omitzero"`
	// Work: when the task checked that it still leads, and whether the
	// fenced write was accepted.
	Checked  time.Time `json:"checked,omitzero"`
	Accepted bool      `json:"accepted,omitzero"`
	// Lead stop: the cause of the task's context, and whether it is
	// lock.ErrLeaseLost.
	Cause string `json:"cause,omitzero"`
	Lost  bool   `json:"lost,omitzero"`
	// Probe: locks the late renewal still held, and whether the late
	// release failed with lock.ErrNotHeld.
	Held    int  `json:"held,omitzero"`
	NotHeld bool `json:"notHeld,omitzero"`
	// Migrated: how long Up waited for another migrator, and how many
	// migrations this instance applied.
	Waited  time.Duration `json:"waited,omitzero"`
	Applied int           `json:"applied,omitzero"`

	Err string `json:"err,omitzero"`
}

func (e event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s", e.At.Format("15:04:05.000"), e.Keeper, e.Kind)
	if e.Fence != 0 {
		fmt.Fprintf(&b, " fence=%d", e.Fence)
	}
	if e.Job != "" {
		fmt.Fprintf(&b, " job=%s@%s", e.Job, e.Scheduled.Format("15:04:05"))
	}
	if e.Kind == evWork {
		fmt.Fprintf(&b, " accepted=%v", e.Accepted)
	}
	if e.Cause != "" {
		fmt.Fprintf(&b, " cause=%q", e.Cause)
	}
	if e.Err != "" {
		fmt.Fprintf(&b, " err=%q", e.Err)
	}
	return b.String()
}

// wallNow is the real clock without its monotonic reading, so that it
// compares with the times other processes report.
func wallNow() time.Time { return time.Now().Round(0) }

// recorder collects the events of every instance of a test, in the order
// they arrive. It is safe for concurrent use.
type recorder struct {
	mu      sync.Mutex
	events  []event
	changed chan struct{} // closed and replaced by every add
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{})} }

func (r *recorder) add(e event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// mark returns the index the next event will have.
func (r *recorder) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// all returns a copy of the events so far.
func (r *recorder) all() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// since returns the events from index from on.
func (r *recorder) since(from int) []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events[min(from, len(r.events)):])
}

// await waits up to d for n events at or after index from that match, and
// returns them. It fails tb, with the events seen, if they do not come.
func (r *recorder) await(tb testing.TB, from, n int, d time.Duration, what string, match func(event) bool) []event {
	tb.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		got := filter(r.events[min(from, len(r.events)):], match)
		changed := r.changed
		r.mu.Unlock()
		if len(got) >= n {
			return got[:n]
		}
		select {
		case <-changed:
		case <-deadline.C:
			tb.Fatalf("waited %v for %d× %s, saw %d; events since:\n%s", d, n, what, len(got), format(r.since(from)))
		}
	}
}

// awaitOne is await for a single event.
func (r *recorder) awaitOne(tb testing.TB, from int, d time.Duration, what string, match func(event) bool) event {
	tb.Helper()
	return r.await(tb, from, 1, d, what, match)[0]
}

func format(evs []event) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Kind == evWork { // too many to be useful
			continue
		}
		b.WriteString("  ")
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}

func filter(evs []event, match func(event) bool) []event {
	var out []event
	for _, e := range evs {
		if match(e) {
			out = append(out, e)
		}
	}
	return out
}

func isKind(kind string) func(event) bool {
	return func(e event) bool { return e.Kind == kind }
}

func isKindBy(kind, keeper string) func(event) bool {
	return func(e event) bool { return e.Kind == kind && e.Keeper == keeper }
}

// span is a period during which one keeper acted as holder of one term.
type span struct {
	Keeper     string
	Fence      uint64
	Start, End time.Time
	Open       bool // no end was reported: End is a bound
}

func (s span) String() string {
	end := s.End.Format("15:04:05.000")
	if s.Open {
		end += "(open)"
	}
	return fmt.Sprintf("%s fence=%d [%s, %s]", s.Keeper, s.Fence, s.Start.Format("15:04:05.000"), end)
}

type termKey struct {
	keeper string
	fence  uint64
}

// terms returns one span per leader term, from its lead_start, with each
// later event of the same term passed to update.
func terms(evs []event, update func(e event, s *span)) []span {
	idx := map[termKey]int{}
	var out []span
	for _, e := range evs {
		k := termKey{e.Keeper, e.Fence}
		if e.Kind == evLeadStart {
			idx[k] = len(out)
			out = append(out, span{Keeper: e.Keeper, Fence: e.Fence, Start: e.At, End: e.At})
		} else if i, ok := idx[k]; ok {
			update(e, &out[i])
		}
	}
	return out
}

// leaderTerms returns the leader task's terms: from its start to the end of
// its context. A term with no reported end ends when its process died (from
// deaths) or is still open, and then ends at now.
func leaderTerms(evs []event, deaths map[string]time.Time, now time.Time) []span {
	stopped := map[termKey]bool{}
	out := terms(evs, func(e event, s *span) {
		if e.Kind == evLeadStop {
			s.End = e.At
			stopped[termKey{e.Keeper, e.Fence}] = true
		}
	})
	for i, s := range out {
		if stopped[termKey{s.Keeper, s.Fence}] {
			continue
		}
		if d, ok := deaths[s.Keeper]; ok {
			out[i].End = d
		} else {
			out[i].End, out[i].Open = now, true
		}
	}
	return out
}

// workSpans returns, for each term, the period from its start to its last
// check that it still led before a write: when the holder acted. A paused
// process's term lasts through the pause; what matters is that it does not
// act after it resumed.
func workSpans(evs []event) []span {
	return terms(evs, func(e event, s *span) {
		if e.Kind == evWork && e.Checked.After(s.End) {
			s.End = e.Checked
		}
	})
}

// overlaps returns every pair of spans of different terms that overlap.
func overlaps(spans []span) []string {
	s := slices.Clone(spans)
	sort.Slice(s, func(i, j int) bool { return s[i].Start.Before(s[j].Start) })
	var out []string
	for i := range s {
		for j := i + 1; j < len(s) && s[j].Start.Before(s[i].End); j++ {
			out = append(out, fmt.Sprintf("%v overlaps %v", s[i], s[j]))
		}
	}
	return out
}

// assertNoOverlap fails tb if two spans overlap, and logs them.
func assertNoOverlap(tb testing.TB, what string, spans []span) {
	tb.Helper()
	if bad := overlaps(spans); len(bad) > 0 {
		tb.Errorf("%s: two holders at once:\n  %s", what, strings.Join(bad, "\n  "))
	}
	tb.Logf("%s: %d terms, none overlapping", what, len(spans))
	if len(spans) <= 4 {
		for _, s := range spans {
			tb.Logf("  %v", s)
		}
	}
}

// gaps returns the leaderless periods between consecutive terms.
func gaps(spans []span) []time.Duration {
	s := slices.Clone(spans)
	slices.SortFunc(s, func(a, b span) int { return a.Start.Compare(b.Start) })
	var out []time.Duration
	for i := 1; i < len(s); i++ {
		out = append(out, s[i].Start.Sub(s[i-1].End))
	}
	return out
}

// percentile returns the p-th percentile (0..100) of ds, nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p/100*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

// firingKey identifies a firing of a job by its scheduled time.
type firingKey struct {
	Job       string
	Scheduled time.Time
}

// jobRuns counts the job events by firing.
func jobRuns(evs []event) map[firingKey]int {
	out := map[firingKey]int{}
	for _, e := range evs {
		if e.Kind == evJob {
			out[firingKey{e.Job, e.Scheduled.UTC()}]++
		}
	}
	return out
}

// sortedFirings returns the keys of m in order.
func sortedFirings[V any](m map[firingKey]V) []firingKey {
	keys := make([]firingKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b firingKey) int {
		return cmp.Or(a.Scheduled.Compare(b.Scheduled), strings.Compare(a.Job, b.Job))
	})
	return keys
}
