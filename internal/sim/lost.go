package sim

import (
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/scheduler"
)

// claimWindow is how long an instance must stay up, and not frozen, after
// its clock reached a firing for the firing to count as one it could
// claim.
const claimWindow = time.Second

// checkLost checks that every firing some instance could claim ran, or is
// accounted for: its start was recorded (spent: its instance died), or the
// history records it as not run for a reason the facts bear out (the
// operator paused or removed the job; the previous run still held the
// lock). A firing recorded as missed, or not recorded at all, while an
// instance could claim it, is lost.
func checkLost(s *Sim, end time.Duration) []string {
	h := s.hist
	w := s.world
	var out []string
	started := map[firingKey][]startRec{} // start records written
	for _, c := range h.changes {
		if c.Coll != scheduler.DefaultJobsCollection {
			continue
		}
		if o, _ := lookupDoc(c.Doc, "outcome").(string); o != string(scheduler.OutcomeRunning) {
			continue
		}
		job, _ := lookupDoc(c.Doc, "_id").(string)
		sched, _ := lookupDoc(c.Doc, "scheduled").(bson.DateTime)
		trig, _ := lookupDoc(c.Doc, "triggered").(bool)
		keeper, _ := lookupDoc(c.Doc, "keeper").(string)
		k := firingKey{job: job, at: sched.Time().UnixNano(), triggered: trig}
		started[k] = append(started[k], startRec{keeper: keeper, at: c.At})
	}
	ran := map[firingKey]bool{}
	for _, r := range h.runs {
		ran[keyOfRun(r)] = true
	}
	skipped := map[string][]bson.D{}
	for _, d := range s.srv.Docs(dbName, scheduler.DefaultRunsCollection) {
		if o, _ := lookupDoc(d, "outcome").(string); o == string(scheduler.OutcomeSkipped) {
			job, _ := lookupDoc(d, "job").(string)
			skipped[job] = append(skipped[job], d)
		}
	}
	// Work still pending at the end, or settled just before it, or
	// claimed, resumed or taken over just before it (a triggered run,
	// which settles no firing: the claim after it covers the firings that
	// fell while it was pending): its firings, and those after it (which
	// the claim after it covers), had no chance to settle.
	tail := 2*w.TTL + 2*time.Second
	pendingAtEnd := map[string][2]time.Time{}
	for _, d := range s.srv.Docs(dbName, scheduler.DefaultJobsCollection) {
		p, _ := lookupDoc(d, "pend").(bool)
		sat, _ := lookupDoc(d, "sat").(bson.DateTime)
		at, _ := lookupDoc(d, "at").(bson.DateTime)
		if p || sat.Time().Sub(epoch) > end-tail-3*time.Second || at.Time().Sub(epoch) > end-tail-3*time.Second {
			job, _ := lookupDoc(d, "_id").(string)
			done, _ := lookupDoc(d, "done").(bson.DateTime)
			last, _ := lookupDoc(d, "last").(bson.DateTime)
			pendingAtEnd[job] = [2]time.Time{done.Time(), last.Time()}
		}
	}
	// When each job's claims passed each firing: a firing can be claimed
	// only before a later one was (claims go forward), so one that no
	// instance reached before then is not due to anyone (an instance
	// whose clock was far ahead claimed past it).
	lasts := map[string][]claimedAt{}
	for _, c := range h.changes {
		if c.Coll != scheduler.DefaultJobsCollection {
			continue
		}
		job, _ := lookupDoc(c.Doc, "_id").(string)
		last, _ := lookupDoc(c.Doc, "last").(bson.DateTime)
		ls := lasts[job]
		if len(ls) == 0 || last.Time().After(ls[len(ls)-1].last) {
			lasts[job] = append(ls, claimedAt{at: c.At, last: last.Time()})
		}
	}
	closed := func(job string, f time.Time) time.Duration {
		for _, l := range lasts[job] {
			if l.last.After(f) {
				return l.at
			}
		}
		return 1 << 62
	}
	for _, j := range w.Jobs {
		p := j.Period
		from := epoch.Add(-20 * time.Minute).Truncate(p)
		to := epoch.Add(end + 20*time.Minute)
		for f := from; f.Before(to); f = f.Add(p) {
			k := firingKey{job: j.Name, at: f.UnixNano()}
			if ran[k] || s.spent(started[k], end-tail) || h.spentLease[k] || h.movedOn[k] && len(started[k]) > 0 {
				continue
			}
			who, reach, ok := s.eligible(j, f, min(end-tail-2*p, closed(j.Name, f)-claimWindow))
			if !ok || s.skewSpread(reach, min(closed(j.Name, f), end)) >= p/2 {
				// Every firing runs only while the instances' clocks
				// agree within half the period (scheduler package,
				// "Clock skew"): beyond, the instance most ahead decides
				// which firings the others may still claim. Until a claim
				// passed the firing: the claim that covers it may be
				// planned by an instance that came up since, by its
				// clock (seed 8: one 8 minutes ahead of the instance the
				// firing fell on).
				continue
			}
			if p, ok := pendingAtEnd[j.Name]; ok && f.After(p[0]) {
				continue
			}
			rec := recordOf(skipped[j.Name], f)
			if rec != nil && s.excused(j, f, reach, rec) || rec == nil && s.overlapped(j, f, reach) {
				continue
			}
			what := "no record of it"
			if rec != nil {
				what = fmt.Sprintf("recorded as not run: %q", lookupDoc(rec, "reason"))
			}
			if st := started[k]; len(st) > 0 {
				what += fmt.Sprintf("; its start was recorded by %s at %.3fs, but the job never ran", st[0].keeper, st[0].at.Seconds())
			}
			out = append(out, fmt.Sprintf("lost: firing %s of %s (due on %s at %.3fs) did not run: %s%s",
				f.Format("15:04:05.000"), j.Name, who, reach.Seconds(), what, s.docsAround(j.Name, reach)))
		}
	}
	return out
}

// startRec is a start record written, by keeper at true time at.
type startRec struct {
	keeper string
	at     time.Duration
}

// spent reports whether one of starts, the start records of a firing
// whose job was never called, is of an instance that died, or was
// stopped or suspended past its lease, soon after it (before it could
// call the job, or undo the start), or came too late in the run (after
// settle) to be judged.
func (s *Sim) spent(starts []startRec, settle time.Duration) bool {
	soon := 5 * s.world.TTL
	for _, st := range starts {
		if st.at > settle {
			return true
		}
		for _, l := range s.hist.lives {
			if l.Keeper != st.keeper || l.Started > st.at || l.Down > 0 && l.Down < st.at {
				continue
			}
			if l.Died && l.Down <= st.at+soon {
				return true
			}
			for _, fr := range l.Frozen {
				if fr[0] >= st.at-s.world.TTL && fr[0] <= st.at+soon {
					return true
				}
			}
		}
	}
	return false
}

// claimedAt: at true time at, a job's last claim became last.
type claimedAt struct {
	at   time.Duration
	last time.Time
}

// eligible reports whether some instance that registers j could claim
// firing f: its clock reached f (at true time reach, before until) while
// its schedulers ran, it was neither frozen nor gone for claimWindow after,
// and, in leader-only mode, it led then.
func (s *Sim) eligible(j JobSpec, f time.Time, until time.Duration) (string, time.Duration, bool) {
	for _, l := range s.hist.lives {
		if l.SchedStarted == 0 {
			continue
		}
		reach := f.Sub(epoch) - l.offset(f.Sub(epoch)-l.Offsets[0].Offset)
		if reach < l.SchedStarted+300*time.Millisecond || reach > until {
			continue
		}
		if l.Down > 0 && reach+claimWindow > l.Down {
			continue
		}
		frozen := false
		for _, fr := range l.Frozen {
			e := fr[1]
			if e == 0 {
				e = 1 << 62
			}
			if fr[0] < reach+claimWindow && e > reach-100*time.Millisecond {
				frozen = true
			}
		}
		if frozen {
			continue
		}
		if s.world.LeaderOnly && !s.led(l.Name, reach, reach+claimWindow) {
			continue
		}
		if !s.world.LeaderOnly && !l.present(reach) {
			// Running, but holding no presence lease (its renewals
			// failed, the database out of its reach): it could claim
			// nothing, and the cluster could not know it was up.
			continue
		}
		return l.Name, reach, true
	}
	return "", 0, false
}

// led reports whether instance led throughout [from, to], by its leader
// task's actions (one every TTL/4 while it leads).
func (s *Sim) led(instance string, from, to time.Duration) bool {
	gap := s.world.TTL/4 + 100*time.Millisecond
	var first, last time.Duration
	var fence uint64
	have := false
	for _, a := range s.hist.acts {
		if a.What != "leader" || a.Instance != instance {
			continue
		}
		if !have || a.Fence != fence || a.At-last > gap {
			if have && first <= from-gap && last >= to {
				return true
			}
			first, fence, have = a.At, a.Fence, true
		}
		last = a.At
	}
	return have && first <= from-gap && last >= to
}

// recordOf returns the record of firings not run that covers f.
func recordOf(recs []bson.D, f time.Time) bson.D {
	for _, d := range recs {
		first, _ := lookupDoc(d, "scheduled").(bson.DateTime)
		through, _ := lookupDoc(d, "through").(bson.DateTime)
		if through == 0 {
			through = first
		}
		if !f.Before(first.Time()) && !f.After(through.Time()) {
			return d
		}
	}
	return nil
}

// excused reports whether the facts bear out rec's reason for not running
// firing f of j, which an instance reached at true time reach.
func (s *Sim) excused(j JobSpec, f time.Time, reach time.Duration, rec bson.D) bool {
	reason, _ := lookupDoc(rec, "reason").(string)
	slack := 2*time.Second + s.maxSkew()
	switch {
	case strings.HasPrefix(reason, scheduler.ReasonPaused), strings.HasPrefix(reason, scheduler.ReasonRemoved):
		// Paused (or removed) when the firing fell, or when a late firing
		// would have started: its record's time.
		decided, _ := lookupDoc(rec, "end").(bson.DateTime)
		return s.suspended(j.Name, reach, slack) || s.suspended(j.Name, decided.Time().Sub(epoch), slack)
	case strings.HasPrefix(reason, scheduler.ReasonLockHeld), strings.HasPrefix(reason, scheduler.ReasonRunGoing):
		// The previous run (or a triggered one, or the setup of a late
		// one) still held the job's lock (until its end was recorded),
		// by the server's documents: from the firing until the record was
		// made (a late firing waits for the lock then; seed 557: behind a
		// late run of the firing before, taken over from a dead claimant).
		decided, _ := lookupDoc(rec, "end").(bson.DateTime)
		until := max(reach+j.Period, decided.Time().Sub(epoch))
		return s.overlapped(j, f, reach) || s.lockHeld(scheduler.DefaultLockPrefix+j.Name, reach-slack, until)
	}
	return false
}

// suspended reports whether the operator had paused or removed job at
// true time t, give or take slack.
func (s *Sim) suspended(job string, t, slack time.Duration) bool {
	var since time.Duration = -1
	for _, op := range s.hist.ops {
		if op.Job != job || op.Err != nil {
			continue
		}
		switch op.Kind {
		case OpPause, OpRemove:
			if op.At <= t+slack {
				since = op.At
				if op.Kind == OpPause && op.D > 0 && op.At+op.D < t-slack {
					since = -1 // that pause had ended
				}
			}
		case OpResume:
			if op.At < t-slack {
				since = -1
			}
		}
	}
	return since >= 0
}

// skewSpread is how far apart the clocks of the instances up at some
// time in [from, to] (true times) were, at any time in it.
func (s *Sim) skewSpread(from, to time.Duration) time.Duration {
	to = max(to, from)
	var lo, hi time.Duration
	first := true
	note := func(off time.Duration) {
		if first || off < lo {
			lo = off
		}
		if first || off > hi {
			hi = off
		}
		first = false
	}
	for _, l := range s.hist.lives {
		if l.Started > to || l.Down > 0 && l.Down < from {
			continue
		}
		note(l.offset(max(from, l.Started)))
		for _, o := range l.Offsets {
			if o.At >= from && o.At <= to {
				note(o.Offset)
			}
		}
	}
	return hi - lo
}

// lockHeld reports whether lock id was held, by the server's documents, at
// some time in [from, to] (true times).
func (s *Sim) lockHeld(id string, from, to time.Duration) bool {
	held := false
	for _, c := range s.hist.changes {
		if c.Coll != "locks" || len(c.Doc) == 0 || c.Doc[0].Value != id {
			continue
		}
		if c.At > to {
			break
		}
		_, has := lookupDoc(c.Doc, "kid").(string)
		if c.At >= from && has {
			return true
		}
		held = has
	}
	return held
}

// overlapped reports whether a run of j, other than f's, went on around
// reach, the true time an instance reached firing f: the previous run
// still held the job's lock, or kept the instances busy. A run lasts from
// its first attempt's start to its last attempt's end (it holds the lock
// between attempts, while it records them).
func (s *Sim) overlapped(j JobSpec, f time.Time, reach time.Duration) bool {
	slack := 2*time.Second + s.maxSkew()
	type span struct{ began, ended time.Duration }
	spans := map[firingKey]*span{}
	for _, r := range s.hist.runs {
		if r.Job != j.Name || r.Scheduled.Equal(f) && !r.Triggered {
			continue
		}
		k := keyOfRun(r)
		sp := spans[k]
		if sp == nil {
			sp = &span{began: r.Began, ended: r.Ended}
			spans[k] = sp
		}
		sp.began = min(sp.began, r.Began)
		if r.Ended == 0 || sp.ended != 0 && r.Ended > sp.ended {
			sp.ended = r.Ended
		}
	}
	for _, sp := range spans {
		if sp.began <= reach+j.Period && (sp.ended == 0 || sp.ended >= reach-slack) {
			return true
		}
	}
	return false
}

func (s *Sim) maxSkew() time.Duration {
	var m time.Duration
	for _, sk := range s.world.Skews {
		m = max(m, sk, -sk)
	}
	return m
}

// docsAround is, for the report of a lost firing of job due at true time
// reach, the writes to job's document and history records from shortly
// before reach on: which claim, start or settle passed the firing by.
func (s *Sim) docsAround(job string, reach time.Duration) string {
	const maxLines = 60
	var b strings.Builder
	n := 0
	for _, c := range s.hist.changes {
		if c.At < reach-3*time.Second || c.At > reach+30*time.Second {
			continue
		}
		id, _ := lookupDoc(c.Doc, "_id").(string)
		of, _ := lookupDoc(c.Doc, "job").(string)
		switch {
		case c.Coll == scheduler.DefaultJobsCollection && id == job,
			c.Coll == scheduler.DefaultRunsCollection && of == job:
		default:
			continue
		}
		if n++; n > maxLines {
			b.WriteString("\n      ... (more)")
			break
		}
		fmt.Fprintf(&b, "\n      %8.3fs %s %s: %s", c.At.Seconds(), c.Link, c.Coll, docString(c.Doc))
	}
	if n == 0 {
		return ""
	}
	return "; writes of its records from 3s before:" + b.String()
}
