package sim

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/scheduler"
)

// check verifies the promises over the whole history of a run that ended
// at end (true time), and returns what broke:
//   - no two terms of a lock acted at once, and terms acted in the order
//     of their fences (exclusion);
//   - every new term of a lock document had a larger fence than all
//     before it (fences);
//   - no firing started twice (once);
//   - every firing that fell while an instance could run it ran, or is
//     accounted for by the job's policies or the operator (lost);
//   - no migration ran after it was recorded applied (migrations);
//   - the run history agrees with what ran (records).
func check(s *Sim, end time.Duration) []string {
	h := s.hist
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	out = append(out, checkExclusion(h.acts)...)
	out = append(out, checkFences(h.changes)...)
	out = append(out, checkOnce(h.runs)...)
	out = append(out, checkMigrations(h)...)
	out = append(out, checkRecords(s)...)
	out = append(out, checkLost(s, end)...)
	return out
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

// checkFences checks, on the server's side, that every term a lock
// document began has a larger fence than any before it.
func checkFences(changes []Change) []string {
	last := map[string]uint64{}
	var out []string
	for _, c := range changes {
		if c.Coll != "locks" && c.Coll != "mongolock_locks" {
			continue
		}
		id, ok := c.Doc[0].Value.(string)
		if !ok {
			continue // the clock document
		}
		epoch, _ := asInt(lookupDoc(c.Doc, "epoch"))
		seq, ok := asInt(lookupDoc(c.Doc, "seq"))
		if !ok {
			continue
		}
		f := uint64(epoch)<<32 + uint64(seq)
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
// again; and no version is applied twice unless the first application
// was not recorded (its instance died or lost its lease first).
func checkMigrations(h *History) []string {
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
	return out
}

// checkRecords: every run the history records as having ended ran; every
// run that ended (its instance alive) is recorded; no record stays
// "running" for a run that ended.
func checkRecords(s *Sim) []string {
	h := s.hist
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
		if outcome == string(scheduler.OutcomeSkipped) {
			continue
		}
		attempt, _ := asInt(lookupDoc(d, "attempt"))
		if prev, ok := recorded[k]; !ok || attempt > 1 {
			_ = prev
			recorded[k] = d
		}
		if outcome == string(scheduler.OutcomeSucceeded) && ended[k] == nil {
			out = append(out, fmt.Sprintf("records: history says %s of %s succeeded, but it never ended: %s",
				sched.Time().UTC().Format(time.RFC3339Nano), job, docString(d)))
		}
	}
	for k, r := range ended {
		if _, ok := recorded[k]; !ok && !s.diedBefore(r.Instance, r.Ended+10*s.world.TTL) && !h.unrecorded[firingKey{job: k.job, at: k.at}] {
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
		if _, reported := h.endUnrecorded[firingKey{job: k.job, at: k.at}]; reported {
			// Its instance stopped while the database could not be
			// reached, and said so (checked as it was reported).
			continue
		}
		if r := ended[k]; r != nil && !s.diedBefore(r.Instance, r.Ended+10*s.world.TTL) {
			out = append(out, fmt.Sprintf("records: job %s's document says %s is running (keeper %s), but it ended at %.3fs",
				job, sched.Time().UTC().Format(time.RFC3339Nano), keeper, r.Ended.Seconds()))
		}
	}
	sort.Strings(out)
	return out
}

// diedBefore reports whether instance died (was killed) before t.
func (s *Sim) diedBefore(instance string, t time.Duration) bool {
	for _, l := range s.hist.lives {
		if l.Name == instance {
			return l.Died && l.Down < t
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
