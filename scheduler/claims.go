package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/planted"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
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
	// done is the last firing settled before this work's, or since: the
	// firings of the work are those after it. Zero when the document
	// predates it: then only last.
	done    time.Time
	trig    time.Time // non-zero: the work is the run triggered then
	control controlDoc
	// The claim before this one was pending, on the server's clock, from
	// prevAt (its claim) to settled: firings that fell then could not be
	// claimed. The instance that settled it was present from prevUp (its
	// presence term's start) to settled: firings that fell then fell
	// while an instance was up, whatever its presence lock shows by now
	// (taken again, or taken over and released).
	prevAt, settled, prevUp time.Time
	// upSince is when the presence term of this instance began (server
	// time), for the write settling w to record (prevUp of the next).
	upSince time.Time
	// claimed is the server's time this work's claim was made, stamped
	// the time of its last claim, resume or takeover (the reply this work
	// came in), and got the local time (wall clock) that reply came: the
	// two tell how far the server's clock is from this instance's, within
	// the round trip the request was sent at the start of (sent).
	claimed, stamped, sent, got time.Time
	// prevRun is the job's last run when the claim was made.
	prevRun runDoc
	// specSince is when the job's spec became the one it has (server
	// time; zero if never changed): firings of the spec before then are
	// not its firings (specs.go).
	specSince time.Time
	// claimantUp is, for work taken over, when its claimant was last
	// present (its presence term, by the server's clock), as read before
	// the takeover: the takeover's own acquisition of that presence lock
	// replaces the term the lock's document shows.
	claimantUp [2]time.Time
	// lateFrom is what a plan of this work decided to run late: its
	// firings from lateFrom on (as recorded with a start, or to record).
	lateFrom time.Time
}

// pendingFrom is what the write settling w records of it, for the claim
// after it: when it was made (it was pending from then on).
func (w *work) pendingFrom() bson.D {
	var d bson.D
	if !w.claimed.IsZero() {
		d = append(d, bson.E{Key: fieldPrevAt, Value: w.claimed})
	}
	if !w.upSince.IsZero() {
		d = append(d, bson.E{Key: fieldPrevUp, Value: w.upSince})
	}
	return d
}

// settlerUp is when the instance that settled the claim before w was
// present, as w's times say, in this instance's clock (as blocked): from
// its presence term's start to the settling.
func (w *work) settlerUp() (span, bool) {
	if w.prevUp.IsZero() || w.settled.IsZero() || w.prevUp.After(w.settled) {
		return span{}, false
	}
	lo, hi := w.offsets()
	return span{from: w.prevUp.Add(-hi), to: w.settled.Add(-lo)}, true
}

// blocked reports whether firing f (by this instance's clock) fell while
// the claim before w was pending, as w's times say. Server times are
// turned into this instance's by the offset w's own claim showed (its
// server time against the local time its reply came), so that a skewed
// clock does not count old firings as blocked.
func (w *work) blocked(f time.Time) bool {
	if w.settled.IsZero() || w.prevAt.IsZero() || w.stamped.IsZero() || w.got.IsZero() {
		return false
	}
	lo, hi := w.offsets()
	from, to := w.prevAt.Add(-hi), w.settled.Add(-lo)
	return !f.Before(from) && f.Before(to)
}

// runGoing reports whether the job's previous run, as the claim found it,
// was going at f (by this instance's clock, as blocked): started before it
// and ended after it, having started before the firing after its own (next
// tells it) — a run on schedule that outlasted its period, which the
// overlap policy is about. A late run, of a backlog being worked off, is
// not counted: the firings that fall meanwhile are more of the backlog. Nor
// is a run whose end is not recorded: it may be of an instance that died.
func (w *work) runGoing(f time.Time, next func(time.Time) time.Time) bool {
	r := &w.prevRun
	if r.Start.IsZero() || r.End.IsZero() || r.Trigger {
		return false
	}
	offset := w.offset()
	start, end := r.Start.Add(-offset), r.End.Add(-offset)
	n := next(r.Scheduled)
	return !start.After(f) && end.After(f) && (n.IsZero() || start.Before(n))
}

// offset is how far ahead of this instance's clock the server's was, as
// w's claim showed: its server time against the local time its reply came.
func (w *work) offset() time.Duration {
	if w.stamped.IsZero() || w.got.IsZero() {
		return 0
	}
	return w.stamped.Sub(w.got.Round(0))
}

// offsets bounds offset: the server stamped the reply between the request
// being sent and the reply coming, so its clock was ahead of this
// instance's by between stamped-got and stamped-sent. Spans of server time
// turned into this instance's clock by these bounds, widest, hold the
// true span whatever the round trip was: a slow reply (seed 1253: 677 ms)
// shifted a pending claim's span by offset alone past a firing that fell
// in it, and the firing was recorded as missed.
func (w *work) offsets() (lo, hi time.Duration) {
	lo = w.offset()
	hi = lo
	if !w.sent.IsZero() && !w.stamped.IsZero() && !w.got.IsZero() {
		hi = w.stamped.Sub(w.sent.Round(0))
	}
	return lo, hi
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
		prevAt: d.PrevAt, settled: d.Settled, prevUp: d.PrevUp, claimed: d.Claimed, stamped: d.At, prevRun: d.Run, specSince: d.SpecSince}
	if d.Done.After(neverClaimed) {
		w.done = d.Done
	}
	if d.PTrig.IsZero() && d.LateLast.Equal(d.Last) {
		w.lateFrom = d.LateFrom
	}
	return w
}

// Reasons a firing is recorded as not run, in the history (Run.Reason) and
// in FiringSkipped events, besides those of fire.go.
const (
	// ReasonMissed: no instance claimed the firing in time, none being up
	// to, and the catch-up policy does not run it.
	ReasonMissed = "missed: not claimed in time"
	// ReasonRunGoing: the firing fell while the job's previous run was
	// still going, and nobody claimed it (the instance running it was
	// busy): the overlap policy (see Overlap) skips it.
	ReasonRunGoing = "previous run still going"
	// ReasonBacklog: more than MaxLate firings of one claim were late (they
	// fell while an earlier claim waited, or while the instances up were
	// overloaded or behind): the oldest are not run.
	ReasonBacklog = "too many firings late"
	// ReasonWindow: the firing was older than the catch-up window when an
	// instance could run it.
	ReasonWindow = "catch-up window passed"
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

// step is one thing a claim's work does: run firing at, or record the
// firings from at through through (count of them) as not run for reason.
type step struct {
	at, through time.Time
	count       int
	reason      string // empty: run
	unread      error  // of reasonHeld: why the presence locks could not be read
}

// reasonHeld is the plan of work that waits: the job is paused, and
// firings it covers that fell before the pause would run; or what some
// firing's fate depends on, the presence locks, could not be read.
const reasonHeld = "held"

// maxEnumerated bounds how many missed firings a plan looks at one by
// one; older ones are recorded as not run together, their count unknown.
const maxEnumerated = 100_000

// MaxLate bounds how many firings one claim runs late: firings that fell,
// while some instance was up, without being claimed (an earlier claim of
// the job was pending, waiting to be taken over from an instance that
// died; or the instances up were overloaded, behind, or their claims
// failed). They run in order, the newest MaxLate of them; the older ones
// are recorded as not run (ReasonBacklog).
const MaxLate = 100

// plan says what w's work does, at now by this instance's clock: which of
// its firings run, oldest first, and which are recorded as not run. The
// claimed firing runs. Each other firing of the work fell without being
// claimed, and
//   - is not run if the job was paused or removed at it (ReasonPaused,
//     ReasonRemoved), or if it is older than the catch-up window
//     (ReasonWindow); if the job is paused now and a firing from before
//     the pause would run, the plan is only reasonHeld: the work waits,
//     pending, for the pause's end;
//   - is not run if the job's previous run was still going at it
//     (ReasonRunGoing): the overlap policy;
//   - runs late if it fell while the claim before this one was pending,
//     or while this Scheduler was up (leading, in leader-only mode), up
//     to MaxLate of them (ReasonBacklog);
//   - otherwise fell while no instance was up to claim it: the catch-up
//     policy decides (ReasonMissed).
func (s *Scheduler) plan(j *job, w *work, now time.Time) []step {
	if w.triggered() {
		if w.control.Removed {
			return []step{{at: w.trig, through: w.trig, count: 1, reason: ReasonRemoved}}
		}
		return []step{{at: w.trig}} // an operator asked for it: paused or not
	}
	cu := s.catchUp(j)
	if planted.On(planted.RunMisfire) {
		cu.Max = MaxCatchUp // planted: every misfire runs, not the latest only
	}
	// The firings of the work, newest first, looked for backwards from
	// last: only the newest can run, and there may be very many.
	firings := []time.Time{w.last}
	var older *step // firings not looked at one by one
	// The firings after done, of the spec since it became the job's: a
	// spec registered after done has no firings before it.
	from := w.done
	if since := w.specSince.Add(-w.offset()); !w.specSince.IsZero() && !from.IsZero() && since.After(from) {
		from = since
	}
	// Mostly the work is last alone, which one step forward tells.
	if !from.IsZero() && nextAfter(j.sched, s.cfg.location, from).Before(w.last) {
		for x := w.last; ; {
			f := s.prevFiring(j, x.Add(-time.Nanosecond), x.Sub(from))
			if f.IsZero() || !f.After(from) {
				break
			}
			if len(firings) == maxEnumerated {
				// Far too many: the older ones are one record, their
				// count not known (0), for the reason of the newest.
				reason := ReasonMissed
				if now.Sub(f) > cu.Window {
					reason = ReasonWindow
				}
				older = &step{at: nextAfter(j.sched, s.cfg.location, from), through: f, reason: reason}
				break
			}
			firings = append(firings, f)
			x = f
		}
	}
	up := s.upSince()
	// A plan of this work made before decided to run late the firings
	// from lateFrom on: here (resumed, its lock or start having failed),
	// or by its claimant, which recorded it with a start (taken over).
	// The presence locks that told it may be gone by now (taken over and
	// released, expired, or taken again in a new term), and a decision to
	// run a firing is not taken back (seeds 1253 and 1296 lost firings
	// so).
	lateFrom := w.lateFrom
	s.mu.Lock()
	if j.late.last.Equal(w.last) && (lateFrom.IsZero() || j.late.from.Before(lateFrom)) {
		lateFrom = j.late.from
	}
	s.mu.Unlock()
	reasons := make([]string, len(firings))
	late, caught := 0, 0
	var oldestLate time.Time
	// Firings no rule here runs may have fallen while another instance
	// was up: its presence lease tells (read once, only then).
	var present []span
	var presentErr error
	presentRead := false
	wasUp := func(f time.Time) bool {
		if s.cfg.leader != nil {
			// Leader-only: leading is presence; the current term is up, the
			// terms before it here are these, and those of other leaders
			// the runner saw while it campaigned (seed 266: a firing that
			// fell while another led, busy, was recorded as missed).
			if s.ledAt(f) {
				return true
			}
			if ts, ok := s.cfg.leader.(termsSeen); ok {
				lo, hi := w.offsets()
				for _, t := range ts.TermsSeen() {
					if !f.Before(t.From.Add(-hi)) && !f.After(t.To.Add(-lo)) {
						return true
					}
				}
			}
			return false
		}
		if !presentRead {
			present, presentErr = s.presentSpans(w)
			presentRead = true
			if up := w.claimantUp; !up[0].IsZero() {
				lo, hi := w.offsets()
				present = append(present, span{from: up[0].Add(-hi), to: up[1].Add(-lo)})
			}
			if sp, ok := w.settlerUp(); ok {
				present = append(present, sp)
			}
		}
		for _, sp := range present {
			if !f.Before(sp.from) && !f.After(sp.to) {
				return true
			}
		}
		return false
	}
	// Paused now: firings that fell before the pause and would run wait
	// for its end (the claim stays pending) rather than be dropped.
	pausedNow := !w.control.Removed && w.control.pausedAt(now) && !w.control.PausedAt.IsZero()
	held, undecided := false, false
	for i, f := range firings { // newest first
		reason := w.control.suspendedAt(f, now)
		owed := pausedNow && reason == ReasonPaused && f.Before(w.control.PausedAt)
		if owed {
			reason = ""
		}
		switch {
		case reason != "":
		case now.Sub(f) > cu.Window:
			reason = ReasonWindow
		case i == 0:
			caught++ // the claimed firing, one of the catch-up policy's Max
		case w.runGoing(f, func(t time.Time) time.Time { return nextAfter(j.sched, s.cfg.location, t) }):
			reason = ReasonRunGoing
		case w.blocked(f) || !up.IsZero() && !f.Before(up) || !lateFrom.IsZero() && !f.Before(lateFrom) || wasUp(f):
			if late++; late > MaxLate {
				reason = ReasonBacklog
			} else {
				oldestLate = f
			}
		default:
			if caught++; caught > max(cu.Max, 1) {
				reason = ReasonMissed
				// The presence locks, which might have shown an
				// instance up at f, could not be read: f is not
				// recorded as missed on that (seed 1296: recorded so
				// for good).
				undecided = undecided || presentErr != nil
			}
		}
		if owed && reason == "" {
			held = true
		}
		reasons[i] = reason
	}
	if !oldestLate.IsZero() && !w.triggered() {
		// Kept also by a plan that waits: what told it (a taken-over
		// claimant's presence, read before the takeover) may be gone
		// when the work is planned again.
		s.mu.Lock()
		j.late.last, j.late.from = w.last, oldestLate
		s.mu.Unlock()
		w.lateFrom = oldestLate
	}
	if held || undecided {
		st := step{at: w.last, through: w.last, reason: reasonHeld}
		if undecided {
			st.unread = presentErr
		}
		return []step{st}
	}
	slices.Reverse(firings)
	slices.Reverse(reasons)
	var steps []step
	if older != nil {
		steps = append(steps, *older)
	}
	for i, f := range firings {
		reason := reasons[i]
		if n := len(steps); reason != "" && n > 0 && steps[n-1].reason == reason && steps[n-1].count > 0 {
			steps[n-1].through = f
			steps[n-1].count++
			continue
		}
		st := step{at: f, reason: reason}
		if reason != "" {
			st.through, st.count = f, 1
		}
		steps = append(steps, st)
	}
	return steps
}

// termsSeen is what a Leader may also tell (*runner.LeaderAwareRunner
// does): the terms of other leaders it saw, on the server's clock.
type termsSeen interface {
	TermsSeen() []runner.TermSpan
}

// span is an interval of this instance's clock.
type span struct{ from, to time.Time }

// maxLed bounds the past terms as leader a Scheduler remembers.
const maxLed = 64

// ledAt reports whether this instance led at f in a past term.
func (s *Scheduler) ledAt(f time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sp := range s.led {
		if !f.Before(sp.from) && !f.After(sp.to) {
			return true
		}
	}
	return false
}

// presentSpans reads the presence locks of the jobs collection (through
// the Session's store, a *lock.Locker: other stores tell nothing) and
// returns when each instance was last present, in this instance's clock
// (w's offset): from its presence term's start to its last renewal or
// release, and its lease after that.
func (s *Scheduler) presentSpans(w *work) ([]span, error) {
	st, ok := s.session.Store().(interface {
		LocksWithPrefix(context.Context, string) ([]lock.Holder, error)
	})
	if !ok {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.opTimeout)
	defer cancel()
	hs, err := st.LocksWithPrefix(ctx, s.cfg.lockPrefix+presenceMark+s.cfg.jobsColl+"/")
	if err != nil {
		return nil, err
	}
	lo, hi := w.offsets()
	prefix := s.cfg.lockPrefix + presenceMark + s.cfg.jobsColl + "/"
	out := make([]span, 0, len(hs))
	for _, h := range hs {
		end := h.ExpiresAt
		if h.Released {
			end = h.RenewedAt
		}
		out = append(out, span{from: h.AcquiredAt.Add(-hi), to: end.Add(-lo)})
		// Its instance's earlier terms (noteSince): up since then, until
		// the end of the last term, if its own keeper held it, or
		// released it (a clean stop; or a takeover, which comes a poll
		// interval or so after the lease lapsed); until the term of
		// another instance began, if one holds it (a takeover under way).
		if !h.Since.IsZero() && h.Since.Before(end) {
			until := end
			if !h.Released && h.KeeperID != keeperOf(strings.TrimPrefix(h.LockID, prefix)) {
				until = h.AcquiredAt
			}
			out = append(out, span{from: h.Since.Add(-hi), to: until.Add(-lo)})
		}
	}
	return out, nil
}

// upSince is when, by its clock, this Scheduler began to claim firings:
// its Start, or in leader-only mode when it began leading (zero while it
// does not lead).
func (s *Scheduler) upSince() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.leader != nil {
		return s.leadSince
	}
	return s.startedAt
}

// missedAtStart returns the firing of j that Start claims, as j's
// catch-up policy says: the latest before now, if at most its window
// ago, unless the policy runs no missed firing.
func (s *Scheduler) missedAtStart(j *job, now time.Time) (time.Time, bool) {
	cu := s.catchUp(j)
	if cu.Max < 1 {
		return time.Time{}, false
	}
	f := s.prevFiring(j, now, cu.Window)
	// A firing before the job's spec became this one's is not the job's
	// (specs.go).
	return f, !f.IsZero() && (j.specFrom.IsZero() || f.After(j.specFrom))
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

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// catchUp is j's catch-up policy.
func (s *Scheduler) catchUp(j *job) CatchUp {
	if j.cfg.catchUp != nil {
		return *j.cfg.catchUp
	}
	return s.cfg.catchUp
}

// notRun is the record of firings not run.
type notRun struct {
	Run
	silent bool // their FiringSkipped event was emitted already
}

// notRun is the history record of st, a step of j's work that does not
// run.
func (s *Scheduler) notRun(j *job, st step) Run {
	return Run{Job: j.name, Keeper: s.keeper, Scheduled: st.at, Through: st.through, Count: st.count,
		Outcome: OutcomeSkipped, Reason: st.reason}
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
	if s.presenceMu.Lock(ctx) != nil {
		return false
	}
	defer s.presenceMu.Unlock()
	if s.presence != nil && s.presence.Err() == nil {
		if !s.sinceNoted {
			s.noteSince(ctx)
		}
		return true
	}
	if s.presence != nil {
		// Released before it is taken again: the Session refuses a lock it
		// still holds.
		_ = s.session.ReleaseLocks(context.WithoutCancel(ctx), s.presence)
		s.presence = nil
		s.presenceNow.Store(nil)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.opTimeout)
	defer cancel()
	t, err := s.session.AcquireLocks(ctx, s.presenceID(s.claimant))
	if err == nil && len(t.Leases) == 1 {
		s.presence = t.Leases[0]
		s.presenceNow.Store(s.presence)
		if s.presentFrom.IsZero() {
			s.presentFrom = s.presence.AcquiredAt()
		}
		if !s.sinceNoted {
			s.noteSince(ctx)
		}
		return true
	}
	return false
}

// noteSince records in this instance's presence lock when its first
// presence term began (lock.Locker.NoteSince), kept across its later
// terms: a claim of another instance then counts the firings that fell in
// this instance's earlier terms as fallen while it was up, after its lease
// lapsed and it took it again (seed 1296: such a firing, which this
// instance, overloaded, had not claimed, was recorded as missed). Tried
// again by the next presence check until it is written. Stores other than
// a *lock.Locker tell nothing. Called with presenceMu held.
func (s *Scheduler) noteSince(ctx context.Context) {
	st, ok := s.session.Store().(interface {
		NoteSince(ctx context.Context, keeperID, lockID string, t time.Time) error
	})
	if !ok || s.presence == nil || s.presentFrom.IsZero() {
		s.sinceNoted = !ok
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.opTimeout)
	defer cancel()
	s.sinceNoted = st.NoteSince(ctx, s.presence.KeeperID(), s.presenceID(s.claimant), s.presentFrom) == nil
}

// presentSince is when this instance's presence term began (server time),
// zero if it holds no presence lease (or leads, in leader-only mode:
// there the terms it led tell).
func (s *Scheduler) presentSince() time.Time {
	if s.cfg.leader != nil {
		return time.Time{}
	}
	p := s.presenceNow.Load()
	if p == nil || p.Err() != nil {
		return time.Time{}
	}
	return p.AcquiredAt()
}

// absent ends this instance's presence: its claims not started can be
// taken over at once. Called once every firing of the Scheduler is gone.
func (s *Scheduler) absent() {
	_ = s.presenceMu.Lock(context.Background())
	defer s.presenceMu.Unlock()
	if s.presence != nil {
		_ = s.session.ReleaseLocks(context.Background(), s.presence)
		s.presence = nil
		s.presenceNow.Store(nil)
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
// tell whether this registration changes the spec.
func (s *Scheduler) registerJobs(ctx context.Context, jobs []claimReq) {
	names := make([]string, len(jobs))
	for i, r := range jobs {
		names[i] = r.job
	}
	recs, rerr := s.st.records(ctx, names)
	before := make(map[string]Record, len(recs))
	for _, r := range recs {
		before[r.Name] = r
	}
	now := s.clock.Now()
	if s.st.register(ctx, jobs) != nil {
		return // the next poll tries again
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range jobs {
		j := s.jobs[r.job]
		if j == nil {
			continue
		}
		j.registered = true
		switch rec, ok := before[r.job]; {
		case rerr != nil:
			j.specFrom = now // not known: no catch-up before this registration
		case ok && rec.Spec != "" && rec.Spec != r.spec && rec.Spec != j.spec:
			j.specFrom = now // this registration changed it
		case ok:
			j.specFrom = rec.SpecSince
		}
	}
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
	if len(unregistered) > 0 {
		s.registerJobs(qctx, unregistered)
	}
	s.mu.Lock()
	if s.catchUpDue && s.state == stateStarted {
		s.catchUpDue = false
		for _, j := range s.order {
			if f, ok := s.missedAtStart(j, s.startedAt); ok {
				s.dispatch(j, f, true)
			}
		}
	}
	s.mu.Unlock()
	docs, err := s.st.poll(qctx, names)
	if err != nil {
		return // the next poll tries again
	}
	now := s.clock.Now()
	byKeeper := map[string][]string{}
	removed := map[string]bool{}
	superseded := map[string]string{} // job → the spec the cluster follows, not this one's
	var events []lock.Event
	resumed := 0
	s.mu.Lock()
	pending := make(map[string]pendingClaim, len(docs))
	for i := range docs {
		d := &docs[i]
		j := s.jobs[d.ID]
		if j == nil {
			continue
		}
		removed[j.name] = d.Control.Removed
		if j.registered && d.Hash != "" && d.Hash != j.req.hash() {
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
			// once no firing of the job is in progress here and the claim
			// is old, so that this read cannot be older than the firing
			// that just settled it.
			// Through admission, as firings are: under a load the server
			// cannot keep up with, many claims are left pending, and
			// resuming them all at each poll would add to the load. One
			// per poll goes ahead regardless, so that none waits for the
			// load to drop (while pending here, its job's firings wait,
			// and no other instance takes it over).
			if j.inflight == 0 && stale && s.state == stateStarted && (s.admit() || resumed == 0) {
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
	for _, j := range s.order {
		j.removed = removed[j.name]
		active, other := superseded[j.name]
		switch {
		case other && (!j.superseded || active != j.active):
			events = append(events, lock.Event{Kind: lock.JobSpecSuperseded, Job: j.name, LockID: j.lockID,
				Reason: fmt.Sprintf("the cluster follows spec %q, registered since; this instance's %q does not fire", active, j.req.spec)})
		case !other && j.superseded:
			events = append(events, lock.Event{Kind: lock.JobSpecRestored, Job: j.name, LockID: j.lockID,
				Reason: fmt.Sprintf("the cluster follows this instance's spec %q again", j.req.spec)})
		}
		j.superseded, j.active = other, active
	}
	if s.cfg.leader != nil {
		// Leader-only: what Start does for missed firings, a new leader
		// does when it starts leading.
		leads := s.noteLeading()
		if leads && !s.leading && s.state == stateStarted {
			now := s.clock.Now()
			for _, j := range s.order {
				if f, ok := s.missedAtStart(j, now); ok {
					if e, ok := s.dispatch(j, f, true); !ok {
						events = append(events, e)
					}
				}
			}
		}
		s.leading = leads
	}
	s.mu.Unlock()
	for _, e := range events {
		s.session.Emit(e)
	}
	for keeper, jobs := range byKeeper {
		s.takeOverFrom(ctx, keeper, jobs)
	}
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
	var up [2]time.Time
	if s.cfg.leader == nil {
		// The claimant's last presence, before this acquisition replaces
		// it (plan: firings that fell while it was up run late).
		for range 2 { // a second try, if the read failed
			h, err := s.session.Holder(actx, s.presenceID(claimant))
			if !h.AcquiredAt.IsZero() {
				up = [2]time.Time{h.AcquiredAt, h.ExpiresAt}
				if h.Released {
					up[1] = h.RenewedAt
				}
			}
			if err == nil || errors.Is(err, lock.ErrNotHeld) || actx.Err() != nil {
				break
			}
		}
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
		w.sent, w.got, w.claimantUp = sent, got, up
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
	w.upSince = s.presentSince()
	steps := s.plan(j, w, s.clock.Now())
	if len(steps) == 1 && steps[0].reason == reasonHeld {
		// Left pending: the next poll resumes it and plans again; once
		// the pause ended, or the presence locks could be read, each
		// firing's event comes. A pause is told by its own events; a
		// read that failed, here.
		if err := steps[0].unread; err != nil {
			s.emit(fr, skip(note(ReasonNoStart, "presence locks not read; claim pending again"), err))
		}
		return
	}

	var skipped []notRun // records of firings not run, written once certain
	prev := w.done       // the last firing settled
	lastStarted := false
	lastEnded := false // the last step, fr's firing, did not start: its event is out
	for i, st := range steps {
		if st.reason != "" {
			skipped = append(skipped, notRun{Run: s.notRun(j, st)})
			continue
		}
		run := fr
		run.prev = prev
		if i > 0 || !st.at.Equal(fr.at) {
			run = &firing{job: j, at: st.at, ctx: s.ctx, trig: fr.trig, dispatched: fr.dispatched, counted: fr.counted, prev: prev, busy: fr.busy}
			fr.counted = false // its setup is this run's now
			if i > 0 && !fr.dispatched.IsZero() {
				// Its setup begins now: the runs before it are no load
				// (admission).
				run.dispatched = s.clock.Now()
			}
		}
		run.last = i == len(steps)-1
		res := s.runOne(run, w, skipped)
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
			r := s.notRun(j, step{at: st.at, through: st.at, count: 1, reason: res.reason})
			r.Triggered = run.trig
			skipped = append(skipped, notRun{Run: r, silent: true})
			lastEnded = i == len(steps)-1
		}
		if s.ctx.Err() != nil {
			return // stopping: what is left is taken over
		}
	}
	if lastStarted {
		return
	}
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
		return
	case err != nil:
		// Still pending and this keeper's: the next poll resumes it.
		s.emit(fr, skip(ReasonNoStart, fmt.Errorf("settle: %w", err)))
		return
	case !ok:
		s.emit(fr, skip(ReasonTakenOver, nil))
		return
	}
	s.recordNotRun(fr, skipped)
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
	if r.Count > 1 {
		e.Reason = fmt.Sprintf("%s: %d firings through %s", r.Reason, r.Count, r.Through.UTC().Format(time.RFC3339))
	}
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
	released := false
	defer func() {
		if !released {
			s.release(fr, lease)
		}
	}()
	out := s.runLocked(fr, lease, w, skippedBefore)
	if fr.last && out.started && fr.busy != nil {
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
	if out.started || out.movedOn {
		if failed := s.recordNotRun(fr, out.notRunLeft); failed != "" {
			out.end.Reason = note(out.end.Reason, failed)
		}
	}
	for _, h := range out.hist {
		if err := s.addHistory(fr, h); err != nil {
			out.end.Reason = note(out.end.Reason, "run not recorded in the history: "+err.Error())
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
