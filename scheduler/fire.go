package scheduler

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/mongolock/mongolock/lock"
)

type runKey struct{}

// RunFromContext returns the run a job's context belongs to: the job, the
// firing it serves, the keeper and the fencing token of the job's lease.
// Pass the token to resources that can reject stale writers.
func RunFromContext(ctx context.Context) (Run, bool) {
	r, ok := ctx.Value(runKey{}).(Run)
	return r, ok
}

func (s *Scheduler) idle(j *job) {
	s.mu.Lock()
	j.busy = false
	s.mu.Unlock()
}

// retryFirst is the first pause between attempts to take a job's lock after
// winning its claim, and between attempts to release it. Pauses then double
// up to TTL/10 (nextPause).
const retryFirst = 20 * time.Millisecond

// fire tries to run firing f of j. The order of the steps is what makes a
// double run impossible; see the package documentation.
func (s *Scheduler) fire(j *job, f time.Time) {
	defer s.wg.Done()
	defer s.idle(j)
	log := s.cfg.log.With().Str("job", j.name).Time("firing", f).Str("keeper", s.keeper).Logger()

	// Step 1 (skip while a firing of j is in progress here) was dispatch's.
	// 2. Claim the firing: succeeds for one instance only, and only if no
	// firing at or after f was claimed before.
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.opTimeout)
	won, err := s.st.claim(ctx, j.name, j.spec, f, s.keeper)
	cancel()
	switch {
	case err != nil && s.ctx.Err() != nil:
		log.Debug().Err(err).Msg("stopping; firing not claimed")
		return
	case err != nil:
		log.Warn().Err(err).Msg("claim failed; firing not run here")
		return
	case !won:
		log.Debug().Msg("firing claimed elsewhere")
		return
	}

	// 3. Take the job's lock, waiting a while for the previous run to let
	// go of it.
	lease, sent, ok := s.lockFor(j, f, log)
	if !ok {
		return
	}
	log = log.With().Uint64("fence", lease.Fence).Logger()
	hist := s.runLocked(j, f, lease, sent, log)
	// 6. Release before writing the history, which the next run does not
	// need: the lock is held no longer than the run's own record needs.
	s.release(j, log)
	if hist != nil {
		s.addHistory(*hist, log)
	}
}

// lockWait is how long after firing f the lock of j is waited for: half the
// time to the next firing, so that the wait ends well before it, and at
// most a TTL, by when a holder that died has lost its lease and one that
// is still running is a long run, not one recording its end.
func (s *Scheduler) lockWait(j *job, f time.Time) time.Duration {
	wait := s.ttl
	if next := nextAfter(j.sched, s.cfg.location, f); !next.IsZero() {
		wait = min(wait, next.Sub(f)/2)
	}
	return wait
}

// lockFor takes the lock of j for firing f, which this instance claimed.
// The previous run, on another instance, may still hold it while it
// records its end, or a failed release may have left it held: lockFor tries
// again until f plus lockWait. Waiting is safe: the claim makes f this
// instance's alone, and the start record keeps runs in firing order. It
// returns the lease and when the request that won it was sent.
func (s *Scheduler) lockFor(j *job, f time.Time, log zerolog.Logger) (lock.Lease, time.Time, bool) {
	clk := s.cfg.clock
	giveUp := f.Add(s.lockWait(j, f))
	pause := retryFirst
	mayHold := false // an attempt failed after its write may have happened
	var lastErr error
	began := clk.Now()
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.opTimeout)
		sent := clk.Now()
		res, err := s.acquires.submit(ctx, struct{}{}, j.lockID)
		cancel()
		lease, ok := res.lease, res.ok
		if err == nil {
			err = res.err
		}
		switch {
		case err == nil && ok:
			// Checked here rather than left to the renewal loop, which
			// runs alongside the start of the job: a lease acquired too
			// slowly may not be trusted even for the start record.
			if !clk.Now().Before(lease.Deadline.Add(-s.margin)) {
				log.Warn().Uint64("fence", lease.Fence).Dur("took", clk.Since(sent)).
					Msg("claimed firing skipped: lock acquired too late to trust its lease")
				s.release(j, log)
				return lock.Lease{}, time.Time{}, false
			}
			if attempt > 1 {
				log.Debug().Int("attempts", attempt).Dur("waited", clk.Since(began)).Msg("lock acquired after waiting")
			}
			return lease, sent, true
		case err != nil:
			mayHold, lastErr = true, err
			if s.ctx.Err() == nil {
				log.Debug().Err(err).Int("attempt", attempt).Msg("lock not acquired; retrying")
			}
		default:
			lastErr = nil
			log.Debug().Int("attempt", attempt).Msg("lock held elsewhere; waiting for the previous run to release it")
		}
		now := clk.Now()
		if s.ctx.Err() != nil || !now.Before(giveUp) || !s.sleep(min(pause, giveUp.Sub(now))) {
			break
		}
		pause = s.nextPause(pause)
	}
	switch {
	case s.ctx.Err() != nil:
		log.Debug().AnErr("last_error", lastErr).Msg("stopping; claimed firing not run")
	case lastErr != nil:
		log.Warn().Err(lastErr).Msg("claimed firing skipped: lock not acquired")
	default:
		log.Info().Dur("waited", clk.Since(began)).Msg("firing skipped: previous run still going on another instance")
	}
	if mayHold {
		s.release(j, log)
	}
	return lock.Lease{}, time.Time{}, false
}

type acquireResult struct {
	lease lock.Lease
	ok    bool
	err   error
}

// acquireBatch takes the locks ids in one call. When the call fails, the
// locks it reports acquired are still the caller's, and those it reports
// refused still held elsewhere; the error goes to the others, which may
// or may not have been taken.
func (s *Scheduler) acquireBatch(ctx context.Context, _ struct{}, ids []string) ([]acquireResult, error) {
	a, err := s.locker.AcquireLocks(ctx, s.keeper, ids...)
	leases := make(map[string]lock.Lease, len(a.Leases))
	for _, l := range a.Leases {
		leases[l.LockID] = l
	}
	refused := make(map[string]bool, len(a.Refused))
	for _, id := range a.Refused {
		refused[id] = true
	}
	out := make([]acquireResult, len(ids))
	for i, id := range ids {
		switch l, ok := leases[id]; {
		case ok:
			out[i] = acquireResult{lease: l, ok: true}
		case refused[id]:
		case err != nil:
			out[i].err = err
		default:
			out[i].err = fmt.Errorf("acquire %q: neither acquired nor refused", id)
		}
	}
	return out, nil
}

// sleep waits d on the scheduler's clock; false if it is stopping.
func (s *Scheduler) sleep(d time.Duration) bool {
	t := s.cfg.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		return true
	case <-s.ctx.Done():
		return false
	}
}

func (s *Scheduler) nextPause(p time.Duration) time.Duration {
	return min(2*p, max(retryFirst, s.ttl/10))
}

// trust is the instant until which a run may rely on its lease: the lease
// deadline minus the margin. The renewal loop pushes it back.
type trust struct {
	mu    sync.Mutex
	until time.Time
}

func (t *trust) get() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.until
}

// extend moves the instant to until if that is later.
func (t *trust) extend(until time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if until.After(t.until) {
		t.until = until
	}
}

// runLocked runs firing f of j under lease, won by a request sent at sent.
// It returns the run to add to the history, nil if no run was recorded.
func (s *Scheduler) runLocked(j *job, f time.Time, lease lock.Lease, sent time.Time, log zerolog.Logger) *Run {
	jobCtx, cancelJob := context.WithCancelCause(context.Background())
	defer cancelJob(nil)
	s.mu.Lock()
	if s.state != stateStarted {
		s.mu.Unlock()
		log.Debug().Msg("stopping; claimed firing not run")
		return nil
	}
	j.cancel = cancelJob
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		j.cancel = nil
		s.mu.Unlock()
	}()

	// The lease is renewed from now on; jobCtx is cancelled if it is lost.
	tr := &trust{until: lease.Deadline.Add(-s.margin)}
	stopSupervisor := s.supervise(j, sent, tr, cancelJob, log)
	defer stopSupervisor()

	// 4. Record the start, unless a run of a later firing started before.
	// Under the lock, this keeps runs in firing order: an instance that
	// claimed f and then stalled does not run f after a later firing ran.
	r := Run{Job: j.name, Keeper: s.keeper, Scheduled: f, Fence: lease.Fence, Outcome: OutcomeRunning}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.opTimeout)
	start, ok, err := s.st.start(ctx, r)
	cancel()
	switch {
	case err != nil:
		ev := log.Warn()
		if s.ctx.Err() != nil {
			ev = log.Debug() // stopping
		}
		ev.Err(err).Msg("claimed firing skipped: start not recorded")
		// The write may have happened: end the record if it is there, so
		// that it does not stay "running", and only then keep it in the
		// history.
		r.Outcome, r.Error = OutcomeFailed, "not run: start not recorded: "+err.Error()
		if s.finish(r, log) {
			return &r
		}
		return nil
	case !ok:
		log.Info().Msg("claimed firing skipped: a later firing ran meanwhile")
		return nil
	}
	r.Start = start

	// 5. Run, if the lease can still be trusted. The supervisor cancels
	// jobCtx when it cannot, but asynchronously: this check is what keeps a
	// job from starting after that.
	if jobCtx.Err() == nil && !s.cfg.clock.Now().Before(tr.get()) {
		cancelJob(lock.ErrLeaseLost)
	}
	if jobCtx.Err() != nil {
		cause := context.Cause(jobCtx) // lease lost, or stopping
		ev := log.Warn()
		if errors.Is(cause, ErrStopped) {
			ev = log.Info()
		}
		ev.AnErr("cause", cause).Msg("claimed firing not run: lease lost or stopping while recording its start")
		r.Outcome, r.Error = OutcomeFailed, "not run: "+cause.Error()
		s.finish(r, log)
		return &r
	}
	log.Info().Msg("run started")
	began := s.cfg.clock.Now()
	err = call(context.WithValue(jobCtx, runKey{}, r), j.fn, log)
	took := s.cfg.clock.Since(began)
	stopSupervisor()

	// 6. Record the end, then release the lock (in fire): the next run
	// cannot start before this one is recorded.
	r.Outcome = OutcomeSucceeded
	if err != nil {
		r.Outcome, r.Error = OutcomeFailed, err.Error()
		if cause := context.Cause(jobCtx); cause != nil && !errors.Is(err, cause) {
			r.Error += " (context: " + cause.Error() + ")"
		}
	}
	s.finish(r, log)
	ev := log.Info()
	if err != nil {
		ev = log.Warn().Err(err)
	}
	ev.Dur("took", took).Str("outcome", string(r.Outcome)).Msg("run ended")
	return &r
}

// call runs fn, turning a panic into an error.
func call(ctx context.Context, fn func(context.Context) error, log zerolog.Logger) (err error) {
	defer func() {
		if p := recover(); p != nil {
			log.Error().Interface("panic", p).Str("stack", string(debug.Stack())).Msg("job panicked")
			err = fmt.Errorf("%w: %v", ErrPanic, p)
		}
	}()
	return fn(ctx)
}

// finish records the end of r in the job document, and reports whether the
// document held r's record.
func (s *Scheduler) finish(r Run, log zerolog.Logger) bool {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.opTimeout)
	defer cancel()
	ok, err := s.st.finish(ctx, r)
	if err != nil {
		log.Warn().Err(err).Msg("end of run not recorded")
	}
	return ok
}

func (s *Scheduler) addHistory(r Run, log zerolog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.opTimeout)
	defer cancel()
	if err := s.st.addHistory(ctx, r); err != nil {
		log.Warn().Err(err).Msg("run not recorded in the history")
	}
}

// release releases the lock of j, trying again for up to the op timeout:
// a lock left held makes every other instance wait for its lease to expire.
// It goes on while the scheduler stops, which waits for it. Locks of jobs
// that end together are released in one command.
func (s *Scheduler) release(j *job, log zerolog.Logger) {
	clk := s.cfg.clock
	giveUp := clk.Now().Add(s.cfg.opTimeout)
	pause := retryFirst
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.opTimeout)
		_, err := s.releases.submit(ctx, struct{}{}, j.lockID)
		cancel()
		if err == nil {
			return
		}
		now := clk.Now()
		if !now.Before(giveUp) {
			log.Warn().Err(err).Int("attempts", attempt).Msg("lock not released; it expires with its lease")
			return
		}
		log.Debug().Err(err).Int("attempt", attempt).Msg("lock not released; retrying")
		t := clk.NewTimer(min(pause, giveUp.Sub(now)))
		<-t.Chan()
		pause = s.nextPause(pause)
	}
}

type renewResult struct {
	r   lock.Renewal
	err error
}

// supervise renews the lease, won by a request sent at sent, while the job
// runs, and cancels the job when it times out, or when the lease cannot be
// renewed before tr (cause lock.ErrLeaseLost). The returned function stops
// it and waits for its goroutines.
func (s *Scheduler) supervise(j *job, sent time.Time, tr *trust, cancelJob context.CancelCauseFunc, log zerolog.Logger) func() {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		s.renewLoop(j, sent, tr, cancelJob, done, log)
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		<-finished
	}
}

// renewAttempt is a renewal in flight.
type renewAttempt struct {
	results chan renewResult // buffered: never blocks an abandoned attempt
	cancel  context.CancelFunc
	timer   clockwork.Timer // when to give up on it
	sent    time.Time
}

// startRenewal sends a renewal of j's lease that gives up after timeout.
func (s *Scheduler) startRenewal(ctx context.Context, j *job, timeout time.Duration, wg *sync.WaitGroup) *renewAttempt {
	a := &renewAttempt{results: make(chan renewResult, 1), sent: s.cfg.clock.Now()}
	ctx, a.cancel = context.WithCancel(ctx)
	a.timer = s.cfg.clock.NewTimer(timeout)
	wg.Add(1)
	go func() {
		defer wg.Done()
		r, err := s.locker.Renew(ctx, s.keeper, j.lockID)
		a.results <- renewResult{r: r, err: err}
	}()
	return a
}

// end abandons the attempt, or tidies up after its result.
func (a *renewAttempt) end() {
	a.cancel()
	a.timer.Stop()
}

func (s *Scheduler) renewLoop(j *job, sent time.Time, tr *trust, cancelJob context.CancelCauseFunc, done <-chan struct{}, log zerolog.Logger) {
	clk := s.cfg.clock
	retry := s.renewEvery / 2
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()

	expiry := clk.NewTimer(clk.Until(tr.get()))
	defer expiry.Stop()
	// Renewals are timed from the sending of the request that won or last
	// renewed the lease, as the lease's deadline is.
	renew := clk.NewTimer(clk.Until(sent.Add(s.renewEvery)))
	defer renew.Stop()
	var timeout <-chan time.Time
	if j.cfg.timeout > 0 {
		t := clk.NewTimer(j.cfg.timeout)
		defer t.Stop()
		timeout = t.Chan()
	}

	// The attempt in flight, if any. Each is bounded so that one that hangs
	// (a silent connection) leaves time for others before the deadline.
	// Its timer never fires after the trust deadline, so while it runs it
	// stands in for the expiry timer, which is stopped.
	var cur *renewAttempt
	defer func() {
		if cur != nil {
			cur.end()
		}
	}()
	var results <-chan renewResult
	var attemptC <-chan time.Time
	for {
		if cur != nil {
			results, attemptC = cur.results, cur.timer.Chan()
		} else {
			results, attemptC = nil, nil
		}
		select {
		case <-done:
			return
		case <-timeout:
			timeout = nil
			log.Warn().Dur("timeout", j.cfg.timeout).Msg("job timed out; cancelled")
			cancelJob(ErrJobTimeout)
		case <-expiry.Chan():
			log.Error().Msg("lease not renewed in time; job cancelled")
			cancelJob(lock.ErrLeaseLost)
			return
		case <-renew.Chan():
			remaining := clk.Until(tr.get())
			if remaining <= 0 {
				continue // the expiry is due
			}
			expiry.Stop()
			cur = s.startRenewal(ctx, j, min(remaining, max(retry, remaining/2)), &wg)
		case <-attemptC:
			sent := cur.sent
			cur.end()
			cur = nil
			if !clk.Now().Before(tr.get()) {
				log.Error().Msg("lease not renewed in time; job cancelled")
				cancelJob(lock.ErrLeaseLost)
				return
			}
			log.Warn().Dur("took", clk.Since(sent)).Msg("lease renewal timed out; retrying")
			expiry.Reset(clk.Until(tr.get()))
			renew.Reset(clk.Until(sent.Add(retry)))
		case res := <-results:
			sent := cur.sent
			cur.end()
			cur = nil
			switch {
			case res.err != nil:
				log.Warn().Err(res.err).Msg("lease renewal failed; retrying")
				renew.Reset(clk.Until(sent.Add(retry)))
			case !slices.Contains(res.r.Held, j.lockID):
				log.Error().Msg("lease lost; job cancelled")
				cancelJob(lock.ErrLeaseLost)
				return
			default:
				tr.extend(res.r.Deadline.Add(-s.margin))
				renew.Reset(clk.Until(sent.Add(s.renewEvery)))
			}
			expiry.Reset(clk.Until(tr.get()))
		}
	}
}
