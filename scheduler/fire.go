package scheduler

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/internal/planted"
	"github.com/mongolock/mongolock/lock"
)

type runKey struct{}

// RunFromContext returns the run a job's context belongs to: the job, the
// firing it serves, the keeper and the fencing token of the job's lease.
// Pass the token to resources that can reject stale writers. The context
// also carries the lease itself (lock.LeaseFrom).
func RunFromContext(ctx context.Context) (Run, bool) {
	r, ok := ctx.Value(runKey{}).(Run)
	return r, ok
}

// busy is a dispatch's place in its job's inflight count, given back once
// (idle): when the dispatch ends, or earlier, once its last run released
// the job's lock (runOne), since only its records remain to write.
type busy struct {
	done bool
	// settled: the work it did settled its claim (the last firing's start
	// did, or settleWork); a claim left pending is resumed by a poll.
	settled bool
}

// idle gives b back. The job idle here now and b's work settled, the
// latest firing skipped while it was busy (owed) is claimed at once, its claim covering those
// before it: a backlog worked in order, or a claim, lock or start that
// waited long for the database, would otherwise leave the firings that
// fell meanwhile until the next firing, a period later (sim seed 70: a
// claim made a second late, in a storm, pushed eighteen past the misfire
// threshold).
func (s *Scheduler) idle(j *job, b *busy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.done {
		return
	}
	b.done = true
	j.inflight--
	if f := j.owed; !f.IsZero() && b.settled && j.inflight == 0 && s.state == stateStarted {
		j.owed = time.Time{}
		// Refused (overloaded, removed, a follower now), its skip was
		// told already, when it fell.
		_, _ = s.dispatch(j, f, false)
	}
}

// Reasons of FiringSkipped events; see the package documentation. An
// event's Reason begins with one of them (strings.HasPrefix); those that
// end in ": " are followed by an error's text, and ReasonBehind by how
// many firings were not tried.
const (
	ReasonBusy = "previous run still going on this instance"
	// ReasonSetupPending: this instance's previous firing of the job has
	// not started yet: its claim, lock or start still waits for the
	// database.
	ReasonSetupPending = "previous firing not started yet on this instance: the database has not answered"
	ReasonLockHeld     = "previous run still going: lock held elsewhere"
	ReasonUntrusted    = "lease could not be trusted"
	ReasonNoLock       = "lock not acquired: "
	ReasonNoStart      = "start not recorded"
	ReasonNoClaim      = "claim failed: "
	ReasonStopping     = "stopping"
	ReasonBehind       = "this instance fell behind"
	// ReasonOverloaded: this instance tried no more firings at once, as
	// the database was not keeping up (admission.go); not claimed here.
	ReasonOverloaded = "overloaded"
)

// lockRetryFirst is the first pause between attempts to take a job's lock
// after winning its claim (lockBackoff).
const lockRetryFirst = 20 * time.Millisecond

// firing is a firing of a job that this instance tries, as its events name
// it.
type firing struct {
	job  *job
	at   time.Time // scheduled, or triggered
	trig bool      // a run asked for by Trigger
	// dispatched is when this instance began trying the firing, or
	// resuming its claim (zero for work taken over): admission measures
	// from it.
	dispatched time.Time
	counted    bool // in Scheduler.setups until its setup ends (admission.go)
	// prev is the last firing of its work settled before it (the work's
	// done, at first).
	prev  time.Time
	fence uint64 // once the job's lock is taken
	tries int    // attempts to take the job's lock
	// busy is the dispatch's place in the job's inflight count; last
	// marks the last firing its work runs, which gives it back once it
	// released the job's lock.
	busy *busy
	last bool
	// next is the next firing of its work that runs, if any: with
	// OverlapCancel, it cancels this run when due (attempts).
	next time.Time
	// waitedOut is the job's last run as read once fr got its lock after
	// waiting for it (ranPastWait): the run that held it, whose span (and
	// those of the earlier runs it keeps) the work's next steps go by.
	// readLocked: it was read so, after fr got the lock.
	waitedOut  runDoc
	readLocked bool
	// began and ended are when its run's start was recorded and when its
	// job last returned, by this instance's clock (zero if it did not
	// run): the firings after it in its work that fell while it went on
	// are the overlap policy's (overlapped).
	began, ended time.Time
	// endedAt is ended by the server's clock, as the Session's Locker
	// estimates it (its lower bound; else as the work's claim read it),
	// zero if it did not run: the end its record says (endOf).
	endedAt time.Time

	// ctx is the scheduler's context, carrying the run's span (lock.OpRun)
	// once the claim is won and when the Session has a tracer; span is it,
	// nil when untraced, and failure why the run failed, for its end.
	ctx     context.Context
	span    lock.Span
	failure error
}

// emit sends e, naming fr (its firing unless e names one), to the
// Session's observers, and to the run's span.
func (s *Scheduler) emit(fr *firing, e lock.Event) {
	e.Job, e.LockID, e.Fence = fr.job.name, fr.job.lockID, fr.fence
	if e.Scheduled.IsZero() {
		e.Scheduled = fr.at
	}
	if fr.span == nil {
		s.session.Emit(e)
		return
	}
	if e.At.IsZero() {
		e.At = s.clock.Now()
	}
	e.KeeperID = s.keeper
	s.session.Emit(e)
	fr.span.Event(e)
	if e.Kind == lock.RunEnded || e.Kind == lock.FiringSkipped && !strings.HasPrefix(e.Reason, ReasonStopping) {
		fr.failure = e.Err
	}
}

// trace begins the span of fr, a firing whose claim this instance won:
// the run's, a trace of its own (firings run under their job's lock, not
// under a leader's term, so it links to none).
func (s *Scheduler) trace(fr *firing) {
	if !s.session.Traced() {
		return
	}
	fr.ctx, fr.span = s.session.Trace(s.ctx, lock.Op{Kind: lock.OpRun, LockIDs: []string{fr.job.lockID},
		Job: fr.job.name, Scheduled: fr.at})
}

// detached is the context of the writes of fr that outlive the
// scheduler's stop (the job's own context, the end record, the release):
// fr's span, not the scheduler's cancellation.
func (fr *firing) detached() context.Context {
	if fr.span == nil {
		return context.Background()
	}
	return context.WithoutCancel(fr.ctx)
}

// skip is the FiringSkipped event of a firing not run for reason.
func skip(reason string, err error) lock.Event {
	return lock.Event{Kind: lock.FiringSkipped, Reason: reason, Err: err}
}

// note adds what else went wrong to an event's reason.
func note(reason, more string) string {
	if reason == "" {
		return more
	}
	return reason + "; " + more
}

// fire tries to run firing f of j. The order of the steps is what makes a
// double run impossible; see the package documentation. Every firing it
// tries ends in exactly one of the events FiringLost, FiringSkipped and
// RunEnded; a FiringSkipped for "start not recorded" is not final, as the
// claim stays pending, and a resume may still run the firing.
// A catch-up claim (at Start) claims f only if the job was claimed before:
// a job deployed for the first time has missed nothing.
func (s *Scheduler) fire(j *job, f time.Time, catchUp bool) {
	defer s.wg.Done()
	b := &busy{}
	defer s.idle(j, b)
	if catchUp {
		defer func() {
			s.mu.Lock()
			j.catchUps--
			s.mu.Unlock()
		}()
	}
	fr := &firing{job: j, at: f, ctx: s.ctx, dispatched: s.clock.Now(), counted: true, busy: b}
	defer s.setupDone(fr)

	// Step 1 (skip while a firing of j is in progress here) was dispatch's.
	// 2. Claim the firing: succeeds for one instance only, and only if no
	// firing at or after f was claimed before and the last claim's work is
	// settled. Not once the Session is closed: the firing could not run
	// here, and would wait to be taken over. Not without this instance's
	// presence lease: the claim could be taken over at once.
	select {
	case <-s.session.Done():
		s.emit(fr, skip(ReasonStopping, lock.ErrSessionClosed))
		return
	default:
	}
	if !s.present(s.ctx) {
		if s.ctx.Err() != nil {
			s.emit(fr, skip(ReasonStopping, ErrStopped))
		} else {
			s.emit(fr, skip(ReasonAbsent, nil))
		}
		return
	}
	w, err := s.claiming(fr, catchUp)
	switch {
	case err != nil && s.ctx.Err() != nil:
		s.emit(fr, skip(ReasonStopping, ErrStopped))
		return
	case err != nil:
		s.emit(fr, skip(ReasonNoClaim+mongoutil.Describe(err), err))
		return
	case w == nil && catchUp:
		return // claimed already, as it mostly is: nothing was missed
	case w == nil:
		if planted.On(planted.RunTwice) { // planted: run the firing another instance claimed
			_, _ = call(context.WithValue(s.ctx, runKey{}, Run{Job: j.name, Keeper: s.keeper, Scheduled: f, Attempt: 1}), j.fn)
		}
		s.emit(fr, lock.Event{Kind: lock.FiringLost})
		return
	}
	s.emit(fr, lock.Event{Kind: lock.FiringClaimed})
	// 3-6, for each firing the claim covers (claims.go).
	s.work(fr, w)
}

// claiming claims fr's firing, among its job's claiming meanwhile (a poll
// resumes another claim of this instance's beside it: readClaims).
func (s *Scheduler) claiming(fr *firing, catchUp bool) (*work, error) {
	j := fr.job
	s.mu.Lock()
	j.claiming = append(j.claiming, fr.at)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		i := slices.Index(j.claiming, fr.at)
		j.claiming = slices.Delete(j.claiming, i, i+1)
		s.mu.Unlock()
	}()
	return s.claim(fr, catchUp)
}

// claim claims fr's firing. After an error (its outcome unknown, or the
// server unreachable) it tries again, until half the misfire threshold has
// passed since the firing, only if the job's next firing is at least that
// far away: a firing whose claim failed must still start within the
// threshold while the database can be reached, and the claim of a next
// firing due sooner covers it (sending again then would only add load to
// a server that cannot keep up: BenchmarkCluster's 100 jobs on 3
// instances ran nothing so). A claim that applied with its reply lost
// loses when sent again; the poll then finds it pending, this instance's,
// and resumes it.
func (s *Scheduler) claim(fr *firing, catchUp bool) (*work, error) {
	j, f := fr.job, fr.at
	giveUp := f.Add(s.threshold / 2)
	if next := nextAfter(j.sched, s.cfg.location, f); !next.IsZero() && next.Before(giveUp) {
		giveUp = time.Time{} // one attempt
	} else {
		giveUp = s.local(giveUp)
	}
	b := s.lockBackoff()
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.opTimeout)
		sent := s.clock.Now()
		w, err := s.st.claim(ctx, j.name, j.req.spec, f, s.claimant, catchUp)
		cancel()
		if w != nil {
			w.sent, w.got = sent, s.clock.Now()
		}
		pause := b.Pause(s.clock.Now(), attempt)
		if err == nil || s.ctx.Err() != nil || giveUp.IsZero() || !s.clock.Now().Add(pause).Before(giveUp) ||
			lock.Sleep(s.ctx, s.clock, pause) != nil {
			return w, err
		}
	}
}

// lockWait is how long after firing f the lock of j is waited for: half the
// time to the next firing, so that the wait ends well before it, and at
// most a TTL, by when a holder that died has lost its lease and one that
// is still running is a long run, not one recording its end. lockFor waits
// longer, up to a TTL more, for a lock whose holder is gone (deadHolder):
// a run killed mid-way, or, in leader-only mode, the run of a leader that
// died.
func (s *Scheduler) lockWait(j *job, f time.Time) time.Duration {
	wait := s.ttl
	if next := nextAfter(j.sched, s.cfg.location, f); !next.IsZero() {
		wait = min(wait, next.Sub(f)/2)
	}
	return wait
}

// lockBackoff is the pause policy of lockFor: from lockRetryFirst,
// doubling up to the Session's retry period, the longest pause of a
// waiting lock.Mutex too. Each attempt costs a round trip or two, so a
// firing makes at most about lockWait/RetryPeriod × 1.25 + 5 of them:
// with the default timings (retry period TTL/15, wait at most a TTL), 25.
func (s *Scheduler) lockBackoff() lock.Backoff {
	return lock.Backoff{First: lockRetryFirst, Max: s.session.Timings().RetryPeriod}
}

// lockFor takes the lock of fr's job for fr, which this instance claimed.
// The previous run, on another instance, may still hold it while it
// records its end, or a failed release may have left it held: lockFor tries
// again until the firing plus lockWait (OverlapSkip; longer for a holder
// that is gone, see lockWait), or until it gets it.
// Waiting is safe: the claim makes the firing this instance's alone, and
// the start record keeps runs in firing order. If it returns no lease it
// has emitted the firing's FiringSkipped event, whose reason it returns.
func (s *Scheduler) lockFor(fr *firing) (*lock.Lease, string, bool) {
	j := fr.job
	giveUp := s.lockGiveUp(fr)
	b := s.lockBackoff()
	mayHold := false // an attempt failed after its write may have happened
	var watch holderWatch
	var lastErr error
	began := s.clock.Now()
	attempt := 1
	for ; s.ctx.Err() == nil; attempt++ {
		fr.tries = attempt
		// Not ended by Stop, as the start record: an acquisition given up
		// on the client may still take the lock on the server after the
		// clean-up looked for it, and leave it held until its lease
		// expires.
		ctx, cancel := context.WithTimeout(fr.detached(), s.cfg.opTimeout)
		res, err := s.acquires.submit(ctx, struct{}{}, j.lockID)
		cancel()
		if err == nil {
			err = res.err
		}
		switch {
		case err == nil && res.lease != nil:
			return s.lockGranted(fr, res.lease, attempt, began)
		case err == nil && res.untrusted:
			// Granted too late to trust even for the start record; the
			// Session released it again. The setup took a renew deadline
			// at least.
			took := s.session.Timings().RenewDeadline
			if !fr.dispatched.IsZero() {
				took = max(took, s.clock.Since(fr.dispatched))
			}
			s.setupTook(took)
			// The claim stays pending: the next poll resumes it.
			e := skip(ReasonNoLock+lock.ErrNotTrusted.Error(), lock.ErrNotTrusted)
			s.emit(fr, e)
			return nil, e.Reason, false
		case err != nil:
			mayHold, lastErr = true, err
		default:
			// Held elsewhere: waiting for the previous run is no load on
			// the server (a poll a retry period), so the firing stops
			// counting as a setup (admission.go), and does not keep the
			// firings of other jobs from being tried meanwhile.
			lastErr = nil
			s.setupDone(fr)
		}
		if errors.Is(lastErr, lock.ErrSessionClosed) {
			break
		}
		now := s.clock.Now()
		if !giveUp.IsZero() && lastErr == nil && s.ctx.Err() == nil {
			giveUp, now = watch.giveUpAt(s, fr, now, giveUp)
		}
		pause := b.Pause(now, attempt)
		if !giveUp.IsZero() {
			pause = min(pause, giveUp.Sub(now))
		}
		if s.ctx.Err() != nil || !giveUp.IsZero() && !now.Before(giveUp) ||
			lock.Sleep(s.ctx, s.clock, pause) != nil {
			break
		}
	}
	return nil, s.lockGivenUp(fr, mayHold, lastErr, began, attempt, watch.behind), false
}

// lockGranted decides what fr does with the lock lockFor took on its
// attempt-th try, begun at began: run, or under OverlapSkip release it
// and skip fr if the run that held it went on past the wait.
func (s *Scheduler) lockGranted(fr *firing, lease *lock.Lease, attempt int, began time.Time) (*lock.Lease, string, bool) {
	j := fr.job
	// Waited: attempts until the lock came free, or one that took longer
	// than the wait (a slow command, applied once the lock was free), or a
	// first one only after the wait had passed (a claim whose reply was
	// slow: the run before may have held the lock until just before, seed
	// 926).
	wait := s.lockWait(j, fr.at)
	waited := attempt > 1 || s.clock.Since(began) > wait || began.After(s.local(fr.at.Add(wait)))
	fr.readLocked = false // set by a read from now on (ranPastWait)
	if waited && s.ranPastWait(fr) && j.cfg.overlap == OverlapSkip {
		// The lock came free after the wait OverlapSkip allows (a late
		// firing waits a TTL, for a holder that may have died): the run
		// that held it went on past it, and skips fr.
		s.release(fr, lease)
		e := skip(ReasonRunGoing, nil)
		s.emit(fr, e)
		return nil, e.Reason, false
	}
	return lease, "", true
}

// lockGiveUp returns when fr gives up waiting for its job's lock: zero
// (never) unless OverlapSkip, else the firing plus lockWait, or, for a
// late firing (caught up, taken over, or owed: tried once its wait is
// over), a TTL from now: the lock of a claimant that died may outlive its
// presence lease by a renew interval. A firing tried just as its wait
// ends is late too: it gave up at its first attempt, on the lock of this
// instance's previous run whose release had not gone yet
// (TestOwedFiringClaimedOnceIdle, 1 in 10 under the race detector).
func (s *Scheduler) lockGiveUp(fr *firing) time.Time {
	if fr.job.cfg.overlap != OverlapSkip {
		return time.Time{}
	}
	giveUp := s.local(fr.at.Add(s.lockWait(fr.job, fr.at)))
	if now := s.clock.Now(); !now.Before(giveUp) {
		return now.Add(s.ttl)
	}
	return giveUp
}

// ranPastWait reads the job's last run, which held the lock fr waited for
// (a firing's or a trigger's), into fr.waitedOut, and reports whether it
// went on at fr's time past the wait for its lock (lockWait): it recorded
// its end, by the server's clock, before it released the lock. A run
// whose end is not recorded (its instance died) does not count, and
// neither does a read that fails: fr runs, as before. Every overlap
// policy reads it (the work's next steps go by it, and so does the Went
// of fr's start); OverlapSkip alone skips fr by it.
func (s *Scheduler) ranPastWait(fr *firing) bool {
	ctx, cancel := context.WithTimeout(fr.detached(), s.cfg.opTimeout)
	defer cancel()
	docs, err := s.st.poll(ctx, []claimReq{fr.job.req})
	if err != nil || len(docs) != 1 {
		return false
	}
	fr.waitedOut, fr.readLocked = docs[0].Run, true
	return goingPast(docs[0].Run.spans(), fr.at, s.lockWait(fr.job, fr.at)) // a firing's run or a trigger's: either held the lock
}

// displaced returns, as spent, the run of fr's job that the job's
// document holds once fr has the job's lock, if it is still running by
// another claim: its instance lost the lock without recording an end (it
// died, froze or lost the database past its lease once its start
// applied), fr's start is about to replace it, and nobody else knows of
// it. Its firing started, so it does not run again (at most once), and
// whether its job ran is not known. A run whose start this instance
// recorded last is not one: this instance records it. The document read
// after fr's wait for the lock (ranPastWait) tells; without one, it is
// read again only when the run fr's claim found is such a run: it may
// have ended since, and recorded itself.
func (s *Scheduler) displaced(fr *firing, w *work) (Run, bool) {
	s.mu.Lock()
	own := fr.job.started
	s.mu.Unlock()
	d := fr.waitedOut
	if !fr.readLocked {
		if !runningElsewhere(w.prevRun, w, own) {
			return Run{}, false
		}
		ctx, cancel := context.WithTimeout(fr.detached(), s.cfg.opTimeout)
		defer cancel()
		docs, err := s.st.poll(ctx, []claimReq{fr.job.req})
		if err != nil || len(docs) != 1 {
			return Run{}, false
		}
		d = docs[0].Run
	}
	if !runningElsewhere(d, w, own) {
		return Run{}, false
	}
	r := *d.run(fr.job.name)
	r.Outcome, r.Error = OutcomeSpent, spentError
	if planted.On(planted.SpentUnstarted) {
		r.Scheduled = r.Scheduled.Add(time.Second) // planted: a firing that never started recorded as spent
	}
	if now, ok := s.now(); ok {
		r.End = maxTime(now, r.Start)
	}
	return r, true
}

// spentError is the error of a run recorded as spent (OutcomeSpent).
const spentError = "its instance lost the job's lock without recording an end; whether the job ran is not known, and the firing does not run again"

// runningElsewhere reports whether d is a run started, and not recorded
// as ended, by a claim other than w's, and not own, the run this instance
// started last.
func runningElsewhere(d runDoc, w *work, own startKey) bool {
	return d.Outcome == string(OutcomeRunning) && !d.Start.IsZero() && d.ClaimID != w.cid &&
		(startKey{d.Scheduled.UnixNano(), uint64(d.Fence.T)<<32 | uint64(d.Fence.I)}) != own
}

// behindLateRun reads the job's last run into fr.waitedOut, and reports
// whether the lock fr waits for is held by that run, still going, which
// began after fr's time (an earlier firing's, late) and is not one that
// went on at fr's time past its lock wait (ranPastWait): fr comes after
// it, in order. A lock held by anything else, or a read that fails, says
// no: fr is skipped once its wait runs out, as before.
func (s *Scheduler) behindLateRun(fr *firing) bool {
	fr.waitedOut = runDoc{}
	if s.ranPastWait(fr) {
		return false
	}
	r := fr.waitedOut
	return r.End.IsZero() && r.Start.After(fr.at)
}

// lockGivenUp emits, and returns the reason of, the FiringSkipped event of
// fr, whose lock lockFor gave up taking after attempt attempts since
// began, the last failing with lastErr (nil: held elsewhere); mayHold
// says an attempt may have taken it, behind that fr waited in order for a
// run that began after it, until its misfire threshold.
func (s *Scheduler) lockGivenUp(fr *firing, mayHold bool, lastErr error, began time.Time, attempt int, behind bool) string {
	if mayHold {
		s.releaseMaybe(fr.job)
	}
	var e lock.Event
	switch {
	case s.ctx.Err() != nil:
		e = skip(ReasonStopping, ErrStopped)
	case errors.Is(lastErr, lock.ErrSessionClosed):
		e = skip(ReasonStopping, lastErr)
	case lastErr != nil:
		e = skip(ReasonNoLock+mongoutil.Describe(lastErr), lastErr)
	case behind:
		e = skip(ReasonMisfired, nil)
		e.Took, e.Attempt = s.clock.Since(began), attempt
	default:
		e = skip(ReasonLockHeld, nil)
		e.Took, e.Attempt = s.clock.Since(began), attempt
	}
	s.emit(fr, e)
	return e.Reason
}

// holderWatch tells, as fr's wait for its job's lock runs out, whether
// to wait on, and until when: if the lock's holder has not renewed its
// lease for over one and a half renew intervals (a live Session renews
// every lease it holds each renew interval), the run that holds it is gone
// (its instance killed, or paused or cut off past its lease) and the lock
// lapses with the lease, at most a TTL away; if the lock is free by now,
// one more attempt takes it. It reads the holder a renew interval and a
// half before the wait runs out (or when it begins, if it is shorter) and
// again as it runs out: a renewal between the two says the holder is
// alive, and so does one less than that long before the second. A lock
// taken too recently to tell and never renewed (the demo's tick, every
// second, lost firings when its leader was killed mid-run, a period after
// it took the lock) gets a third reading, once a live holder would have
// renewed it. (A holder that renewed the lock and died within a renew
// interval and a half of the second reading still counts as alive.) Only how long fr waits hangs on these readings, never who
// runs: the lock decides that. A holder merely slow to renew costs a
// longer wait, after which fr is skipped as before.
type holderWatch struct {
	looks   int         // readings so far
	first   lock.Holder // the first
	done    bool        // decided
	inOrder bool        // the run holding the lock read (behindLateRun)
	behind  bool        // and it began after the firing: waited for, in order
}

// giveUpAt is called at each attempt of fr while its lock is held
// elsewhere (at now, giving up at giveUp) and returns when to give up,
// and the time after its readings. Before giving up: is the holder alive
// (look)? And, once, did the run that holds the lock go on when fr fell?
// One that began after (an earlier firing's, late) is one fr comes after,
// in order: fr waits for it, until it would start past its misfire
// threshold.
func (h *holderWatch) giveUpAt(s *Scheduler, fr *firing, now, giveUp time.Time) (time.Time, time.Time) {
	giveUp = h.look(s, fr, now, giveUp)
	now = s.clock.Now()
	if now.Before(giveUp) || h.inOrder || s.ctx.Err() != nil {
		return giveUp, now
	}
	h.inOrder = true
	if until := s.local(fr.at.Add(s.threshold)); until.After(giveUp) && s.behindLateRun(fr) {
		giveUp, h.behind = until, true
	}
	return giveUp, now
}

// look is called at each attempt while the lock is held elsewhere, and
// returns when to give up.
func (h *holderWatch) look(s *Scheduler, fr *firing, now, giveUp time.Time) time.Time {
	stale := s.session.Timings().RenewInterval * 3 / 2
	switch {
	case h.done:
		return giveUp
	case h.looks == 0 && now.Before(giveUp.Add(-stale)):
		return giveUp // too early for the first reading
	case h.looks > 0 && now.Before(giveUp):
		return giveUp
	}
	ctx, cancel := context.WithTimeout(fr.ctx, s.cfg.opTimeout)
	defer cancel()
	var hd lock.Holder
	err := limited(ctx, s.slots, func() (err error) { hd, err = s.session.Holder(ctx, fr.job.lockID); return err })
	h.looks++
	now = s.clock.Now()
	switch {
	case errors.Is(err, lock.ErrNotHeld):
		h.done = true
		return now.Add(lockRetryFirst) // free: one more attempt
	case err != nil || hd.ReadAt.IsZero():
		h.done = true // nothing to go by
		return giveUp
	case h.looks == 1:
		h.first = hd
		return giveUp
	case hd.KeeperID != h.first.KeeperID || hd.Fence != h.first.Fence || hd.RenewedAt.After(h.first.RenewedAt):
		h.done = true // renewed, or taken again, since the first reading: alive
		return giveUp
	}
	age := hd.ReadAt.Sub(hd.RenewedAt)
	switch {
	case age > stale:
		h.done = true // gone: its lease lapses at most a TTL away
		return now.Add(min(hd.ExpiresAt.Sub(hd.ReadAt), s.ttl) + lockRetryFirst)
	case h.looks == 2 && hd.AcquiredAt.Equal(hd.RenewedAt):
		// Taken too recently to tell, and not renewed yet: look again
		// once a live holder would have renewed it.
		return now.Add(stale - age + lockRetryFirst)
	}
	h.done = true // renewed lately: alive
	return giveUp
}

func (s *Scheduler) releaseMaybe(j *job) {
	m, err := s.session.Mutex(j.lockID)
	if err != nil {
		return
	}
	_ = limited(context.Background(), s.slots, func() error { return m.ReleaseLock(context.Background()) })
}

type acquireResult struct {
	lease     *lock.Lease
	untrusted bool // granted too late to trust, and released again
	err       error
}

// acquireBatch takes the locks ids in one call. When the call fails, the
// locks it reports acquired are still the caller's, and those it reports
// refused still held elsewhere; the error goes to the others, which may
// or may not have been taken.
func (s *Scheduler) acquireBatch(ctx context.Context, _ struct{}, ids []string) ([]acquireResult, error) {
	t, err := s.session.AcquireLocks(ctx, ids...)
	leases := make(map[string]*lock.Lease, len(t.Leases))
	for _, l := range t.Leases {
		leases[l.LockID()] = l
	}
	refused := make(map[string]bool, len(t.Refused))
	for _, id := range t.Refused {
		refused[id] = true
	}
	untrusted := make(map[string]bool, len(t.Untrusted))
	for _, id := range t.Untrusted {
		untrusted[id] = true
	}
	// A Session closed meanwhile reports its grants untrusted: the firing
	// is skipped because of the closing, not of the lease.
	closed := errors.Is(err, lock.ErrSessionClosed)
	out := make([]acquireResult, len(ids))
	given := make(map[string]bool, len(leases))
	for i, id := range ids {
		switch {
		case leases[id] != nil && !given[id]:
			out[i].lease, given[id] = leases[id], true
		case leases[id] != nil:
			// Two firings of one job here (a claim taken back after it was
			// taken over, beside its first firing still waiting): one
			// lease is one holder; the other waits, as for a holder
			// elsewhere.
		case refused[id]:
		case closed:
			out[i].err = err
		case untrusted[id]:
			out[i].untrusted = true
		case err != nil:
			out[i].err = err
		default:
			out[i].err = fmt.Errorf("acquire %q: neither acquired nor refused", id)
		}
	}
	return out, nil
}

// ran is what runLocked did.
type ran struct {
	started   bool       // fr's start was recorded
	takenOver bool       // it was not: fr's work is another instance's now
	hist      []Run      // to add to the history
	end       lock.Event // fr's last event, once the lock is released and the history written
	// notRunLeft are the records of the firings before fr that do not
	// run, which its start settled, that are still to be written (if it
	// started).
	notRunLeft []notRun
}

// runLocked runs fr, of w, under lease: records its start, calls the job
// (again, up to the job's retries, while it fails), and records its end.
// Its last event is RunEnded if the job was called, FiringSkipped if not.
// Once the start is recorded it writes skippedBefore, the records of the
// firings before fr that do not run, which the start settled.
func (s *Scheduler) runLocked(fr *firing, lease *lock.Lease, w *work, skippedBefore []notRun) ran {
	j := fr.job
	// The Session keeps the lease alive; jobCtx ends with it, cause
	// lock.ErrLeaseLost a safety margin before anyone else could take the
	// lock over.
	jobCtx, cancelJob := lease.Bind(fr.detached())
	defer cancelJob(nil)
	s.mu.Lock()
	if s.state != stateStarted {
		s.mu.Unlock()
		return ran{end: skip(ReasonStopping, ErrStopped)}
	}
	j.cancel, j.runWork = cancelJob, w
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		j.cancel, j.runWork = nil, nil
		s.mu.Unlock()
	}()

	// The lease lost already, between the lock's grant and here: this
	// instance was paused (or starved of CPU) past its lease, a moment the
	// database's load has no part in. No start is written: the claim stays
	// pending, for the next poll to resume, or another instance to take
	// over once this one's presence lapsed, and the firing runs once,
	// late, rather than never.
	if err := lease.Err(); err != nil {
		if stopping(err) {
			return ran{end: skip(ReasonStopping, err)}
		}
		return ran{end: skip(note(ReasonNoStart, "lease lost before it was written; claim pending again"), err)}
	}

	r, out, ok := s.writeStart(fr, lease, w, skippedBefore)
	if !ok {
		return out
	}

	// 5. Run, if the lease can still be trusted. The keep-alive ends the
	// lease, and so jobCtx, when it cannot, but asynchronously: Err reads
	// the clock, and this check is what keeps a job from starting after
	// that. Before it, the records of the firings before fr that do not
	// run, which the start settled, are written: not after a run this
	// instance may not live through. (The start is final: nothing
	// decides those firings again; a run recorded later replaces a
	// record, by its id, while a record of a firing as not run keeps the
	// first.)
	out.notRunLeft = s.recordNotRunNow(fr, skippedBefore)
	if err := lease.Err(); err != nil {
		cancelJob(err)
		u := s.startUntrusted(fr, r, err)
		u.notRunLeft = out.notRunLeft
		return u
	}
	out.end = s.attempts(fr, lease, jobCtx, cancelJob, &r)
	s.noteEnded(fr, w, r, lease)
	// 6. Record the end, then release the lock (in runOne): the next run
	// cannot start before this one is recorded.
	if _, ferr := s.finish(fr, r, true); ferr != nil {
		out.end.Reason = note(out.end.Reason, "end not recorded: "+ferr.Error())
	}
	// The run the work's next start follows (wentBefore), its start as the
	// server wrote it.
	w.prevRun = runDoc{Scheduled: fr.at, Start: r.Start, End: fr.endedAt, Went: w.went, Trigger: fr.trig}
	if w.prevRun.End.IsZero() {
		w.prevRun.End, _ = s.now()
	}
	s.pauseAfterFailure(fr, r, &out.end)
	out.hist = append(out.hist, s.endOf(fr, r))
	return out
}

// noteEnded notes when fr's run r, of w, ended: now, or when this
// instance stopped trusting lease if it lost it before (the run held its
// job's lock no longer: what it did after, such as recording a failed
// attempt while the database could not be reached, does not make it go on
// for the overlap policy, seed 88). By the server's clock if this instance
// can tell (else the end write's own time, its $currentDate, stands),
// never before the start the server wrote.
func (s *Scheduler) noteEnded(fr *firing, w *work, r Run, lease *lock.Lease) {
	now := s.clock.Now()
	fr.ended = now
	if lease.Err() != nil && lease.Deadline().Before(now) {
		fr.ended = lease.Deadline()
	}
	if srv, ok := s.now(); ok {
		fr.endedAt = srv.Add(fr.ended.Sub(now))
	} else if !w.stamped.IsZero() && !w.got.IsZero() {
		fr.endedAt = w.serverNow(fr.ended)
	}
	if !fr.endedAt.IsZero() && fr.endedAt.Before(r.Start) {
		fr.endedAt = r.Start // a lower bound
	}
}

// writeStart records fr's start (step 4), under lease: ok if it started,
// with the run and what runLocked goes on from; else what runLocked
// returns.
func (s *Scheduler) writeStart(fr *firing, lease *lock.Lease, w *work, skippedBefore []notRun) (Run, ran, bool) {
	// 4. Record the start, if the claim is still this instance's and no
	// later firing of it was settled: under the lock, this keeps runs in
	// firing order, and a claimant that stalled past its lease, whose claim
	// was taken over, does not start it too.
	r := Run{Job: fr.job.name, Keeper: s.keeper, Scheduled: fr.at, Fence: lease.Fence(), Outcome: OutcomeRunning,
		Attempt: 1, Triggered: fr.trig}
	// Not ended by Stop: a start that landed must be known, to be run
	// (StopWait).
	if !fr.waitedOut.Start.IsZero() && !fr.waitedOut.Start.Before(w.prevRun.Start) {
		w.prevRun = fr.waitedOut // the run fr's lock came free from
	}
	// The runs that may still skip a firing not settled yet: after fr's
	// (settled by this start), or, for a trigger, which settles none, after
	// the work's done (TestTriggerKeepsEarlierRunsForOverlap).
	cut := fr.at
	if fr.trig && !w.done.IsZero() {
		cut = w.done
	}
	w.went = w.prevRun.wentBefore(cut, s.lockWait(fr.job, fr.at))
	// The start is final once applied (nothing undoes it), and applies only
	// while this instance trusts lease: before its deadline by the
	// server's clock.
	deadline := s.startDeadline(lease)
	ctx, cancel := context.WithTimeout(fr.detached(), s.cfg.opTimeout)
	start, ok, err := s.st.start(ctx, r, w, deadline)
	cancel()
	if err != nil && !errors.Is(err, errNotStarted) {
		start, ok, err = s.startFate(fr, r, w, deadline, err)
	}
	switch {
	case err != nil:
		u := s.startFailed(fr, r, w, err)
		u.notRunLeft = skippedBefore
		return r, u, false
	case !ok:
		return r, ran{takenOver: true, end: skip(ReasonTakenOver, nil)}, false
	}
	r.Start = start
	s.mu.Lock()
	fr.job.started = startKey{r.Scheduled.UnixNano(), r.Fence}
	s.mu.Unlock()
	fr.began = s.clock.Now()
	s.setupDone(fr)
	out := ran{started: true, notRunLeft: skippedBefore}
	if !fr.dispatched.IsZero() && fr.tries == 1 {
		// Not when it waited for the previous run: that is no load.
		s.setupTook(s.clock.Since(fr.dispatched))
	}
	return r, out, true
}

// attempts calls fr's job under jobCtx, again up to the job's retries
// while it fails, and returns the last attempt's RunEnded event. With
// OverlapCancel, a later firing of fr's work that runs (fr.next) cancels
// it when due, at once if due already, as a later claim's would
// (pollOnce): a backlog of a job slower than its period so catches up
// instead of falling further behind with each run (seed 263).
func (s *Scheduler) attempts(fr *firing, lease *lock.Lease, jobCtx context.Context, cancelJob context.CancelCauseFunc, r *Run) lock.Event {
	if fr.job.cfg.overlap == OverlapCancel && !fr.next.IsZero() {
		now, _ := s.now()
		t := s.clock.AfterFunc(max(fr.next.Sub(now), 0), func() { cancelJob(ErrOverlapCancelled) })
		defer t.Stop()
	}
	for {
		e := s.attempt(fr, jobCtx, r)
		pause, retry := s.retryPause(fr, jobCtx, *r)
		if !retry {
			return e
		}
		// Each failed attempt is in the history as soon as it is known.
		if err := s.addHistory(fr, *r); err != nil {
			e.Reason = note(e.Reason, "attempt not recorded in the history: "+err.Error())
		}
		s.emit(fr, lock.Event{Kind: lock.RunRetrying, Attempt: r.Attempt, Err: e.Err, Took: pause, Reason: e.Reason})
		if lock.Sleep(jobCtx, s.clock, pause) != nil {
			return e
		}
		// As before the first attempt: the keep-alive ends the lease (and
		// jobCtx) asynchronously, and this instance may have been paused
		// past it while it waited.
		if err := lease.Err(); err != nil {
			cancelJob(err)
			return e
		}
		r.Attempt++
		r.Outcome, r.Error, r.End = OutcomeRunning, "", time.Time{}
	}
}

// pauseAfterFailure pauses fr's job if r failed and the job pauses after
// that many failures in a row (JobPauseAfter), noting in end what failed.
func (s *Scheduler) pauseAfterFailure(fr *firing, r Run, end *lock.Event) {
	j := fr.job
	if r.Outcome != OutcomeFailed || j.cfg.pauseAfter <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(fr.detached(), s.cfg.opTimeout)
	paused, err := s.st.pauseAfter(ctx, j.name, j.cfg.pauseAfter)
	cancel()
	switch {
	case err != nil:
		end.Reason = note(end.Reason, "not paused: "+err.Error())
	case paused:
		s.emit(fr, lock.Event{Kind: lock.JobPaused, Reason: pauseNote(j.cfg.pauseAfter)})
	}
}

// startDeadline is the server's time from which a start under lease
// cannot apply: before this instance stops trusting the lease (the
// server's clock estimate's lower bound, so that it is not later by the
// server's clock), and within the op timeout, so that a write given up on
// is decided soon after. Zero if this instance cannot read the server's
// clock.
func (s *Scheduler) startDeadline(lease *lock.Lease) time.Time {
	now, ok := s.now()
	if !ok {
		return time.Time{}
	}
	return now.Add(min(lease.Remaining(), s.cfg.opTimeout))
}

// startFate learns the fate of r's start, whose write failed (cause):
// once the server's clock passed its deadline it cannot apply any more,
// and the same write, sent again, says for good whether it started r, or
// found the claim taken over, or still pending (errNotStarted). cause if
// that fails too.
func (s *Scheduler) startFate(fr *firing, r Run, w *work, deadline time.Time, cause error) (time.Time, bool, error) {
	ctx, cancel := context.WithTimeout(fr.detached(), 2*s.cfg.opTimeout)
	defer cancel()
	for {
		now, ok := s.now()
		if !ok || !now.Before(deadline) {
			break
		}
		if lock.Sleep(ctx, s.clock, deadline.Sub(now)) != nil {
			return time.Time{}, false, cause
		}
	}
	start, ok, err := s.st.start(ctx, r, w, deadline)
	if err != nil && !errors.Is(err, errNotStarted) {
		return time.Time{}, false, cause
	}
	if errors.Is(err, errNotStarted) {
		err = fmt.Errorf("%w (%w)", cause, errNotStarted)
	}
	return start, ok, err
}

// startFailed is what runLocked does when r's start, a firing of w, was
// not recorded (err): refused for its deadline, its claim pending (for the
// next poll to resume, or another instance to take over), or its fate
// unknown (startFate failed too). Then r's record, if the start applied,
// is ended as not run, so that it does not stay "running": the firing is
// spent.
func (s *Scheduler) startFailed(fr *firing, r Run, w *work, err error) ran {
	e := skip(ReasonNoStart, err)
	if s.ctx.Err() != nil {
		e.Reason = ReasonStopping
	}
	if errors.Is(err, errNotStarted) {
		return ran{end: e}
	}
	r.Outcome, r.Error = OutcomeFailed, notRunError+"start not recorded: "+err.Error()
	held, ferr := s.finish(fr, r, false)
	if ferr != nil {
		e.Reason = note(e.Reason, "end not recorded: "+ferr.Error())
	}
	if held {
		e.Reason = note(e.Reason, "the start applied: spent")
		return ran{started: true, hist: []Run{r}, end: e}
	}
	return ran{end: e}
}

// startUntrusted is what runLocked does when r's start was recorded but
// its lease was lost meanwhile (cause): the start is final, the job is not
// called, and the firing is spent, recorded as not run.
func (s *Scheduler) startUntrusted(fr *firing, r Run, cause error) ran {
	e := skip(ReasonUntrusted, cause)
	r.Outcome, r.Error = OutcomeFailed, notRunError+cause.Error()
	if _, ferr := s.finish(fr, r, false); ferr != nil {
		e.Reason = note(e.Reason, "end not recorded: "+ferr.Error())
	}
	return ran{started: true, hist: []Run{r}, end: e}
}

// attempt calls fr's job once, as attempt r.Attempt, under jobCtx (and the
// job's timeout), sets r's outcome and returns the attempt's RunEnded
// event.
func (s *Scheduler) attempt(fr *firing, jobCtx context.Context, r *Run) lock.Event {
	j := fr.job
	ctx, cancel := context.WithCancelCause(jobCtx)
	defer cancel(nil)
	var timeout clockwork.Timer
	if j.cfg.timeout > 0 {
		timeout = s.clock.AfterFunc(j.cfg.timeout, func() { cancel(ErrJobTimeout) })
	}
	began := s.clock.Now()
	due, _ := s.now() // lateness is judged by the server's clock
	s.emit(fr, lock.Event{Kind: lock.RunStarted, At: began, Lateness: due.Sub(fr.at), Attempt: max(fr.tries, r.Attempt)})
	fn := j.fn
	if planted.On(planted.DropFiring) && !r.Triggered && r.Scheduled.Unix()%4 == 0 {
		fn = func(context.Context) error { return nil } // planted: not called, recorded as run
	}
	stack, err := call(context.WithValue(ctx, runKey{}, *r), fn)
	ended := s.clock.Now()
	if timeout != nil {
		timeout.Stop()
	}
	e := lock.Event{Kind: lock.RunEnded, At: ended, Took: ended.Sub(began), Attempt: r.Attempt}
	r.Outcome = OutcomeSucceeded
	cause := context.Cause(ctx)
	if err != nil {
		if cause != nil && !errors.Is(err, cause) {
			err = fmt.Errorf("%w (context: %w)", err, cause)
		}
		r.Outcome, r.Error, e.Err = OutcomeFailed, err.Error(), err
	}
	e.Outcome = string(r.Outcome)
	if cause != nil {
		e.Reason = "context cancelled: " + cause.Error()
	}
	if stack != nil {
		e.Reason = note(e.Reason, "panicked at:\n"+string(stack))
	}
	return e
}

// retryPause says whether fr's job, whose attempt r just failed, is tried
// again, and after what pause: not past the job's retries, not once its
// lease is lost or the scheduler stops, and not if the next attempt could
// not start before the job's next firing.
func (s *Scheduler) retryPause(fr *firing, jobCtx context.Context, r Run) (time.Duration, bool) {
	j := fr.job
	if r.Outcome != OutcomeFailed || r.Attempt > j.cfg.retries || jobCtx.Err() != nil {
		return 0, false
	}
	now, _ := s.now() // the next firing falls due by it
	pause := j.cfg.backoff.Pause(s.clock.Now(), r.Attempt)
	if next := nextAfter(j.sched, s.cfg.location, maxTime(fr.at, now)); !next.IsZero() && !now.Add(pause).Before(next) {
		return 0, false
	}
	return pause, true
}

// stopping reports whether cause ended a job's context because the
// Scheduler stopped or its Session closed.
func stopping(cause error) bool {
	return errors.Is(cause, ErrStopped) || errors.Is(cause, lock.ErrSessionClosed)
}

// call runs fn, turning a panic into an error; stack is where it panicked.
func call(ctx context.Context, fn func(context.Context) error) (stack []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			stack, err = debug.Stack(), fmt.Errorf("%w: %v", ErrPanic, p)
		}
	}()
	return nil, fn(ctx)
}

// finish records the end of r in the job document, and reports whether the
// document held r's record. ran: the job was called.
func (s *Scheduler) finish(fr *firing, r Run, ran bool) (bool, error) {
	var held bool
	err := s.persist(fr, func(ctx context.Context) (err error) {
		held, err = s.st.finish(ctx, s.endOf(fr, r), ran)
		return err
	})
	return held, err
}

// endOf is r with its End: the server's time its job returned, as the
// claim read the server's clock, not the time the write applied
// ($currentDate), which may be long after (sent while the database was
// unreachable, or applied once a failover ended). The overlap policy
// judges the firings after the run by its recorded end (simulation seed
// 123: an end applied 3 s late had a firing that fell after the run
// skipped as "previous run still going").
func (s *Scheduler) endOf(fr *firing, r Run) Run {
	if !fr.endedAt.IsZero() {
		r.End = fr.endedAt
	}
	return r
}

func (s *Scheduler) addHistory(fr *firing, r Run) error {
	if planted.On(planted.RecordNotRun) && r.Outcome == OutcomeSucceeded && !r.Triggered {
		r.Outcome, r.Reason = OutcomeSkipped, ReasonMisfired // planted: a run recorded as not run
	}
	return s.persist(fr, func(ctx context.Context) error { return s.st.addHistory(ctx, r) })
}

// addHistoryOnce writes r, a record of firings not run, where no record of
// its firing is: a decision not to run a firing may have been superseded
// by then (the claim taken over, and the firing run by the taker), and
// its write, retried while the database could not be reached, land after
// the run's record (seed 1510).
func (s *Scheduler) addHistoryOnce(fr *firing, r Run) error {
	r = s.notRunRecord(r)
	return s.persist(fr, func(ctx context.Context) error { return s.st.addHistoryOnce(ctx, r) })
}

// persist runs write, an idempotent write of fr's records, until it
// succeeds, pausing between attempts as the Session's backoff says: a
// record lost to a failed command would leave the history disagreeing
// with what ran, or a run "running" for good. While the database cannot
// be reached (mongoutil.Transient) it keeps trying for as long as the
// Scheduler runs: the run's lock stays held meanwhile, so the job's next
// run here waits for this record, and elsewhere for the lease to lapse,
// as it would for the database. Otherwise (an error of another kind, or
// once the Scheduler stopped or its Session closed) it tries for up to
// twice the op timeout more, then returns the error, for the caller to
// report.
func (s *Scheduler) persist(fr *firing, write func(ctx context.Context) error) error {
	var giveUp time.Time
	b := s.session.Backoff()
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(fr.detached(), s.cfg.opTimeout)
		err := write(ctx)
		cancel()
		if err == nil {
			return nil
		}
		now := s.clock.Now()
		if giveUp.IsZero() && (s.stopping() || !mongoutil.Transient(err)) {
			giveUp = now.Add(2 * s.cfg.opTimeout)
		}
		pause := b.Pause(now, attempt)
		if !giveUp.IsZero() && !now.Add(pause).Before(giveUp) {
			return err
		}
		if lock.Sleep(fr.detached(), s.clock, pause) != nil {
			return err
		}
	}
}

// stopping reports whether the Scheduler stopped or its Session closed.
func (s *Scheduler) stopping() bool {
	select {
	case <-s.session.Done():
		return true
	default:
		return s.ctx.Err() != nil
	}
}

// releaseBatch releases leases in one command (s.releases). The Session
// bounds it, and retries it, within its release timeout; the batcher's
// queue waits for it no longer than half a retry period, so that a release
// retried after a lost reply holds back neither the releases of other
// jobs (whose locks would stay held, and their next firings skipped
// elsewhere as if their runs went on) nor this instance's next run of the
// job, which takes the lock in a new term meanwhile. The rest goes on in a
// goroutine the scheduler's stop waits for.
func (s *Scheduler) releaseBatch(ctx context.Context, _ struct{}, leases []*lock.Lease) ([]struct{}, error) {
	done := make(chan error, 1)
	s.wg.Add(1) // within a firing's goroutine: never from zero
	go func() {
		defer s.wg.Done()
		done <- s.session.ReleaseLocks(ctx, leases...)
	}()
	t := s.clock.NewTimer(s.session.Timings().RetryPeriod / 2)
	defer t.Stop()
	res := make([]struct{}, len(leases))
	select {
	case err := <-done:
		return res, err
	case <-t.Chan():
		return res, nil // still on its way; its lock.Released events tell how it ends
	}
}

// release releases lease. Locks of jobs that end together are released in
// one command. The Session tries again, for up to its release timeout, if
// that fails (a lock left held makes every other instance wait for its
// lease to expire) and reports the outcome to its observers (lock.Released).
// It goes on while the scheduler stops, which waits for it.
func (s *Scheduler) release(fr *firing, lease *lock.Lease) {
	_, _ = s.releases.submit(fr.detached(), struct{}{}, lease)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
