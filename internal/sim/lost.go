package sim

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/scheduler"
)

// The promise the loss checks hold the scheduler to (one definition,
// shared by the scheduler's documentation and this oracle):
//
// Every firing of a job runs at most once. A firing that can start within
// the job's misfire threshold θ of its scheduled time runs (late if need
// be, in order); one that cannot is a misfire, and the job's misfire
// policy decides: skip (recorded as not run), run the latest (of the
// misfires one claim covers, only the latest runs; the others are recorded
// not run), or run all up to a maximum (oldest first). Lateness is judged
// by the server's clock.
//
// The simulation's jobs keep the default policy, run the latest.

// misfireThreshold is θ, the jobs' misfire threshold: the scheduler's
// default, derived from the timings, TTL + 3 × poll interval + 2 × op
// timeout, with the Session's TTL, the poll interval's default (the renew
// interval, TTL/3) and the op timeout the instances set (opTimeout): 6·TTL
// and a second.
func (w World) misfireThreshold() time.Duration {
	t := lock.DefaultTimings(w.TTL)
	return scheduler.MisfireThresholdFor(t, t.RenewInterval, w.opTimeout())
}

// opTimeout is the op timeout every instance's Schedulers set: off the
// whole second firings fall on (offBeat).
func (w World) opTimeout() time.Duration { return 2*w.TTL + offBeat }

// slack absorbs the server clock's millisecond truncation and the few
// milliseconds a command's latencies add, in the oracle's comparisons.
const slack = 20 * time.Millisecond

// Coverage is what the loss check judged in a run (or in many, added).
type Coverage struct {
	// Fell: firings due (by the server's clock) during the run; Judged:
	// those some instance could run (covered), of which Spent had their
	// start applied and then lost to at-most-once (its instance killed
	// or frozen before it could call the job, or the start's reply lost
	// or late).
	// Unrecorded: judged, not run, and skippable by the overlap policy
	// (a run of the job went on when it fell), with no record of it by
	// the end.
	Fell, Judged, Spent, Unrecorded int
	// SpentRecords: history records of runs as spent (OutcomeSpent),
	// each checked against the starts the server applied (checkRecords).
	SpentRecords int
	// Out are the firings not judged, by why.
	Out map[string]int
	// Triggers: operator triggers applied; TriggersJudged, those some
	// instance could run.
	Triggers, TriggersJudged int
	// SemTerms: terms of the semaphore's slots judged (checkSemaphore);
	// SemFull, of those, the ones that began with every slot acting.
	SemTerms, SemFull int
}

func (c *Coverage) add(o Coverage) {
	c.Fell += o.Fell
	c.Judged += o.Judged
	c.Spent += o.Spent
	c.Unrecorded += o.Unrecorded
	c.SpentRecords += o.SpentRecords
	c.Triggers += o.Triggers
	c.TriggersJudged += o.TriggersJudged
	c.SemTerms += o.SemTerms
	c.SemFull += o.SemFull
	for k, n := range o.Out {
		if c.Out == nil {
			c.Out = map[string]int{}
		}
		c.Out[k] += n
	}
}

func (c Coverage) share() float64 {
	if c.Fell == 0 {
		return 1
	}
	return float64(c.Judged) / float64(c.Fell)
}

// String is the coverage in a line, and why the others were not judged.
func (c Coverage) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "firings judged: %s of %s (%.1f %%), %s spent, %s skipped by the overlap policy with no record by the end; spent records checked: %s; triggers judged: %d of %d",
		thousands(c.Judged), thousands(c.Fell), 100*c.share(), thousands(c.Spent), thousands(c.Unrecorded), thousands(c.SpentRecords), c.TriggersJudged, c.Triggers)
	fmt.Fprintf(&b, "; semaphore terms judged: %s, %s of them with every slot taken", thousands(c.SemTerms), thousands(c.SemFull))
	for _, k := range sortedKeys(c.Out) {
		fmt.Fprintf(&b, "\n  not judged, %s: %s", k, thousands(c.Out[k]))
	}
	return b.String()
}

func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + " " + s[i:]
	}
	return s
}

// Why a firing was not judged: its own words, so that the breakdown reads.
const (
	outNotStarted = "no instance registering it up when its clock reached it (started later, or clock ahead)"
	outBehind     = "the instances up had clocks behind by more than θ"
	outStep       = "the instance's clock stepped around it"
	outDown       = "its instances killed or stopped early in θ (more of it left than θ's share for faults)"
	outFrozen     = "its instances frozen within θ, for longer than θ's share for faults or until θ"
	outElection   = "an election longer than θ's share for faults within θ"
	outLink       = "the instances' commands (and elections) faulted beyond θ's share for faults within θ"
	outInOrder    = "the runs of its job's earlier firings, in order after it fell, with the instances' commands' faults, took more than θ's share for faults within θ"
	outHolder     = "the instance whose claim of its job held it in order had its commands faulted beyond θ's share for faults within θ"
	outPaused     = "fell before its job's pause, which was on from when an instance could first start it until θ"
)

// oracle holds what the loss, over-run and record checks read of a run,
// all of it ground truth: the world, the instances' lives, the commands'
// fates, what the server applied, the runs the jobs' functions made.
type oracle struct {
	s        *Sim
	w        World
	h        *History
	horizon  time.Duration // firings due until then are judged
	end      time.Duration // when the instances were stopped
	theta    time.Duration
	maxAhead time.Duration // the largest offset ahead of true time of any instance's clock
	maxBhind time.Duration // and behind
	runs     map[firingKey][]*JobRun
	starts   map[firingKey][]Change
	claims   map[string][]claimChange
	pending  map[string][]pendingSpan
	records  map[string][]notRunRecord
	cov      Coverage
}

// claimChange is a claim of a job applied by the server: at true time at,
// its clock srv, the claim covering firings through through.
type claimChange struct {
	at      time.Duration
	srv     time.Time
	through time.Time
}

// pendingSpan is a span of true time in which a job's document held a
// pending claim by one instance's Session (by): no other claim of the job
// can be made until it settles, so its firings wait for that instance.
type pendingSpan struct {
	from, to time.Duration
	by       string
}

// notRunRecord is a history record of firings not run, first through
// through, written (first) at true time written.
type notRunRecord struct {
	id             string
	first, through time.Time
	reason         string
	written        time.Duration
	doc            bson.D
}

// claimedThrough is the last firing a job document's claim covers (the
// one place that reads the claim's field).
func claimedThrough(doc bson.D) (time.Time, bool) {
	last, ok := lookupDoc(doc, "last").(bson.DateTime)
	return last.Time(), ok
}

func newOracle(s *Sim, end time.Duration) *oracle {
	h := s.hist
	o := &oracle{s: s, w: s.world, h: h, horizon: s.world.Duration, end: end, theta: s.world.misfireThreshold(),
		runs: map[firingKey][]*JobRun{}, starts: map[firingKey][]Change{}, claims: map[string][]claimChange{}, pending: map[string][]pendingSpan{},
		records: map[string][]notRunRecord{}}
	for _, l := range h.lives {
		for _, off := range l.Offsets {
			o.maxAhead = max(o.maxAhead, off.Offset)
			o.maxBhind = max(o.maxBhind, -off.Offset)
		}
	}
	for _, r := range h.runs {
		o.runs[keyOfRun(r)] = append(o.runs[keyOfRun(r)], r)
	}
	written := map[string]time.Duration{}
	for _, c := range h.changes {
		switch c.Coll {
		case scheduler.DefaultJobsCollection:
			job, _ := lookupDoc(c.Doc, "_id").(string)
			o.notePending(job, c)
			if through, ok := claimedThrough(c.Doc); ok {
				cs := o.claims[job]
				if len(cs) == 0 || through.After(cs[len(cs)-1].through) {
					o.claims[job] = append(cs, claimChange{at: c.At, srv: c.Srv, through: through})
				}
			}
			if out, _ := lookupDoc(c.Doc, "outcome").(string); out == string(scheduler.OutcomeRunning) {
				sched, _ := lookupDoc(c.Doc, "scheduled").(bson.DateTime)
				trig, _ := lookupDoc(c.Doc, "triggered").(bool)
				k := firingKey{job: job, at: sched.Time().UnixNano(), triggered: trig}
				if st := o.starts[k]; len(st) == 0 || st[len(st)-1].Link != c.Link || st[len(st)-1].Sent != c.Sent {
					o.starts[k] = append(st, c)
				}
			}
		case scheduler.DefaultRunsCollection:
			id := fmt.Sprint(lookupDoc(c.Doc, "_id"))
			if _, ok := written[id]; !ok {
				written[id] = c.At
			}
		}
	}
	for job, ps := range o.pending {
		if n := len(ps); n > 0 && ps[n-1].to == 0 {
			ps[n-1].to = end
		}
		o.pending[job] = ps
	}
	for _, d := range s.srv.Docs(dbName, scheduler.DefaultRunsCollection) {
		if out, _ := lookupDoc(d, "outcome").(string); out != string(scheduler.OutcomeSkipped) {
			continue
		}
		job, _ := lookupDoc(d, "job").(string)
		first, _ := lookupDoc(d, "scheduled").(bson.DateTime)
		through, _ := lookupDoc(d, "through").(bson.DateTime)
		if through == 0 {
			through = first
		}
		reason, _ := lookupDoc(d, "reason").(string)
		id := fmt.Sprint(lookupDoc(d, "_id"))
		o.records[job] = append(o.records[job], notRunRecord{id: id, first: first.Time(), through: through.Time(),
			reason: reason, written: written[id], doc: d})
	}
	return o
}

// notePending follows the pending claims of job's document through c, a
// write of it the server applied.
func (o *oracle) notePending(job string, c Change) {
	pend, _ := lookupDoc(c.Doc, "pend").(bool)
	by, _ := lookupDoc(c.Doc, "by").(string)
	ps := o.pending[job]
	open := len(ps) > 0 && ps[len(ps)-1].to == 0
	if open && (!pend || ps[len(ps)-1].by != by) {
		ps[len(ps)-1].to = c.At
		open = false
	}
	if pend && !open {
		ps = append(ps, pendingSpan{from: c.At, by: by})
	}
	o.pending[job] = ps
}

// holderImpaired reports whether an instance whose pending claim of job
// held its firings in order at some time in [t, b] had its commands
// faulted beyond budget while it held it, alive and not frozen: the
// firing waited for it (a dead or frozen holder's claim is taken over,
// which θ allows for).
func (o *oracle) holderImpaired(job string, t, b, budget time.Duration) bool {
	for _, p := range o.pending[job] {
		if p.to < t || p.from > b {
			continue
		}
		keeper, _, _ := strings.Cut(p.by, "/")
		for _, l := range o.h.lives {
			if l.Keeper != keeper || l.Started > p.from || l.Down > 0 && l.Down < p.from {
				continue
			}
			to := min(b, p.to)
			if l.Down > 0 {
				to = min(to, l.Down)
			}
			for _, fr := range l.Frozen {
				if fr[0] >= p.from {
					to = min(to, fr[0])
				}
			}
			if from := max(t, p.from); to > from && o.impaired(l.Name, o.jobMask(job), from, to) > budget {
				return true
			}
		}
	}
	return false
}

// srvOffset is how far the server's clock was from true time at true
// time t: the steps of the world's events (the server's own, and a new
// primary's at the end of an election).
func (o *oracle) srvOffset(t time.Duration) time.Duration {
	var off time.Duration
	for _, e := range o.w.Events {
		switch {
		case e.Kind == ServerStep && e.At <= t:
			off += e.D
		case e.Kind == Failover && e.At+e.D <= t:
			off += e.Step
		}
	}
	return off
}

// due is the true time the server's clock read f.
func (o *oracle) due(f time.Time) time.Duration {
	t := f.Sub(epoch)
	return t - o.srvOffset(t)
}

// electing reports whether an election went on at some time in [from, to]
// (the driver finds the new primary a heartbeat after).
func (o *oracle) electing(from, to time.Duration) bool {
	for _, e := range o.w.Events {
		if e.Kind == Failover && e.At <= to && e.At+e.D+time.Second >= from {
			return true
		}
	}
	return false
}

// impaired is for how long, in [from, to], the server was out of link's
// reach for what mask selects (sentCmd.Mentions): each faulty command
// naming it counts from its sending until the client had its answer or
// gave up (the op timeout), a connection error until the driver's next
// heartbeat; a run of faulty commands naming presence locks (renewals)
// from the first's sending to the next clean one's; an election until
// the driver finds the new primary; and also, spans the caller adds. A
// single faulty renewal or poll costs nothing beyond its own delay: the
// next one, a third of a TTL later, makes up for it. A storm
// (World.Storms) counts by its faulty commands, as any other time: counted
// whole, it excused the 95 % of its firings that ran.
func (o *oracle) impaired(link string, mask uint64, from, to time.Duration, also ...[2]time.Duration) time.Duration {
	var sum time.Duration
	for _, sp := range o.impairedSpans(link, mask, from, to, also...) {
		sum += sp[1] - sp[0]
	}
	return sum
}

// impairedSpans are the spans of [from, to] that impaired sums, merged and
// in order.
func (o *oracle) impairedSpans(link string, mask uint64, from, to time.Duration, also ...[2]time.Duration) [][2]time.Duration {
	op := o.w.opTimeout()
	var spans [][2]time.Duration
	add := func(a, b time.Duration) {
		if a < to && b > from {
			spans = append(spans, [2]time.Duration{max(a, from), min(b, to)})
		}
	}
	for _, sp := range also {
		add(sp[0], sp[1])
	}
	outSince := time.Duration(-1) // the first of a run of faulty renewals
	sends := o.h.sends[link]      // in the order sent
	i, _ := slices.BinarySearchFunc(sends, from-op, func(c sentCmd, t time.Duration) int { return cmpDur(c.At, t) })
	for _, c := range sends[i:] {
		if c.At > to || mask == 0 {
			break
		}
		if c.Mentions&mask&^mentionsPresence != 0 && c.faulty() {
			f := c.Fate
			cost := min(f.Send+f.Queue+f.Reply, op)
			if f.Drop || f.LoseReply {
				cost += 500 * time.Millisecond
			}
			add(c.At, c.At+cost)
		} else if c.Fate.Drop {
			// Any command's connection error leaves the link's server
			// unknown until the next heartbeat (simdb's): no command of
			// the job reaches it meanwhile.
			add(c.At+c.Fate.Send, c.At+c.Fate.Send+500*time.Millisecond)
		}
		if mask&mentionsPresence != 0 && c.Mentions&mentionsPresence != 0 {
			switch {
			case c.faulty() && outSince < 0:
				outSince = c.At
			case !c.faulty() && outSince >= 0:
				if c.At-outSince > o.w.TTL/2 {
					add(outSince, c.At)
				}
				outSince = -1
			}
		}
	}
	if outSince >= 0 {
		add(outSince, to)
	}
	for _, e := range o.w.Events {
		if e.Kind == Failover {
			add(e.At, e.At+e.D+500*time.Millisecond)
		}
	}
	slices.SortFunc(spans, func(x, y [2]time.Duration) int { return int(x[0] - y[0]) })
	var merged [][2]time.Duration
	for _, sp := range spans {
		if n := len(merged); n > 0 && sp[0] <= merged[n-1][1] {
			merged[n-1][1] = max(merged[n-1][1], sp[1])
			continue
		}
		merged = append(merged, sp)
	}
	return merged
}

// thawing are the spans l was frozen, each with the renew interval after
// it in which its Session renews its lease (or finds it lost and takes a
// new one): l sends nothing meanwhile, as if its link were cut.
func (o *oracle) thawing(l *Life) [][2]time.Duration {
	var spans [][2]time.Duration
	for _, fr := range l.Frozen {
		if fr[1] > 0 {
			spans = append(spans, [2]time.Duration{fr[0], fr[1] + lock.DefaultTimings(o.w.TTL).RenewInterval})
		}
	}
	return spans
}

// pausedOnceFree reports whether job, not paused or removed when its
// firing fell at true time t, was surely paused or removed from the
// moment l could first start it (when it reached it, a, or once the
// spans of faults that began by then ended) until a poll interval before
// t + θ (b): it fell before the pause, and could not start within θ, since
// a work the pause holds resumes at the first poll after its end.
func (o *oracle) pausedOnceFree(l *Life, job string, t, a, b time.Duration) bool {
	if o.mightBeSuspended(job, t-slack, t+slack) {
		return false // fell while paused (by the server's clock, as firings fall due): its record says so
	}
	free := a
	for _, sp := range o.impairedSpans(l.Name, o.jobMask(job), a, b, o.thawing(l)...) {
		if sp[0] <= free {
			free = max(free, sp[1])
		}
	}
	// A work held by the pause resumes at the poll after its end.
	return o.surelySuspended(job, free, b-lock.DefaultTimings(o.w.TTL).RenewInterval)
}

// stage is how far an instance got in covering a firing: the checks in
// order, and why it failed the first it failed.
var stages = []string{outNotStarted, outBehind, outStep, outDown, outFrozen, outElection, outLink, outInOrder, outHolder, outPaused}

// jobMask selects, in sentCmd.Mentions, the commands that concern job's
// firings: its own and the presence locks'.
func (o *oracle) jobMask(job string) uint64 {
	return mentionsPresence | 1<<slices.Index(o.h.jobs, job)
}

// faultShare is θ's share for faults of commands: what it has beyond a
// TTL and three poll intervals (the takeover of a dead claimant).
func (o *oracle) faultShare() time.Duration {
	return o.theta - o.w.TTL - 3*lock.DefaultTimings(o.w.TTL).RenewInterval
}

// covers reports whether some instance that registers job could run
// firing f (zero for a trigger), due at true time t, by t+θ: it had
// started when it reached the firing (reaches), was not frozen at t + θ,
// its clock did not step, and in [when it reached it, t + θ] its
// commands' faults, elections, its freezes (each with the renew interval
// after it) and the time after its death or stop cost less than θ's share
// for them (faultShare), and still did with the runs of the job's earlier
// firings begun after f fell added (runsAhead: in order, f starts after
// them), and no pause of the job held it from when it could first start
// it until θ (pausedOnceFree). In leader-only worlds, instances that
// never lead are not counted. If none could, why names the stage the best
// of them failed at.
func (o *oracle) covers(job string, f time.Time, t time.Duration) (who string, why string, ok bool) {
	b := t + o.theta
	best := -1
	ahead := o.runsAhead(job, f, t, b)
	for _, l := range o.h.lives {
		if !l.SchedUp || !slices.Contains(l.Jobs, job) || o.w.LeaderOnly && o.w.Candidates != nil && o.w.Candidates[l.Slot].NeverLead {
			// A leader-only job runs only on the leader, and an observer
			// never leads.
			continue
		}
		a := o.reaches(l, t)
		stage := func() int {
			if a < l.SchedStarted {
				// Its clock reached the firing before it started (an
				// instance whose clock is ahead by s reaches it s early).
				return 0
			}
			if a >= b {
				return 1
			}
			for _, off := range l.Offsets[1:] {
				if off.At >= min(a, t)-o.theta && off.At <= b {
					return 2
				}
			}
			for _, fr := range l.Frozen {
				if fr[0] <= b && (fr[1] == 0 || fr[1] >= b) {
					return 4 // frozen until θ
				}
			}
			// θ's share for faults (faultShare), and the TTL a
			// takeover waits for when none is needed (no instance went
			// down or froze since θ before the firing). Its freezes and
			// its death count as faults of all its commands: a short
			// freeze, or a death late in θ, leaves it time enough.
			budget := o.faultShare()
			if !o.anyDownOrFrozen(a-o.theta, b) {
				budget += o.w.TTL
			}
			gone := o.thawing(l)
			if l.Down > 0 && l.Down <= b {
				gone = append(gone, [2]time.Duration{l.Down, b})
			}
			if o.impaired(l.Name, o.jobMask(job), a, b, gone...) > budget {
				switch {
				case o.impaired(l.Name, 0, a, b) > budget:
					return 5 // the election alone
				case l.Down > 0 && b-max(l.Down, a) > budget:
					return 3
				case o.impaired(l.Name, 0, a, b, o.thawing(l)...) > budget:
					return 4
				}
				return 6
			}
			if o.impaired(l.Name, o.jobMask(job), a, b, append(gone, ahead...)...) > budget {
				return 7
			}
			if o.holderImpaired(job, t, b, budget) {
				return 8
			}
			if o.pausedOnceFree(l, job, t, a, b) {
				return 9
			}
			return 10
		}()
		if stage == len(stages) {
			return l.Name, "", true
		}
		best = max(best, stage)
	}
	if best < 0 {
		best = 0
	}
	return "", stages[best], false
}

// runsAhead are the spans of [t, b] in which runs of job's firings before
// f, begun once f fell (t), went on (until their true end, or a TTL after
// their instance died or froze): a claim's work runs its firings in order,
// one at a time, so f starts after them. With OverlapWait and
// OverlapCancel, also the run going on when f fell, which f waits for
// (OverlapSkip skips f then: a record's to confirm). Nothing for a
// trigger's run (f zero), which is its own claim.
func (o *oracle) runsAhead(job string, f time.Time, t, b time.Duration) [][2]time.Duration {
	if f.IsZero() {
		return nil
	}
	waits := slices.ContainsFunc(o.w.Jobs, func(j JobSpec) bool { return j.Name == job && j.Overlap != scheduler.OverlapSkip })
	var out [][2]time.Duration
	for _, sp := range o.spans(job) {
		if sp.key.triggered || sp.key.at >= f.UnixNano() || sp.began >= b ||
			sp.began < t && !(waits && o.heldUntil(sp) > t) {
			continue
		}
		out = append(out, [2]time.Duration{sp.began, min(o.heldUntil(sp), b)})
	}
	return out
}

// reaches is the true time l's Schedulers reach a firing due at true
// time t: they time firings by the server's clock as their Session's
// Locker estimates it, so at t once its first lock command was answered,
// and by l's own clock before that (an instance whose clock is ahead by s
// reaches it s early).
func (o *oracle) reaches(l *Life, t time.Duration) time.Duration {
	sends := o.h.sends[l.Name]
	i, _ := slices.BinarySearchFunc(sends, l.Started, func(c sentCmd, t time.Duration) int { return cmpDur(c.At, t) })
	for _, c := range sends[i:] {
		if c.Mentions&mentionsPresence == 0 || c.Fate.Drop || c.Fate.LoseReply {
			continue
		}
		if c.At+c.Fate.Send+c.Fate.Queue+c.Fate.Reply <= t {
			return t
		}
		break
	}
	return t - l.offset(t)
}

// anyDownOrFrozen reports whether some instance was killed, stopped or
// frozen at some time in [from, to].
func (o *oracle) anyDownOrFrozen(from, to time.Duration) bool {
	for _, l := range o.h.lives {
		if l.Down > 0 && l.Down >= from && l.Down <= to {
			return true
		}
		for _, fr := range l.Frozen {
			if fr[0] <= to && (fr[1] == 0 || fr[1] >= from) {
				return true
			}
		}
	}
	return false
}

// mightBeSuspended reports whether the operator's pause or removal of job
// might have been in effect at some time in [from, to]: from the moment
// the operator sent it until its resume returned (or its end).
func (o *oracle) mightBeSuspended(job string, from, to time.Duration) bool {
	for i, op := range o.h.ops {
		if op.Job != job || op.Kind != OpPause && op.Kind != OpRemove {
			continue
		}
		until := time.Duration(1 << 62)
		if op.Kind == OpPause && op.D > 0 {
			until = op.At + op.D
		}
		for _, r := range o.h.ops[i+1:] {
			if r.Job == job && r.Kind == OpResume {
				until = min(until, r.At)
				break
			}
		}
		if op.Begin <= to+slack && until+slack >= from {
			return true
		}
	}
	return false
}

// surelySuspended reports whether a pause or removal of job was surely in
// effect throughout [from, to]: applied (it returned) before from, and no
// resume sent nor its end reached before to.
func (o *oracle) surelySuspended(job string, from, to time.Duration) bool {
	if to < from {
		return false // run before it was due (a clock ahead): not the pause's
	}
	for i, op := range o.h.ops {
		if op.Job != job || op.Err != nil || op.Kind != OpPause && op.Kind != OpRemove || op.At > from-slack {
			continue
		}
		until := time.Duration(1 << 62)
		if op.Kind == OpPause && op.D > 0 {
			until = op.Begin + op.D
		}
		for _, r := range o.h.ops[i+1:] {
			if r.Job == job && (r.Kind == OpResume || r.Kind == OpPause || r.Kind == OpRemove) {
				until = min(until, r.Begin)
				break
			}
		}
		if until > to+slack {
			return true
		}
	}
	return false
}

// span is when a firing's run went on: its first attempt's start to its
// last attempt's end (0: never ended, its instance killed).
type span struct {
	key          firingKey
	began, ended time.Duration
	instance     string
}

func (o *oracle) spans(job string) []span {
	var out []span
	for k, rs := range o.runs {
		if k.job != job {
			continue
		}
		sp := span{key: k, began: rs[0].Began, ended: rs[0].Ended, instance: rs[0].Instance}
		for _, r := range rs {
			sp.began = min(sp.began, r.Began)
			if r.Ended == 0 || sp.ended != 0 && r.Ended > sp.ended {
				sp.ended = r.Ended
			}
		}
		out = append(out, sp)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].began < out[k].began })
	return out
}

// heldUntil is the true time sp's run stopped holding its job's lock: its
// end, or a TTL after its instance died or froze during it; 1<<62 if
// neither came.
func (o *oracle) heldUntil(sp span) time.Duration {
	end := sp.ended
	if end == 0 {
		end = 1 << 62
	}
	for _, l := range o.h.lives {
		if l.Name != sp.instance || l.Started > sp.began {
			continue
		}
		if l.Down > 0 && l.Down >= sp.began {
			end = min(end, l.Down+o.w.TTL)
		}
		for _, fr := range l.Frozen {
			if fr[0] >= sp.began && fr[0] < end {
				end = min(end, fr[0]+o.w.TTL)
			}
		}
	}
	return end
}

// otherRunGoing reports whether a run of job other than firing f's went on
// at some time in [from, to].
func (o *oracle) otherRunGoing(job string, f time.Time, from, to time.Duration) bool {
	for _, sp := range o.spans(job) {
		if sp.key.at == f.UnixNano() && !sp.key.triggered {
			continue
		}
		if sp.began <= to && (sp.ended == 0 || sp.ended >= from) {
			return true
		}
	}
	return false
}

// runGoingAt reports whether a run of job other than firing f's went on,
// by true time, from before f fell (at t) until after it.
func (o *oracle) runGoingAt(job string, f time.Time, t time.Duration) bool {
	for _, sp := range o.spans(job) {
		if (sp.key.at != f.UnixNano() || sp.key.triggered) && sp.began < t-slack && (sp.ended == 0 || sp.ended > t+slack) {
			return true
		}
	}
	return false
}

// lockHeldByLive reports whether lock id was held on the server, by the
// lock documents' writes, at some time in [from, to], by an instance not
// killed by then: a run still recording its end holds its job's lock.
func (o *oracle) lockHeldByLive(id string, from, to time.Duration) bool {
	var held *Change
	check := func(until time.Duration) bool {
		if held == nil || held.At > to || min(until, held.At+o.w.TTL) < from {
			return false
		}
		for _, l := range o.h.lives {
			if l.Name == held.Link && !(l.Died && l.Down < max(from, held.At)) {
				return true
			}
		}
		return false
	}
	for i := range o.h.changes {
		c := &o.h.changes[i]
		if c.Coll != "locks" || len(c.Doc) == 0 || c.Doc[0].Value != id {
			continue
		}
		if check(c.At) {
			return true
		}
		held = nil
		if _, has := lookupDoc(c.Doc, "kid").(string); has && c.Link != "" {
			held = c
		}
	}
	return check(1 << 62)
}

// spent reports whether firing k's start was applied and then lost to
// at-most-once: its writer was killed or frozen before it could call the
// job, or the start's reply was lost or late (by the command's fate, or
// an election while it was acknowledged: a majority write's reply waits
// for the new primary, seed 29).
func (o *oracle) spent(k firingKey) bool {
	for _, c := range o.starts[k] {
		if c.Sent.faulty() || o.electing(c.Sent.At, c.At+o.w.opTimeout()) {
			return true
		}
		for _, l := range o.h.lives {
			if l.Name != c.Link {
				continue
			}
			until := c.At + o.w.opTimeout()
			if l.Died && l.Down >= c.Sent.At && l.Down <= until {
				return true
			}
			for _, fr := range l.Frozen {
				if fr[0] <= until && (fr[1] == 0 || fr[1] >= c.Sent.At) {
					return true
				}
			}
		}
	}
	return false
}

// confirmed reports whether ground truth bears out rec's reason for not
// running firing f of j, due at true time t.
func (o *oracle) confirmed(j JobSpec, f time.Time, t time.Duration, rec notRunRecord) bool {
	switch r := rec.reason; {
	case strings.HasPrefix(r, scheduler.ReasonPaused), strings.HasPrefix(r, scheduler.ReasonRemoved):
		return o.mightBeSuspended(j.Name, t-o.maxAhead-slack, max(rec.written, t)+slack)
	case strings.HasPrefix(r, scheduler.ReasonRunGoing), strings.HasPrefix(r, scheduler.ReasonBusy), strings.HasPrefix(r, scheduler.ReasonLockHeld):
		return o.overlapMaySkip(j, f, t, strings.HasPrefix(r, scheduler.ReasonLockHeld), rec.written)
	}
	return false
}

// overlapMaySkip reports whether j's overlap policy may skip firing f, due
// at true time t, because another run of j went on (or held its lock)
// when it fell: every overlap policy skips the firings that fall while a
// run goes on, but the one OverlapWait and OverlapCancel let wait; only
// OverlapSkip gives up waiting for a lock held elsewhere (lockHeld), and
// a late firing (a backlog's, or a taker's) tries the lock at its turn:
// held elsewhere then if a live instance's write held it some time
// before its record was written (written).
func (o *oracle) overlapMaySkip(j JobSpec, f time.Time, t time.Duration, lockHeld bool, written time.Duration) bool {
	if lockHeld && j.Overlap != scheduler.OverlapSkip {
		return false
	}
	from, to := t-o.maxAhead-slack, t+o.maxBhind+j.Period/2+slack
	held := to
	if lockHeld {
		held = max(to, written)
	}
	return o.otherRunGoing(j.Name, f, from, to) || o.lockHeldByLive(scheduler.DefaultLockPrefix+j.Name, from, held)
}

func (o *oracle) recordsOf(job string, f time.Time) []notRunRecord {
	var out []notRunRecord
	for _, r := range o.records[job] {
		if !f.Before(r.first) && !f.After(r.through) {
			out = append(out, r)
		}
	}
	return out
}

// firings are job j's firings due (by the server's clock) in (0, horizon].
func (o *oracle) firings(j JobSpec) []time.Time {
	var out []time.Time
	for f := epoch.Add(-20 * time.Minute).Truncate(j.Period); f.Before(epoch.Add(o.horizon + 20*time.Minute)); f = f.Add(j.Period) {
		if t := o.due(f); t > 0 && t <= o.horizon {
			out = append(out, f)
		}
	}
	return out
}

// checkLost checks that every firing some instance could run (covers) ran,
// was spent, or has a record of not running whose reason ground truth
// bears out; it counts what it judged in o.cov.
func (o *oracle) checkLost() []string {
	var out []string
	for _, j := range o.w.Jobs {
		for _, f := range o.firings(j) {
			o.cov.Fell++
			t := o.due(f)
			k := firingKey{job: j.Name, at: f.UnixNano()}
			who, why, ok := o.covers(j.Name, f, t)
			if !ok {
				o.out(why)
				continue
			}
			o.cov.Judged++
			if len(o.runs[k]) > 0 {
				continue
			}
			if o.spent(k) {
				o.cov.Spent++
				continue
			}
			recs := o.recordsOf(j.Name, f)
			if slices.ContainsFunc(recs, func(r notRunRecord) bool { return o.confirmed(j, f, t, r) }) {
				continue
			}
			if len(recs) == 0 && j.Overlap != scheduler.OverlapWait && o.runGoingAt(j.Name, f, t) {
				// Not run as the overlap policy says, a run of the job
				// going on when it fell: its record is late (a backlog's
				// next claim writes it), not a run lost.
				o.cov.Unrecorded++
				continue
			}
			what := "no record of it"
			if len(recs) > 0 {
				what = fmt.Sprintf("recorded as not run: %q", recs[0].reason)
			}
			if st := o.starts[k]; len(st) > 0 {
				what += fmt.Sprintf("; its start was applied for %s at %.3fs, but the job never ran", st[0].Link, st[0].At.Seconds())
			}
			out = append(out, fmt.Sprintf("lost: firing %s of %s (due at %.3fs; %s was up and reached the server until %.3fs) did not run: %s%s",
				f.Format("15:04:05.000"), j.Name, t.Seconds(), who, (t+o.theta).Seconds(), what, o.s.docsAround(j.Name, t)))
		}
	}
	return out
}

func (o *oracle) out(why string) {
	if o.cov.Out == nil {
		o.cov.Out = map[string]int{}
	}
	o.cov.Out[why]++
}

// checkOverRun checks that no firing ran that a pause, a removal, the
// overlap policy (OverlapSkip) or the misfire policy (run the latest) said
// not to run.
func (o *oracle) checkOverRun() []string {
	var out []string
	for _, j := range o.w.Jobs {
		spans := o.spans(j.Name)
		for _, sp := range spans {
			if sp.key.triggered {
				continue
			}
			f := time.Unix(0, sp.key.at).UTC()
			t := o.due(f)
			name := fmt.Sprintf("firing %s of %s (due at %.3fs) ran on %s at %.3fs", f.Format("15:04:05.000"), j.Name, t.Seconds(), sp.instance, sp.began.Seconds())
			// Paused: from before the firing fell and the claim covering
			// it was applied (an instance ahead claims early), until it
			// ran.
			if o.surelySuspended(j.Name, max(t, o.claimedAt(j.Name, f))-slack, sp.began) {
				out = append(out, fmt.Sprintf("over-run: %s, though the job was paused or removed from before it fell and was claimed until then", name))
			}
			// Skip: judged where an instance could decide at the firing's
			// time (covers), not for a firing claimed late, after an
			// outage, once the previous run had ended, nor behind a run
			// whose instance was frozen meanwhile (gone, by the promise).
			if _, _, ok := o.covers(j.Name, f, t); ok && j.Overlap == scheduler.OverlapSkip {
				for _, prev := range spans {
					if prev.key != sp.key && prev.ended > 0 && prev.began < t-o.maxAhead-slack &&
						prev.ended > t+o.maxBhind+j.Period/2+slack && prev.ended <= sp.began &&
						!o.frozenDuring(prev.instance, prev.began, t+o.maxBhind+j.Period/2+slack) &&
						!o.leaseCut(prev.instance, prev.began, prev.ended) {
						out = append(out, fmt.Sprintf("over-run: %s, though the run of %s went on from %.3fs to %.3fs (OverlapSkip)",
							name, time.Unix(0, prev.key.at).UTC().Format("15:04:05.000"), prev.began.Seconds(), prev.ended.Seconds()))
						break
					}
				}
			}
			// Run the latest: a firing already misfired when the claim
			// covering it was applied runs only if no later firing that
			// claim covers had misfired too.
			for _, c := range o.claims[j.Name] {
				if c.through.Before(f) {
					continue
				}
				if c.srv.Sub(f) > o.theta+slack {
					latest := c.srv.Add(-o.theta - slack).Truncate(j.Period)
					if latest.After(c.through) {
						latest = c.through.Truncate(j.Period)
					}
					if latest.After(f) {
						out = append(out, fmt.Sprintf("over-run: %s, a misfire when the claim through %s was applied at %.3fs (server %s), though %s had misfired too (run the latest)",
							name, c.through.Format("15:04:05.000"), c.at.Seconds(), c.srv.Format("15:04:05.000"), latest.Format("15:04:05.000")))
					}
				}
				break
			}
		}
	}
	return out
}

// frozenDuring reports whether instance was stopped or suspended at some
// time in [from, to] for long enough to lose its leases (the renew
// deadline less a renew interval: a renewal may have been sent that long
// before the freeze): a run it went on with may have lost its lease
// meanwhile, and the promise counts such a run gone (its lock waited out,
// the firings after it not the overlap policy's).
func (o *oracle) frozenDuring(instance string, from, to time.Duration) bool {
	t := lock.DefaultTimings(o.w.TTL)
	for _, l := range o.h.lives {
		if l.Name != instance {
			continue
		}
		for _, fr := range l.Frozen {
			long := fr[1] == 0 || fr[1]-fr[0] >= t.RenewDeadline-t.RenewInterval
			if long && fr[0] <= to && (fr[1] == 0 || fr[1] >= from) {
				return true
			}
		}
	}
	return false
}

// leaseCut reports whether instance's renewals were cut off from the
// server (faulty renewals, an election: impairedSpans) at some
// time in [from, to] for long enough to lose its leases, as frozenDuring
// for a freeze: a run it went on with may have lost its lock meanwhile,
// which the promise counts gone.
func (o *oracle) leaseCut(instance string, from, to time.Duration) bool {
	t := lock.DefaultTimings(o.w.TTL)
	for _, sp := range o.impairedSpans(instance, mentionsPresence, from, to+t.RenewDeadline) {
		if sp[0] <= to && sp[1]-sp[0] >= t.RenewDeadline-t.RenewInterval {
			return true
		}
	}
	return false
}

// claimedAt is the true time the first claim of job covering firing f
// was applied (0 if none was).
func (o *oracle) claimedAt(job string, f time.Time) time.Duration {
	for _, c := range o.claims[job] {
		if !c.through.Before(f) {
			return c.at
		}
	}
	return 0
}

// checkTriggers checks that every operator trigger some instance could
// run ran, and that no job ran more triggered runs than it was triggered.
func (o *oracle) checkTriggers() []string {
	var out []string
	for _, j := range o.w.Jobs {
		var trig []OpAction
		for _, op := range o.h.ops {
			if op.Job == j.Name && op.Kind == OpTrigger {
				trig = append(trig, op)
			}
		}
		var runs []span
		for _, sp := range o.spans(j.Name) {
			if sp.key.triggered {
				runs = append(runs, sp)
			}
		}
		if len(runs) > len(trig) {
			out = append(out, fmt.Sprintf("triggers: %s ran %d triggered runs, but was triggered %d times", j.Name, len(runs), len(trig)))
		}
		used := make([]bool, len(runs))
		for i, op := range trig {
			if op.Err != nil || op.At+o.theta > o.horizon {
				continue
			}
			o.cov.Triggers++
			near := slices.ContainsFunc(trig, func(x OpAction) bool { return x != trig[i] && x.At > op.Begin-o.theta && x.Begin < op.At+o.theta })
			if near || o.mightBeSuspended(j.Name, op.Begin-o.theta, op.At+o.theta) {
				continue
			}
			if _, _, ok := o.covers(j.Name, time.Time{}, op.At); !ok {
				continue
			}
			o.cov.TriggersJudged++
			found := false
			for k, sp := range runs {
				if !used[k] && sp.began >= op.Begin {
					used[k], found = true, true
					break
				}
			}
			if !found && o.triggerNotRunConfirmed(j, op) {
				continue // the overlap rule skipped it, as a firing: its record says so, and ground truth bears it out
			}
			if !found {
				out = append(out, fmt.Sprintf("lost: the trigger of %s at %.3fs never ran, though an instance could run it until %.3fs",
					j.Name, op.At.Seconds(), (op.At+o.theta).Seconds()))
			}
		}
	}
	return out
}

// triggerNotRunConfirmed reports whether op, a trigger of j, has a record
// of not running (one whose firing is a trigger, at the trigger's server
// time, applied while op was sent) whose reason ground truth bears out:
// a trigger goes through the overlap rule as a firing does.
func (o *oracle) triggerNotRunConfirmed(j JobSpec, op OpAction) bool {
	for _, rec := range o.records[j.Name] {
		if trig, _ := lookupDoc(rec.doc, "triggered").(bool); !trig {
			continue
		}
		t := o.due(rec.first)
		if t < op.Begin-slack || t > op.At+slack {
			continue
		}
		if o.confirmed(j, rec.first, t, rec) {
			return true
		}
	}
	return false
}

// checkNotRunRecords checks every record of firings not run against what
// ran and what happened: it never stands for a firing that ran, and a
// reason of pause, removal or overlap is borne out.
func (o *oracle) checkNotRunRecords() []string {
	var out []string
	for _, j := range o.w.Jobs {
		for _, rec := range o.records[j.Name] {
			n, bad := 0, ""
			for f := rec.first; !f.After(rec.through) && n < 100000; f, n = f.Add(j.Period), n+1 {
				t := o.due(f)
				if t <= 0 {
					continue
				}
				if rs := o.runs[firingKey{job: j.Name, at: f.UnixNano()}]; len(rs) > 0 {
					out = append(out, fmt.Sprintf("records: firing %s of %s is recorded as not run (%q), but it ran on %s at %.3fs: %s",
						f.Format("15:04:05.000"), j.Name, rec.reason, rs[0].Instance, rs[0].Began.Seconds(), docString(rec.doc)))
					break
				}
				switch r := rec.reason; {
				case strings.HasPrefix(r, scheduler.ReasonPaused), strings.HasPrefix(r, scheduler.ReasonRemoved),
					strings.HasPrefix(r, scheduler.ReasonRunGoing), strings.HasPrefix(r, scheduler.ReasonBusy), strings.HasPrefix(r, scheduler.ReasonLockHeld):
					if bad == "" && !o.confirmed(j, f, t, rec) {
						bad = f.Format("15:04:05.000")
					}
				}
			}
			if bad != "" {
				out = append(out, fmt.Sprintf("records: firing %s of %s is recorded as not run for %q, which did not happen: %s",
					bad, j.Name, rec.reason, docString(rec.doc)))
			}
		}
	}
	return out
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

func cmpDur(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
