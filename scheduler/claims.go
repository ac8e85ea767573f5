package scheduler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/planted"
	"github.com/mongolock/mongolock/lock"
)

// work is what a claim won, or took over, leaves its keeper to do: the
// firings after done up to last, or one run triggered at trig. Until its
// last firing (or the triggered run) has started or been recorded as not
// run, the job's document says the work is pending, and no other firing
// of the job can be claimed: the claims of a job are settled in order, one
// at a time.
type work struct {
	job    string
	keeper string        // whose it is: the claimant that claimed or took it over
	cid    bson.ObjectID // its token: every write of the work matches it
	last   time.Time     // the claimed firing
	// done is the last firing settled before this work's, or since, or
	// the job's registration: the firings of the work are those after
	// it. Zero when the document predates it: then only last.
	done    time.Time
	trig    time.Time // non-zero: the work is the run triggered then
	control controlDoc
	// stamped is the server's time of the work's last claim, resume or
	// takeover (the reply this work came in), and got the local time
	// (wall clock) that reply came: the two tell how far the server's
	// clock is from this instance's, within the round trip the request
	// was sent at the start of (sent).
	stamped, sent, got time.Time
	// prevRun is the job's last run when the claim was made, then the
	// last this work started (work).
	prevRun runDoc
	// went is the Went of the run whose start is written next.
	went []spanDoc
	// specSince is when the job's spec became the one it has (server
	// time; zero if never changed): firings of the spec before then are
	// not its firings (specs.go).
	specSince time.Time
}

// runGoing reports whether one of the job's previous runs, as the claim
// found them (spans), was going at f, past the wait for its lock that
// f's own claim would have made: the overlap policy's to skip (as
// overlapped, for the runs of one work). All are the server's times,
// which firings fall due by.
func (w *work) runGoing(f time.Time, wait time.Duration) bool {
	return goingPast(w.prevRunSpans(), f, wait)
}

// spans are when r and the earlier runs it keeps (Went) went on, by the
// server's clock, oldest first: r's own only if its end is recorded (it
// may be of an instance that died, whose lock is waited out: the firings
// meanwhile run late) and its job was called (not "not run: ...").
func (r *runDoc) spans() []span {
	out := make([]span, 0, len(r.Went)+1)
	for _, sp := range r.Went {
		out = append(out, span{from: sp.From, to: sp.To})
	}
	if !r.Start.IsZero() && !r.End.IsZero() && !strings.HasPrefix(r.Error, notRunError) {
		out = append(out, span{from: r.Start, to: r.End})
	}
	return out
}

// goingPast reports whether one of spans started at or before f and went
// on past f plus wait: the one comparison of runs with a firing that the
// overlap policy skips by (runGoing, overlapped, ranPastWait).
func goingPast(spans []span, f time.Time, wait time.Duration) bool {
	return slices.ContainsFunc(spans, func(sp span) bool {
		return !sp.from.IsZero() && !sp.from.After(f) && sp.to.After(f.Add(wait))
	})
}

// maxWent bounds runDoc.Went.
const maxWent = 16

// wentBefore is Went for the run of firing f that follows r: the spans
// of r and of the runs r keeps that may still skip a firing after f (they
// ended after f, and went on longer than the wait), the newest maxWent. A
// backlog of firings run one after the other so keeps its runs in the
// job's document, and the next claim skips the firings that fell while any
// one of them went on past their wait, not only the last (seeds 153 and
// 323).
func (r *runDoc) wentBefore(f time.Time, wait time.Duration) []spanDoc {
	var out []spanDoc
	for _, sp := range r.spans() {
		if sp.to.After(f) && sp.to.Sub(sp.from) > wait {
			out = append(out, spanDoc{From: sp.from, To: sp.to})
		}
	}
	return out[max(len(out)-maxWent, 0):]
}

// prevRunSpans is when the job's previous runs went on, as the claim found
// them (spans), by the server's clock: a triggered run's too, which
// holds the job's lock as a firing's does.
func (w *work) prevRunSpans() []span {
	return w.prevRun.spans()
}

// serverNow is the server's time at local time now, as w's claim showed
// it: how lateness is judged (misfire.go).
func (w *work) serverNow(now time.Time) time.Time {
	if w.stamped.IsZero() || w.got.IsZero() {
		return now
	}
	return w.stamped.Add(now.Sub(w.got))
}

func (w *work) triggered() bool { return !w.trig.IsZero() }

// at is the firing w's claim is of: its last, or the triggered run.
func (w *work) at() time.Time {
	if w.triggered() {
		return w.trig
	}
	return w.last
}

// is reports whether d's pending claim is w, under any token.
func (w *work) is(d *jobDoc) bool {
	return w != nil && d.By == w.keeper && d.Last.Equal(w.last) && d.PTrig.Equal(w.trig)
}

// workOf is the work d's pending claim leaves to its claimant.
func workOf(d *jobDoc) *work {
	w := &work{job: d.ID, keeper: d.By, cid: d.ClaimID, last: d.Last, trig: d.PTrig, control: d.Control,
		stamped: d.At, prevRun: d.Run, specSince: d.SpecSince}
	if d.Done.After(neverClaimed) {
		w.done = d.Done
	}
	return w
}

// Reasons a firing is recorded as not run, in the history (Run.Reason) and
// in FiringSkipped events, besides those of fire.go.
const (
	// ReasonMisfired: the firing could not start within the misfire
	// threshold of its time, and the job's misfire policy does not run it
	// (misfire.go).
	ReasonMisfired = "misfired"
	// ReasonRunGoing: the firing fell while the job's previous run was
	// still going, and nobody claimed it (the instance running it was
	// busy): the overlap policy (see Overlap) skips it.
	ReasonRunGoing = "previous run still going"
	// ReasonPaused: the job was paused (PauseJob, Scheduler.Pause) at the
	// firing.
	ReasonPaused = "paused"
	// ReasonRemoved: the job was removed (RemoveJob, Scheduler.Remove).
	ReasonRemoved = "removed"
	// ReasonTakenOver: this instance's claim was taken over by another
	// instance, which found this one's lease lapsed; it runs the firing.
	ReasonTakenOver = "claim taken over by another instance"
	// ReasonAbsent: this instance's presence lease, which vouches for its
	// claims, could not be held; it claims nothing until it can.
	ReasonAbsent = "presence lease not held"
)

// step is one thing a claim's work does: run firing at, or record it as
// not run for reason.
type step struct {
	at     time.Time
	reason string // empty: run
}

// reasonHeld is the plan of work that waits: the job is paused, and
// firings it covers that fell before the pause would run.
const reasonHeld = "held"

// maxEnumerated bounds how many firings of one claim's work a plan looks
// at one by one, newest first; older ones are misfires, not recorded
// (MaxRecorded).
const maxEnumerated = 100_000

// plan says what w's work does, at now by this instance's clock: which of
// its firings run, oldest first, and which are recorded as not run, as
// decide says, judging lateness by the server's clock (w.serverNow). Of
// the firings not run, only the newest MaxRecorded get records; the
// oldest of those says how many older ones it stands for.
func (s *Scheduler) plan(j *job, w *work, now time.Time) []step {
	if w.triggered() {
		if w.control.Removed {
			return []step{{at: w.trig, reason: ReasonRemoved}}
		}
		return []step{{at: w.trig}} // an operator asked for it: paused or not
	}
	firings, beyond := s.firingsOf(j, w)
	policy := s.misfirePolicy(j)
	reasons, held := decide(fates{firings: firings, now: w.serverNow(now), threshold: s.threshold,
		policy: policy, control: w.control, runGoing: func(f time.Time) bool { return w.runGoing(f, s.lockWait(j, f)) }})
	if held {
		return []step{{at: w.last, reason: reasonHeld}}
	}
	steps := make([]step, 0, len(firings))
	recorded, more := 0, 0
	for i := len(firings) - 1; i >= 0; i-- {
		reason := reasons[i]
		if reason != "" {
			if recorded == MaxRecorded {
				more += i + 1 // not recorded: the oldest record says so
				break
			}
			recorded++
		}
		steps = append(steps, step{at: firings[i], reason: reason})
	}
	slices.Reverse(steps)
	switch {
	case steps[0].reason == "":
	case beyond:
		steps[0].reason = fmt.Sprintf("%s; and over %d earlier firings, not recorded", steps[0].reason, more)
	case more > 0:
		steps[0].reason = fmt.Sprintf("%s; and %d earlier firings, not recorded", steps[0].reason, more)
	}
	return steps
}

// firingsOf returns the firings of w's work, oldest first: those after
// done (or after the job's spec became this one, if later), up to last,
// at most maxEnumerated of them, and whether there were more.
func (s *Scheduler) firingsOf(j *job, w *work) ([]time.Time, bool) {
	firings := []time.Time{w.last}
	from := w.done
	if !w.specSince.IsZero() && !from.IsZero() && w.specSince.After(from) {
		from = w.specSince
	}
	if from.IsZero() || !nextAfter(j.sched, s.cfg.location, from).Before(w.last) {
		return firings, false // mostly the work is last alone, which one step forward tells
	}
	for x := w.last; ; {
		f := s.prevFiring(j, x.Add(-time.Nanosecond), x.Sub(from))
		if f.IsZero() || !f.After(from) {
			break
		}
		if len(firings) == maxEnumerated {
			slices.Reverse(firings)
			return firings, true
		}
		firings = append(firings, f)
		x = f
	}
	slices.Reverse(firings)
	return firings, false
}

// prevFiring returns the latest firing of j at or before now and at most
// window before it, or the zero time. Schedules only tell the next firing:
// it looks back from now over spans that double, from a second, until one
// holds a firing, then walks forward.
func (s *Scheduler) prevFiring(j *job, now time.Time, window time.Duration) time.Time {
	from := now.Add(-window)
	for d := time.Second; ; d *= 2 {
		t := now.Add(-d)
		if t.Before(from) {
			t = from
		}
		f := nextAfter(j.sched, s.cfg.location, t.Add(-time.Nanosecond))
		if !f.IsZero() && !f.After(now) {
			for {
				n := nextAfter(j.sched, s.cfg.location, f)
				if n.IsZero() || n.After(now) {
					return f
				}
				f = n
			}
		}
		if !t.After(from) {
			return time.Time{}
		}
	}
}

// missedAtStart returns the firing of j that Start claims (and a new
// leader, in leader-only mode): the latest before now, if at most the
// misfire threshold or the policy's window ago. Its claim covers the
// firings since the last claim, each as plan says: a firing that fell
// while no instance was up runs if still within the threshold, and is a
// misfire otherwise.
func (s *Scheduler) missedAtStart(j *job, now time.Time) (time.Time, bool) {
	f := s.prevFiring(j, now, max(s.threshold, s.misfirePolicy(j).Window))
	// A firing before the job's spec became this one's is not the job's
	// (specs.go).
	return f, !f.IsZero() && (j.specFrom.IsZero() || f.After(j.specFrom))
}

// notRun is the record of firings not run.
type notRun struct {
	Run
	silent bool // their FiringSkipped event was emitted already
}

// notRun is the history record of st, a step of j's work that does not
// run.
func (s *Scheduler) notRun(j *job, st step) Run {
	return Run{Job: j.name, Keeper: s.keeper, Scheduled: st.at, Outcome: OutcomeSkipped, Reason: st.reason}
}

// presenceMark begins the lock id of a Scheduler's presence lock (after the
// lock prefix); job names may not begin with it.
const presenceMark = "@instance/"

// presenceID is the lock id of the presence lock of claimant, a
// Scheduler (its Session's keeper id and a suffix of its own: Schedulers
// on one Session each have one), in its jobs collection.
func (s *Scheduler) presenceID(claimant string) string {
	return s.cfg.lockPrefix + presenceMark + s.cfg.jobsColl + "/" + claimant
}

// present reports whether this instance holds its presence lease, taking
// it if it does not: its lease lapsing is how other instances know they
// may take over its claims. A claim made without it could be taken over
// at once.
func (s *Scheduler) present(ctx context.Context) bool {
	if s.cfg.leader != nil {
		// Leader-only: leading is presence (WithLeaderOnly).
		return s.cfg.leader.IsLeader()
	}
	return s.holdPresence(ctx)
}

// holdPresence reports whether this instance holds its presence lease,
// taking it if it does not. A Scheduler takes it when it registers jobs,
// in leader-only mode too, whether it claims anything or not: it also
// tells the other instances that this one is live, and registers its specs
// (takeBack).
func (s *Scheduler) holdPresence(ctx context.Context) bool {
	if s.presenceMu.Lock(ctx) != nil {
		return false
	}
	defer s.presenceMu.Unlock()
	if s.presence != nil && s.presence.Err() == nil {
		return true
	}
	if s.presence != nil {
		// Released before it is taken again: the Session refuses a lock it
		// still holds.
		_ = s.session.ReleaseLocks(context.WithoutCancel(ctx), s.presence)
		s.presence = nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.opTimeout)
	defer cancel()
	t, err := s.session.AcquireLocks(ctx, s.presenceID(s.claimant))
	if err == nil && len(t.Leases) == 1 {
		s.presence = t.Leases[0]
		return true
	}
	return false
}

// absent ends this instance's presence: its claims not started can be
// taken over at once. Called once every firing of the Scheduler is gone.
func (s *Scheduler) absent() {
	_ = s.presenceMu.Lock(context.Background())
	defer s.presenceMu.Unlock()
	if s.presence != nil {
		_ = s.session.ReleaseLocks(context.Background(), s.presence)
		s.presence = nil
	}
}

// pollLoop reads the documents of this instance's jobs every poll
// interval, until ctx ends, and acts on what it finds (pollOnce).
func (s *Scheduler) pollLoop(ctx context.Context) {
	defer close(s.pollDone)
	t := s.clock.NewTicker(s.pollInterval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.session.Done():
			return
		case <-t.Chan():
		case <-s.pollNow:
		}
		s.pollOnce(ctx)
	}
}

func (s *Scheduler) pollInterval() time.Duration {
	if s.cfg.poll > 0 {
		return s.cfg.poll
	}
	return s.session.Timings().RenewInterval
}

// registerJobs registers jobs (their documents, and their specs as the
// ones the cluster follows: specs.go), noting for each when its spec
// became this one's (job.specFrom): the documents are read first, to
// tell whether this registration changes the spec. It reports whether
// the registration was written.
func (s *Scheduler) registerJobs(ctx context.Context, jobs []claimReq) bool {
	names := make([]string, len(jobs))
	for i, r := range jobs {
		names[i] = r.job
	}
	recs, rerr := s.st.records(ctx, names)
	before := make(map[string]Record, len(recs))
	for _, r := range recs {
		before[r.Name] = r
	}
	now, _ := s.now() // holdPresence read the server's clock
	regs := make([]regReq, len(jobs))
	s.mu.Lock()
	for i, r := range jobs {
		since := now
		if j := s.jobs[r.job]; j != nil && !j.regSince.IsZero() {
			since = j.regSince // registered again: its first registration's time
		}
		regs[i] = regReq{claimReq: r, reg: regDoc{Spec: r.spec, By: s.keeper, Claimant: s.claimant, Since: since}}
	}
	s.mu.Unlock()
	if s.st.register(ctx, regs, now) != nil {
		return false // the next poll tries again
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range jobs {
		j := s.jobs[r.job]
		if j == nil {
			continue
		}
		j.registered, j.regSince = true, regs[i].reg.Since
		switch rec, ok := before[r.job]; {
		case rerr != nil:
			j.specFrom = now // not known: no catch-up before this registration
		case ok && rec.Spec != "" && rec.Spec != r.spec && rec.Spec != j.spec:
			j.specFrom = now // this registration changed it
		case ok:
			j.specFrom = rec.SpecSince
		default:
			j.specFrom = now // a new job: no firing before its first registration is its
		}
	}
	return true
}

// takeBack registers again the jobs of docs whose spec was superseded by
// one that no live instance is known to register (takesBack), and returns
// those it registered: so that a job never stops while an instance that
// registers it is up. Nothing is read when no job is superseded; else one
// presence lease is read for each registrant of a spec followed (usually
// one: a stale instance registers all its jobs), and not at all for a
// registrant older than this instance's registration. This instance must
// hold its own presence lease first: that is how the others tell it is
// live, and would take the job back otherwise.
func (s *Scheduler) takeBack(ctx context.Context, docs []jobDoc) map[string]bool {
	type cand struct {
		req    claimReq
		active regDoc
		known  bool
		mine   regDoc
	}
	var cands []cand
	s.mu.Lock()
	leads := s.cfg.leader != nil && s.cfg.leader.IsLeader()
	for i := range docs {
		d := &docs[i]
		j := s.jobs[d.ID]
		if j == nil || !j.registered || d.Hash == "" || d.Hash == j.req.hash() || d.Control.Removed {
			continue
		}
		active, known := d.Regs[regKey(d.Spec)]
		cands = append(cands, cand{req: j.req, active: active, known: known,
			mine: regDoc{Spec: j.req.spec, By: s.keeper, Claimant: s.claimant, Since: j.regSince}})
	}
	s.mu.Unlock()
	if len(cands) == 0 {
		return nil
	}
	live := map[string]bool{} // by claimant, as read in this poll
	var again []claimReq
	for _, c := range cands {
		take := takesBack(c.mine, c.active, c.known, true)
		if s.cfg.leader != nil {
			// Leader-only: only the leader fires, so its spec is the one
			// followed: it takes the job back whoever registered since.
			take = leads
		}
		if !take && s.cfg.leader == nil && c.known && c.active.Claimant != "" {
			up, ok := live[c.active.Claimant]
			if !ok {
				up = s.registrantLive(ctx, c.active)
				live[c.active.Claimant] = up
			}
			take = takesBack(c.mine, c.active, c.known, up)
		}
		if take {
			again = append(again, c.req)
		}
	}
	if len(again) == 0 || !s.holdPresence(ctx) || !s.registerJobs(ctx, again) {
		return nil
	}
	out := make(map[string]bool, len(again))
	for _, r := range again {
		out[r.job] = true
	}
	return out
}

// registrantLive reports whether the Scheduler of reg holds its presence
// lease, as the server's clock judges it: a lease lapsed, released, or
// held by another keeper (taking over its claims) is not live. A read
// that failed counts as live: the next poll looks again.
func (s *Scheduler) registrantLive(ctx context.Context, reg regDoc) bool {
	h, err := s.session.Holder(ctx, s.presenceID(reg.Claimant))
	switch {
	case err == nil:
		return h.KeeperID == reg.By
	case errors.Is(err, lock.ErrNotHeld), errors.Is(err, lock.ErrInvalidArgument):
		return false
	}
	return true
}

// pollOnce reads the documents of this instance's jobs that have work
// pending, a trigger, or were removed, and:
//   - takes over the pending work of keepers whose presence lease lapsed
//     (it acquires their presence locks, so that they can start none of
//     it any more), and does it;
//   - resumes work of its own that no firing here is doing (a write that
//     settled it failed);
//   - claims triggered runs;
//   - cancels a run here that a later firing of an OverlapCancel job
//     waits for;
//   - notes which jobs are removed, so as not to claim their firings.
func (s *Scheduler) pollOnce(ctx context.Context) {
	s.mu.Lock()
	unclocked := s.unclocked()
	names := make([]claimReq, 0, len(s.order))
	var unregistered []claimReq
	for _, j := range s.order {
		names = append(names, j.req)
		if !j.registered {
			unregistered = append(unregistered, j.req)
		}
	}
	s.mu.Unlock()
	if len(names) == 0 {
		return
	}
	qctx, cancel := context.WithTimeout(ctx, s.cfg.opTimeout)
	defer cancel()
	if len(unregistered) > 0 || unclocked {
		// Live from its registration on, whether it claims or not: the
		// other instances judge by it whether the spec it registers is a
		// live one (takeBack). Its reply reads the server's clock, which
		// nothing falls due before (unclocked).
		s.holdPresence(qctx)
	}
	if len(unregistered) > 0 {
		s.registerJobs(qctx, unregistered)
	}
	s.mu.Lock()
	s.catchUpAtStart()
	s.mu.Unlock()
	docs, err := s.st.poll(qctx, names)
	if err != nil {
		return // the next poll tries again
	}
	retaken := s.takeBack(qctx, docs)
	s.mu.Lock()
	byKeeper, removed, superseded, events := s.readClaims(docs, retaken)
	events = append(events, s.noteSpecs(removed, superseded, retaken)...)
	events = append(events, s.leaderStarted()...)
	s.mu.Unlock()
	for _, e := range events {
		s.session.Emit(e)
	}
	for _, keeper := range slices.Sorted(maps.Keys(byKeeper)) {
		s.takeOverFrom(ctx, keeper, byKeeper[keeper])
	}
}

// catchUpAtStart moves the loop's time base (timeBase) and, at the first
// poll after Start, claims the firings missed before it (missedAtStart).
// Called with s.mu held.
func (s *Scheduler) catchUpAtStart() {
	if s.state == stateStarted {
		// The loop's time moves back, or becomes the server's, when a
		// reading of the server's clock says so (holdPresence read it at
		// the first poll): it is checked at each poll, and Start's time is
		// the server's.
		s.timeBase()
	}
	if s.catchUpDue && s.state == stateStarted && !s.unclocked() {
		s.catchUpDue = false
		for _, j := range s.order {
			if f, ok := s.missedAtStart(j, s.startedAt); ok {
				s.dispatch(j, f, true)
			}
		}
	}
}

// readClaims reads a poll's documents: it resumes this instance's claims
// left pending, dispatches triggers, cancels a run that a later claim
// waits for (OverlapCancel), and returns the pending claims of others old
// enough to check their claimant's presence, by claimant, which jobs are
// removed, and which follow another spec than this instance's. Called
// with s.mu held.
func (s *Scheduler) readClaims(docs []jobDoc, retaken map[string]bool) (byKeeper map[string][]string, removed map[string]bool, superseded map[string]string, events []lock.Event) {
	now := s.clock.Now()
	byKeeper, removed = map[string][]string{}, map[string]bool{}
	superseded = map[string]string{} // job → the spec the cluster follows, not this one's
	resumed := 0
	pending := make(map[string]pendingClaim, len(docs))
	for i := range docs {
		d := &docs[i]
		j := s.jobs[d.ID]
		if j == nil {
			continue
		}
		removed[j.name] = d.Control.Removed
		if j.registered && d.Hash != "" && d.Hash != j.req.hash() && !retaken[j.name] {
			superseded[j.name] = d.Spec
		}
		if d.Pending && j.cancel != nil && j.cfg.overlap == OverlapCancel && !j.runWork.is(d) {
			// A later claim waits for the run here: end it.
			j.cancel(ErrOverlapCancelled)
		}
		// A pending claim is old once polls a poll interval apart, by this
		// instance's clock, saw it under one token: never by comparing
		// this instance's clock with the server's claim time, which any
		// skew would throw off. A claim being worked on gets a new token
		// when it is resumed or taken over.
		stale := false
		if d.Pending {
			seen, ok := s.pending[d.ID]
			if !ok || seen.cid != d.ClaimID {
				seen = pendingClaim{cid: d.ClaimID, since: now}
			}
			pending[d.ID] = seen
			stale = now.Sub(seen.since) >= s.pollInterval()
		}
		switch {
		case d.Pending && d.By == s.claimant:
			// Left undone here (a write that settled it failed): resumed
			// once no firing of the job works on a claim here and the
			// claim is old, so that this read cannot be older than the
			// firing that just settled it. A firing still claiming
			// another one does not hold it back: its claim loses while
			// this one is pending (and, won once it settled, waits for the
			// job's lock like any), and the polls of a job whose firings
			// fall in their milliseconds would never resume it (sim seed
			// 1000). One claiming this one (its reply late) works on it.
			// Through admission, as firings are: under a load the server
			// cannot keep up with, many claims are left pending, and
			// resuming them all at each poll would add to the load. One
			// per poll goes ahead regardless, so that none waits for the
			// load to drop (while pending here, its job's firings wait,
			// and no other instance takes it over).
			besides := j.inflight == len(j.claiming) && !slices.ContainsFunc(j.claiming, d.Last.Equal)
			if besides && stale && s.state == stateStarted && (s.admit() || resumed == 0) {
				s.dispatchResume(j, d.ClaimID)
				resumed++
			}
		case d.Pending:
			// Its claimant's presence is checked only once the claim is
			// old: a check is an attempt to take a lock. Work of another
			// spec than this instance's is not taken over here.
			if _, other := superseded[j.name]; stale && !other {
				byKeeper[d.By] = append(byKeeper[d.By], d.ID)
			}
		case !d.Control.Trigger.IsZero() && !d.Control.Removed:
			if e, ok := s.dispatchTrigger(j, d.Control.Trigger); !ok {
				events = append(events, e)
			}
		}
	}
	s.pending = pending
	return byKeeper, removed, superseded, events
}

// noteSpecs records which jobs are removed and which follow another spec
// than this instance's, and reports the changes. Called with s.mu held.
func (s *Scheduler) noteSpecs(removed map[string]bool, superseded map[string]string, retaken map[string]bool) []lock.Event {
	var events []lock.Event
	for _, j := range s.order {
		j.removed = removed[j.name]
		active, other := superseded[j.name]
		switch {
		case other && (!j.superseded || active != j.active):
			events = append(events, lock.Event{Kind: lock.JobSpecSuperseded, Job: j.name, LockID: j.lockID,
				Reason: fmt.Sprintf("the cluster follows spec %q, registered since; this instance's %q does not fire", active, j.req.spec)})
		case !other && j.superseded && retaken[j.name]:
			events = append(events, lock.Event{Kind: lock.JobSpecRestored, Job: j.name, LockID: j.lockID,
				Reason: fmt.Sprintf("no live instance registers spec %q: the cluster follows this instance's spec %q again", j.active, j.req.spec)})
		case !other && j.superseded:
			events = append(events, lock.Event{Kind: lock.JobSpecRestored, Job: j.name, LockID: j.lockID,
				Reason: fmt.Sprintf("the cluster follows this instance's spec %q again", j.req.spec)})
		}
		j.superseded, j.active = other, active
	}
	return events
}

// leaderStarted does for a new leader, in leader-only mode, what Start
// does for missed firings. Called with s.mu held.
func (s *Scheduler) leaderStarted() []lock.Event {
	if s.cfg.leader == nil {
		return nil
	}
	var events []lock.Event
	leads := s.cfg.leader.IsLeader()
	if leads && !s.leading && s.state == stateStarted {
		now := s.timeBase()
		for _, j := range s.order {
			if f, ok := s.missedAtStart(j, now); ok {
				if e, ok := s.dispatch(j, f, true); !ok {
					events = append(events, e)
				}
			}
		}
	}
	s.leading = leads
	return events
}

// takeOverFrom takes over the pending work of keeper in jobs if keeper's
// presence lease has lapsed (or was released): holding keeper's presence
// lock proves that, and while it is held here keeper cannot take it back
// and claim more. The work is reassigned in one conditional write, which
// any start keeper might still attempt loses to, or wins against.
//
// In leader-only mode (WithLeaderOnly) leading is enough: claims are made
// only by leaders, and this instance leads only once the lease of the
// leader before it lapsed or was released.
func (s *Scheduler) takeOverFrom(ctx context.Context, claimant string, jobs []string) {
	if planted.On(planted.NoTakeOver) || !s.present(ctx) { // planted: no takeover
		return
	}
	actx, cancel := context.WithTimeout(ctx, s.cfg.opTimeout)
	defer cancel()
	if s.cfg.leader == nil {
		t, err := s.session.AcquireLocks(actx, s.presenceID(claimant))
		if err != nil || len(t.Leases) != 1 {
			return // alive, or unknown: the next poll looks again
		}
		defer func() { _ = s.session.ReleaseLocks(context.WithoutCancel(ctx), t.Leases...) }()
	}
	sent := s.clock.Now()
	ws, err := s.st.takeOver(actx, jobs, claimant, s.claimant)
	if err != nil {
		return
	}
	got := s.clock.Now()
	for _, w := range ws {
		w.sent, w.got = sent, got
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range ws {
		if j := s.jobs[w.job]; j != nil && s.state == stateStarted {
			s.dispatchWork(j, w, &lock.Event{Kind: lock.FiringTakenOver, Leader: keeperOf(claimant),
				Reason: fmt.Sprintf("claimed by %s, whose lease lapsed", claimant)})
		}
	}
}

// keeperOf is the keeper id of claimant (ClaimantID).
func keeperOf(claimant string) string {
	if i := strings.LastIndexByte(claimant, '/'); i > 0 {
		return claimant[:i]
	}
	return claimant
}

// dispatchWork does w, work of j this instance claimed or took over, in a
// goroutine of its own; taken, if set, is the event to emit first. Called
// with s.mu held.
func (s *Scheduler) dispatchWork(j *job, w *work, taken *lock.Event) {
	j.inflight++
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		b := &busy{}
		defer s.idle(j, b)
		fr := &firing{job: j, at: w.at(), ctx: s.ctx, trig: w.triggered(), busy: b}
		if taken != nil {
			s.emit(fr, *taken)
		}
		s.work(fr, w)
	}()
}

// dispatchResume resumes, in a goroutine of its own, the pending work of j
// that this Scheduler claimed under token cid and no firing here is doing:
// if the claim still has that token (a read can be older than the firing
// that settled it), it gives it a new one and does the work. Called with
// s.mu held.
func (s *Scheduler) dispatchResume(j *job, cid bson.ObjectID) {
	j.inflight++
	s.setups++ // a setup, as a firing's (admission)
	j.setups++
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		b := &busy{}
		defer s.idle(j, b)
		fr := &firing{job: j, ctx: s.ctx, dispatched: s.clock.Now(), counted: true, busy: b}
		defer s.setupDone(fr)
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.opTimeout)
		sent := s.clock.Now()
		w, err := s.st.resume(ctx, j.name, s.claimant, cid)
		cancel()
		if w != nil {
			w.sent, w.got = sent, s.clock.Now()
		}
		if err != nil || w == nil {
			return // settled meanwhile, or the next poll tries again
		}
		fr.at, fr.trig = w.at(), w.triggered()
		s.work(fr, w)
	}()
}

// dispatchTrigger claims and does the run of j triggered at t, unless a
// firing of j is in progress here (the next poll tries again). Called with
// s.mu held.
func (s *Scheduler) dispatchTrigger(j *job, t time.Time) (lock.Event, bool) {
	if s.state != stateStarted || j.inflight > 0 {
		return lock.Event{}, true
	}
	j.inflight++
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		b := &busy{}
		defer s.idle(j, b)
		fr := &firing{job: j, at: t, ctx: s.ctx, trig: true, busy: b}
		if !s.present(s.ctx) {
			return
		}
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.opTimeout)
		sent := s.clock.Now()
		w, err := s.st.claimTrigger(ctx, j.name, t, s.claimant)
		cancel()
		if w != nil {
			w.sent, w.got = sent, s.clock.Now()
		}
		if err != nil || w == nil {
			return // claimed elsewhere, or the next poll tries again
		}
		s.emit(fr, lock.Event{Kind: lock.FiringClaimed, Reason: "triggered"})
		s.work(fr, w)
	}()
	return lock.Event{}, true
}

// work does w: runs or records as not run each firing it covers, in order
// (plan), and settles it. It stops early if w was taken over.
func (s *Scheduler) work(fr *firing, w *work) {
	j := fr.job
	steps := s.plan(j, w, s.clock.Now())
	if len(steps) == 1 && steps[0].reason == reasonHeld {
		// Left pending: the next poll resumes it and plans again; once
		// the pause ended, each firing's event comes. A pause is told by
		// its own events.
		return
	}

	var skipped []notRun // records of firings not run, written once certain
	prev := w.done       // the last firing settled
	lastStarted := false
	lastEnded := false // the last step, fr's firing, did not start: its event is out
	// The runs of the job known to have gone on: the one the claim found
	// ended, and this work's own. A firing that fell while one of them
	// went on past its lock wait is the overlap policy's (overlapped),
	// whenever it comes to run: late, after a backlog, as on time. (Not
	// the run the claim found still going: when its lock came free tells
	// nothing of when it ended if its instance was frozen or dead, whose
	// lock is waited out, not skipped: TestLeaderOnlyLeaderKilled lost a
	// firing so.)
	runs := w.prevRunSpans()
	for i, st := range steps {
		switch {
		case st.reason != "" || w.triggered():
		case s.overlapped(j, runs, st.at):
			st.reason = ReasonRunGoing
		case i > 0 && s.misfiredSince(j, steps[i:], w.serverNow(s.clock.Now())):
			st.reason = ReasonMisfired
		}
		if st.reason != "" {
			skipped = append(skipped, notRun{Run: s.notRun(j, st)})
			continue
		}
		run := s.stepFiring(fr, steps, i, prev)
		res := s.runOne(run, w, skipped)
		runs = append(runs, run.waitedOut.spans()...) // the run run's lock came free from, and those it kept
		if res.started {
			runs = append(runs, w.prevRun.spans()...) // runLocked's: this run's, and those it kept
		}
		switch {
		case res.takenOver:
			return // the taker records what is left
		case res.started:
			skipped = skipped[:0] // recorded with the run: its start settled them
			lastStarted = i == len(steps)-1
			prev = st.at
		case s.ctx.Err() != nil || strings.HasPrefix(res.reason, ReasonStopping):
			return // stopping, or the Session closed: what is left is taken over
		case strings.HasPrefix(res.reason, ReasonNoLock) || strings.HasPrefix(res.reason, ReasonNoStart):
			// The database failed, or the lease was lost before the
			// start (a pause): left pending, for the next poll to resume
			// (or another instance to take over, if this one dies),
			// rather than given up.
			return
		default:
			// Not run (its event said why): recorded with the others once
			// certain, without a second event.
			r := s.notRun(j, step{at: st.at, reason: res.reason})
			r.Triggered = run.trig
			skipped = append(skipped, notRun{Run: r, silent: true})
			lastEnded = i == len(steps)-1
		}
		if s.ctx.Err() != nil {
			return // stopping: what is left is taken over
		}
	}
	if !lastStarted && s.settleWork(fr, w, skipped, lastEnded) && fr.busy != nil {
		fr.busy.settled = true
	}
}

// stepFiring is the firing that runs step i of steps, fr's work: fr itself
// for its own firing first, else one of its own, prev the last firing
// settled before it.
func (s *Scheduler) stepFiring(fr *firing, steps []step, i int, prev time.Time) *firing {
	st := steps[i]
	run := fr
	run.prev = prev
	if i > 0 || !st.at.Equal(fr.at) {
		run = &firing{job: fr.job, at: st.at, ctx: s.ctx, trig: fr.trig, dispatched: fr.dispatched, counted: fr.counted, prev: prev, busy: fr.busy}
		fr.counted = false // its setup is this run's now
		if i > 0 && !fr.dispatched.IsZero() {
			// Its setup begins now: the runs before it are no load
			// (admission).
			run.dispatched = s.clock.Now()
		}
	}
	run.last = i == len(steps)-1
	run.next = nextToRun(steps[i+1:])
	return run
}

// settleWork settles w, whose last firing did not start, and records the
// firings it did not run (skipped); lastEnded says the last one's event
// is out already. It reports whether w settled here.
func (s *Scheduler) settleWork(fr *firing, w *work, skipped []notRun, lastEnded bool) bool {
	// Tried again when its outcome is unknown: the records of the firings
	// not run are written only once it is certain the work settled (a
	// taker may run them meanwhile, and its run records must not be
	// overwritten), and a settle that applied with its reply lost is told
	// by its token (store.settle) only until a later claim replaces it;
	// without a retry they would be left unwritten for good (seed 946:
	// three paused firings had no record).
	var ok bool
	var err error
	for try := 0; try < 3; try++ {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(fr.ctx), s.cfg.opTimeout)
		ok, err = s.st.settle(ctx, w)
		cancel()
		if err == nil || s.ctx.Err() != nil {
			break
		}
	}
	switch {
	case lastEnded && (err != nil || !ok):
		// fr's firing ended here already; the next poll resumes the work,
		// or the taker does it.
		return false
	case err != nil:
		// Still pending and this keeper's: the next poll resumes it.
		s.emit(fr, skip(ReasonNoStart, fmt.Errorf("settle: %w", err)))
		return false
	case !ok:
		s.emit(fr, skip(ReasonTakenOver, nil))
		return false
	}
	s.recordNotRun(fr, skipped)
	return true
}

// nextToRun is the first firing of steps that runs, or the zero time.
func nextToRun(steps []step) time.Time {
	for _, st := range steps {
		if st.reason == "" {
			return st.at
		}
	}
	return time.Time{}
}

// span is an interval of the server's clock, which firings fall due by.
type span struct{ from, to time.Time }

// overlapped reports whether firing f of j fell while one of runs went
// on, past the wait for its lock that a firing of its own would have made
// (lockWait): the overlap policy skips it, as it would had it been
// claimed on its own while that run went on. A backlog of late firings,
// run one after the other, so does not outrun a job slower than its
// period.
func (s *Scheduler) overlapped(j *job, runs []span, f time.Time) bool {
	return goingPast(runs, f, s.lockWait(j, f))
}

// recordNotRun writes the records of firings of fr's job that do not run,
// once certain (their work settled, or a later firing of it started), and
// emits their FiringSkipped events. It returns what failed, if anything.
func (s *Scheduler) recordNotRun(fr *firing, runs []notRun) string {
	_, failed := s.writeNotRun(fr, runs, false)
	return failed
}

// recordNotRunNow writes what it can of the records of runs, firings of
// fr's job before it that do not run, one attempt each, as soon as fr's
// start settled them and before its job is called: an instance that dies
// during the run must not take them along. It returns those not written,
// for recordNotRun after the run.
func (s *Scheduler) recordNotRunNow(fr *firing, runs []notRun) []notRun {
	left, _ := s.writeNotRun(fr, runs, true)
	return left
}

// writeNotRun writes the records of runs where their firings have none
// (addHistoryOnce) and emits the events of those written: once, one
// attempt each, returning those not written; else persisting, and
// emitting the others' events too, with what failed.
func (s *Scheduler) writeNotRun(fr *firing, runs []notRun, once bool) (left []notRun, failed string) {
	for _, r := range runs {
		var err error
		if once {
			ctx, cancel := context.WithTimeout(fr.detached(), s.cfg.opTimeout)
			err = s.st.addHistoryOnce(ctx, s.notRunRecord(r.Run))
			cancel()
		} else {
			err = s.addHistoryOnce(s.notRunFiring(fr, r), r.Run)
		}
		switch {
		case err != nil && once:
			left = append(left, r)
		case err != nil:
			failed = "firings not run not recorded in the history: " + err.Error()
			s.notRunWritten(fr, r, "not recorded in the history: "+err.Error())
		default:
			s.notRunWritten(fr, r, "")
		}
	}
	return left, failed
}

// notRunRecord is r's history record, ended now: written only where its
// firing has none, its end is not the server's ($currentDate would
// change the end of a record kept).
func (s *Scheduler) notRunRecord(r Run) Run {
	if r.End.IsZero() {
		r.End = s.clock.Now()
	}
	return r
}

func (s *Scheduler) notRunFiring(fr *firing, r notRun) *firing {
	return &firing{job: fr.job, at: r.Scheduled, ctx: fr.ctx}
}

// notRunWritten emits r's FiringSkipped event, with problem noted.
func (s *Scheduler) notRunWritten(fr *firing, r notRun, problem string) {
	if r.silent {
		return
	}
	e := skip(r.Reason, nil)
	if problem != "" {
		e.Reason = note(e.Reason, problem)
	}
	s.emit(s.notRunFiring(fr, r), e)
}

// tried is what runOne did with a firing.
type tried struct {
	started, takenOver bool
	reason             string // why it did not start, if it did not
}

// runOne runs fr, one firing (or the triggered run) of w, through the
// job's lock; skippedBefore are the records of the firings before it that
// do not run, written once its start settled them (runLocked), before its
// job is called, or if that fails, after the run. It reports
// whether fr started, whether w was taken over, and why fr did not start.
func (s *Scheduler) runOne(fr *firing, w *work, skippedBefore []notRun) tried {
	defer s.setupDone(fr)
	if s.trace(fr); fr.span != nil {
		defer func() { fr.span.End(fr.failure) }()
	}
	lease, reason, ok := s.lockFor(fr)
	if !ok {
		return tried{reason: reason}
	}
	fr.fence = lease.Fence()
	spent, displaces := s.displaced(fr, w)
	released := false
	defer func() {
		if !released {
			s.release(fr, lease)
		}
	}()
	out := s.runLocked(fr, lease, w, skippedBefore)
	if fr.last && out.started && fr.busy != nil {
		fr.busy.settled = true // by its start
		// The work's last run ended, and its end is recorded: this
		// instance is no longer busy with the job, whatever its release
		// and its records take (a slow history write, or a release
		// retried after a lost reply, made it skip the next firing,
		// which nobody claimed: seeds 1296 and 1253). The next firing
		// here takes the lock once released, or in a new term while the
		// release is still retried (lock.Session.AcquireLocks).
		s.idle(fr.job, fr.busy)
	}
	// Release before writing the history, which the next run does not
	// need: the lock is held no longer than the run's own record needs.
	s.release(fr, lease)
	released = true
	if out.started {
		if failed := s.recordNotRun(fr, out.notRunLeft); failed != "" {
			out.end.Reason = note(out.end.Reason, failed)
		}
	}
	for _, h := range out.hist {
		if err := s.addHistory(fr, h); err != nil {
			out.end.Reason = note(out.end.Reason, "run not recorded in the history: "+err.Error())
		}
	}
	if displaces {
		// Only where its instance recorded nothing of it: a record it
		// writes, late, replaces this one.
		if err := s.addHistoryOnce(fr, spent); err != nil {
			out.end.Reason = note(out.end.Reason, "spent run not recorded in the history: "+err.Error())
		}
	}
	if out.end.Reason == ReasonTakenOver {
		// Under the claim's firing, which the taker's FiringTakenOver
		// names, also when fr is an earlier firing the claim covers.
		out.end.Scheduled = w.at()
	}
	s.emit(fr, out.end)
	return tried{started: out.started, takenOver: out.takenOver, reason: out.end.Reason}
}
