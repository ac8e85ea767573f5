package sim

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/scheduler"
)

// check verifies the promises over the whole history of a run that ended
// at end (true time), and returns what broke:
//   - no two terms of a lock acted at once, and terms acted in the order
//     of their fences (exclusion);
//   - every new term of a lock document had a larger fence than all
//     before it (fences);
//   - no more terms of the semaphore's slots acted at once than it has
//     slots (semaphore);
//   - no firing started twice (once);
//   - every firing some instance could run within the misfire threshold
//     ran, was spent, or was not run for a reason ground truth bears out
//     (lost), and so was every operator trigger;
//   - no firing ran that a pause, a removal, the overlap or the misfire
//     policy said not to (over-run); no more triggered runs than triggers;
//   - every migration was applied once, and never after it was recorded
//     applied (migrations);
//   - no never-lead candidate held the leader lock (leadership), and no
//     release of it was applied while its term's task still ran
//     (stepdown; leadership.go);
//   - the run history agrees with what ran (records).
//
// It returns too what the loss check judged.
func check(s *Sim, end time.Duration) ([]string, Coverage) {
	h := s.hist
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fateMu.Lock() // a straggler's command may still be sent
	defer h.fateMu.Unlock()
	o := newOracle(s, end)
	var out []string
	out = append(out, checkExclusion(h.acts)...)
	out = append(out, checkFences(h.changes)...)
	sem, semTerms, semFull := checkSemaphore(h.acts)
	out = append(out, sem...)
	out = append(out, checkValues(h.changes, h.lives)...)

	out = append(out, checkLeadership(s)...)
	out = append(out, checkHandovers(s)...)
	out = append(out, checkOnce(h.runs)...)
	out = append(out, o.checkMigrations()...)
	out = append(out, o.checkRecords()...)
	out = append(out, o.checkNotRunRecords()...)
	out = append(out, o.checkLost()...)
	out = append(out, o.checkOverRun()...)
	out = append(out, o.checkTriggers()...)
	o.cov.SemTerms, o.cov.SemFull = semTerms, semFull
	return out, o.cov
}

// term is one term of a lock as its actions show it.
type term struct {
	lockID      string
	fence       uint64
	instance    string
	first, last time.Duration
}

func checkExclusion(acts []Act) []string {
	terms := map[string]map[uint64]*term{}
	for _, a := range acts {
		byFence := terms[a.LockID]
		if byFence == nil {
			byFence = map[uint64]*term{}
			terms[a.LockID] = byFence
		}
		t := byFence[a.Fence]
		if t == nil {
			t = &term{lockID: a.LockID, fence: a.Fence, instance: a.Instance, first: a.At}
			byFence[a.Fence] = t
		}
		if t.instance != a.Instance {
			return []string{fmt.Sprintf("exclusion: lock %q fence %d acted on by %s and %s", a.LockID, a.Fence, t.instance, a.Instance)}
		}
		t.last = a.At
	}
	var out []string
	for _, id := range sortedKeys(terms) {
		var ts []*term
		for _, t := range terms[id] {
			ts = append(ts, t)
		}
		sort.Slice(ts, func(i, k int) bool { return ts[i].first < ts[k].first })
		for i := 1; i < len(ts); i++ {
			prev, t := ts[i-1], ts[i]
			if t.first <= prev.last {
				out = append(out, fmt.Sprintf("exclusion: lock %q: %s (fence %d) acted at %.3fs while %s (fence %d) acted from %.3fs to %.3fs",
					id, t.instance, t.fence, t.first.Seconds(), prev.instance, prev.fence, prev.first.Seconds(), prev.last.Seconds()))
			}
			if t.fence <= prev.fence {
				out = append(out, fmt.Sprintf("fences: lock %q: %s's term (fence %d, from %.3fs) came after %s's (fence %d)",
					id, t.instance, t.fence, t.first.Seconds(), prev.instance, prev.fence))
			}
		}
	}
	return out
}

// lockChange is c's lock id and fence if c wrote a lock document (not
// the clock document, nor one without a fence).
func lockChange(c Change) (id string, fence uint64, ok bool) {
	if c.Coll != lock.DefaultCollection || len(c.Doc) == 0 {
		return "", 0, false
	}
	if id, ok = c.Doc[0].Value.(string); !ok {
		return "", 0, false
	}
	epoch, _ := asInt(lookupDoc(c.Doc, "epoch"))
	seq, ok := asInt(lookupDoc(c.Doc, "seq"))
	return id, uint64(epoch)<<32 + uint64(seq), ok
}

// checkFences checks, on the server's side, that every term a lock
// document began has a larger fence than any before it.
func checkFences(changes []Change) []string {
	last := map[string]uint64{}
	var out []string
	for _, c := range changes {
		id, f, ok := lockChange(c)
		if !ok {
			continue
		}
		if prev, seen := last[id]; seen && f < prev {
			out = append(out, fmt.Sprintf("fences: lock %q went from fence %d to %d at %.3fs", id, prev, f, c.At.Seconds()))
		}
		last[id] = f
	}
	return out
}

// firingKey names a firing, or a triggered run.
type firingKey struct {
	job       string
	at        int64
	triggered bool
}

func keyOfRun(r *JobRun) firingKey {
	return firingKey{job: r.Job, at: r.Scheduled.UnixNano(), triggered: r.Triggered}
}

func checkOnce(runs []*JobRun) []string {
	byFiring := map[firingKey][]*JobRun{}
	for _, r := range runs {
		k := keyOfRun(r)
		byFiring[k] = append(byFiring[k], r)
	}
	var out []string
	for k, rs := range byFiring {
		firsts := 0
		fences := map[uint64]bool{}
		for _, r := range rs {
			fences[r.Fence] = true
			if r.Attempt <= 1 {
				firsts++
			}
		}
		if firsts > 1 || len(fences) > 1 {
			var who []string
			for _, r := range rs {
				who = append(who, fmt.Sprintf("%s (fence %d, attempt %d, at %.3fs)", r.Instance, r.Fence, r.Attempt, r.Began.Seconds()))
			}
			what := "firing"
			if k.triggered {
				what = "triggered run"
			}
			out = append(out, fmt.Sprintf("once: %s %s of %s started twice: %s", what, time.Unix(0, k.at).UTC().Format(time.RFC3339Nano),
				k.job, strings.Join(who, ", ")))
		}
	}
	sort.Strings(out)
	return out
}

// checkMigrations: once a version is recorded applied, its Up never runs
// again; every version is applied (its effect written) once, or again
// only after an application its instance did not record applied (it died,
// froze or lost its lease first, or Up failed); and one is applied if an
// instance stayed up long enough.
func (o *oracle) checkMigrations() []string {
	h := o.h
	applied := map[int64]time.Duration{}
	for _, c := range h.changes {
		if c.Coll != migrations.DefaultCollection {
			continue
		}
		v, _ := asInt(lookupDoc(c.Doc, "_id"))
		if st, _ := lookupDoc(c.Doc, "state").(string); st == string(migrations.StateApplied) {
			if _, ok := applied[v]; !ok {
				applied[v] = c.At
			}
		}
	}
	var out []string
	for _, m := range h.migs {
		if at, ok := applied[m.Version]; ok && m.Began > at {
			out = append(out, fmt.Sprintf("migrations: version %d ran on %s at %.3fs, after it was recorded applied at %.3fs",
				m.Version, m.Instance, m.Began.Seconds(), at.Seconds()))
		}
	}
	// The effects each version's Up wrote, in the order applied.
	effects := map[int64][]Change{}
	for _, c := range h.changes {
		if c.Coll == "effects" {
			v, _ := asInt(lookupDoc(c.Doc, "v"))
			effects[v] = append(effects[v], c)
		}
	}
	for v := int64(1); v <= 2; v++ {
		es := effects[v]
		for i, e := range es {
			if i == 0 {
				continue
			}
			// Twice is a violation where both applications ended in a
			// success their own instances recorded: one that failed (its
			// lease lost, reported; its instance killed) may leave an
			// effect, even one the server applies late, after another
			// instance applied v (the promise: exactly once unless a lost
			// lease is reported).
			prev := es[i-1]
			if o.failedOrGone(prev, v, es[i:]) || o.failedOrGone(e, v, es[i+1:]) {
				continue
			}
			out = append(out, fmt.Sprintf("migrations: version %d applied twice, by %s at %.3fs and by %s at %.3fs, each recorded applied by its instance",
				v, prev.Link, prev.At.Seconds(), e.Link, e.At.Seconds()))
		}
		if len(es) == 0 && o.upLong(10*o.w.TTL) {
			out = append(out, fmt.Sprintf("migrations: version %d never applied, though an instance was up and reached the server for %v", v, 10*o.w.TTL))
		}
	}
	return out
}

// failedOrGone reports whether the application of version v whose effect
// is e did not end in a success recorded by its own instance: the
// migrations collection never had v applied by e's link (its instance
// died, froze or lost its lease first, or Up failed) before that link
// applied v again (later, the effects of v after e): a later application's
// record is not this one's.
func (o *oracle) failedOrGone(e Change, v int64, later []Change) bool {
	until := time.Duration(math.MaxInt64)
	for _, l := range later {
		if l.Link == e.Link {
			until = l.At
			break
		}
	}
	for _, c := range o.h.changes {
		if c.Coll != migrations.DefaultCollection || c.Link != e.Link || c.At < e.At || c.At >= until {
			continue
		}
		id, _ := asInt(lookupDoc(c.Doc, "_id"))
		if st, _ := lookupDoc(c.Doc, "state").(string); id == v && st == string(migrations.StateApplied) {
			return false
		}
	}
	return true
}

// upLong reports whether some instance was up, not frozen and reaching
// the server (its commands' faults within the op timeout, no election)
// for d on end, from its start.
func (o *oracle) upLong(d time.Duration) bool {
	for _, l := range o.h.lives {
		end := l.Down
		if end == 0 {
			end = o.end
		}
		if len(l.Frozen) > 0 {
			end = min(end, l.Frozen[0][0])
		}
		if end-l.Started >= d && o.impaired(l.Name, ^uint64(0), l.Started, l.Started+d) <= o.w.opTimeout() && !o.electing(l.Started, l.Started+d) {
			return true
		}
	}
	return false
}

// checkRecords: every run the history records as having ended ran; every
// run it records as spent had its start applied; every
// run that ended (its instance alive) is recorded; no record stays
// "running" for a run that ended. A record not written is excused only by
// ground truth: its instance died, or stopped, or froze, soon after the
// run's end, with the server out of its reach meanwhile.
func (o *oracle) checkRecords() []string {
	s, h := o.s, o.h
	ended := map[firingKey]*JobRun{}
	for _, r := range h.runs {
		if r.Ended > 0 {
			k := keyOfRun(r)
			if e := ended[k]; e == nil || r.Attempt > e.Attempt {
				ended[k] = r
			}
		}
	}
	var out []string
	recorded := map[firingKey]bson.D{}
	for _, d := range s.srv.Docs(dbName, scheduler.DefaultRunsCollection) {
		job, _ := lookupDoc(d, "job").(string)
		sched, _ := lookupDoc(d, "scheduled").(bson.DateTime)
		trig, _ := lookupDoc(d, "triggered").(bool)
		outcome, _ := lookupDoc(d, "outcome").(string)
		k := firingKey{job: job, at: sched.Time().UnixNano(), triggered: trig}
		switch outcome {
		case string(scheduler.OutcomeSkipped):
			continue
		case string(scheduler.OutcomeSpent):
			// True only of a firing whose start the server applied; and
			// no record of the run's end: an ended run still needs one.
			if len(o.starts[k]) == 0 {
				out = append(out, fmt.Sprintf("records: history says %s of %s is spent, but no start of it applied: %s",
					sched.Time().UTC().Format(time.RFC3339Nano), job, docString(d)))
			}
			o.cov.SpentRecords++
			continue
		}
		recorded[k] = d
		if outcome == string(scheduler.OutcomeSucceeded) && ended[k] == nil {
			out = append(out, fmt.Sprintf("records: history says %s of %s succeeded, but it never ended: %s",
				sched.Time().UTC().Format(time.RFC3339Nano), job, docString(d)))
		}
	}
	for k, r := range ended {
		if _, ok := recorded[k]; !ok && !o.excusedUnwritten(r) {
			out = append(out, fmt.Sprintf("records: %s of %s ran on %s (ended %.3fs) but the history has no record of it",
				time.Unix(0, k.at).UTC().Format(time.RFC3339Nano), k.job, r.Instance, r.Ended.Seconds()))
		}
	}
	for _, d := range s.srv.Docs(dbName, scheduler.DefaultJobsCollection) {
		outcome, _ := lookupDoc(d, "outcome").(string)
		if outcome != string(scheduler.OutcomeRunning) {
			continue
		}
		job, _ := lookupDoc(d, "_id").(string)
		sched, _ := lookupDoc(d, "scheduled").(bson.DateTime)
		trig, _ := lookupDoc(d, "triggered").(bool)
		k := firingKey{job: job, at: sched.Time().UnixNano(), triggered: trig}
		keeper, _ := lookupDoc(d, "keeper").(string)
		if r := ended[k]; r != nil && !o.excusedUnwritten(r) {
			out = append(out, fmt.Sprintf("records: job %s's document says %s is running (keeper %s), but it ended at %.3fs",
				job, sched.Time().UTC().Format(time.RFC3339Nano), keeper, r.Ended.Seconds()))
		}
	}
	sort.Strings(out)
	return out
}

// excusedUnwritten reports whether the records of run r may be missing by
// ground truth: its instance died within 10 TTL of its end, or went down
// (stopped) or froze then while its commands met faults.
func (o *oracle) excusedUnwritten(r *JobRun) bool {
	within := r.Ended + 10*o.w.TTL
	for _, l := range o.h.lives {
		if l.Name != r.Instance {
			continue
		}
		if l.Died && l.Down < within {
			return true
		}
		gone := l.Down > 0 && l.Down < within ||
			slices.ContainsFunc(l.Frozen, func(fr [2]time.Duration) bool { return fr[0] >= r.Ended && fr[0] < within })
		if gone && (o.impaired(l.Name, ^uint64(0), r.Ended, within) > 0 || o.electing(r.Ended, within)) {
			return true
		}
	}
	return false
}

func lookupDoc(d bson.D, key string) any {
	for _, e := range d {
		if e.Key == key {
			return e.Value
		}
	}
	return nil
}

func asInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case float64:
		return int64(n), true
	}
	return 0, false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
