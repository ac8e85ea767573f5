package scheduler

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

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

	// 3. Take the job's lock: held elsewhere means the previous run is
	// still going there, and this firing is skipped.
	ctx, cancel = context.WithTimeout(s.ctx, s.cfg.opTimeout)
	lease, ok, err := s.locker.AcquireLock(ctx, j.lockID, s.keeper)
	cancel()
	switch {
	case err != nil:
		ev := log.Warn()
		if s.ctx.Err() != nil {
			ev = log.Debug() // stopping
		}
		ev.Err(err).Msg("claimed firing skipped: lock not acquired")
		s.release(j, log) // the write may have happened
		return
	case !ok:
		log.Info().Msg("firing skipped: previous run still going on another instance")
		return
	}
	log = log.With().Uint64("fence", lease.Fence).Logger()
	s.runLocked(j, f, lease, log)
	s.release(j, log)
}

// runLocked runs firing f of j under lease.
func (s *Scheduler) runLocked(j *job, f time.Time, lease lock.Lease, log zerolog.Logger) {
	jobCtx, cancelJob := context.WithCancelCause(context.Background())
	defer cancelJob(nil)
	s.mu.Lock()
	if s.state != stateStarted {
		s.mu.Unlock()
		log.Debug().Msg("stopping; claimed firing not run")
		return
	}
	j.cancel = cancelJob
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		j.cancel = nil
		s.mu.Unlock()
	}()

	// The lease is renewed from now on; jobCtx is cancelled if it is lost.
	stopSupervisor := s.supervise(j, lease, cancelJob, log)
	defer stopSupervisor()

	// 4. Record the start, unless a run of a later firing started before.
	// Under the lock, this keeps runs in firing order: an instance that
	// claimed f and then stalled does not run f after a later firing ran.
	r := Run{Job: j.name, Keeper: s.keeper, Scheduled: f, Fence: lease.Fence, Outcome: OutcomeRunning}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.opTimeout)
	start, ok, err := s.st.start(ctx, r)
	cancel()
	switch {
	case err == nil && ok && jobCtx.Err() != nil:
		err = context.Cause(jobCtx) // lease lost, or stopping, while recording
		fallthrough
	case err != nil:
		log.Warn().Err(err).Msg("claimed firing skipped: not started")
		// The write may have happened: do not leave it "running".
		r.Outcome, r.Error = OutcomeFailed, "not started: "+err.Error()
		s.finish(r, log)
		return
	case !ok:
		log.Info().Msg("claimed firing skipped: a later firing ran meanwhile")
		return
	}
	r.Start = start

	// 5. Run.
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

func (s *Scheduler) finish(r Run, log zerolog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.opTimeout)
	defer cancel()
	if err := s.st.finish(ctx, r); err != nil {
		log.Warn().Err(err).Msg("end of run not recorded")
	}
}

func (s *Scheduler) release(j *job, log zerolog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.opTimeout)
	defer cancel()
	err := s.locker.ReleaseLock(ctx, j.lockID, s.keeper)
	switch {
	case errors.Is(err, lock.ErrNotHeld):
		log.Debug().Err(err).Msg("lock was not held at release")
	case err != nil:
		log.Warn().Err(err).Msg("lock not released; it expires with its lease")
	}
}

type renewResult struct {
	r   lock.Renewal
	err error
}

// supervise renews lease while the job runs, and cancels the job when it
// times out, or when the lease cannot be renewed before its deadline minus
// the margin (cause lock.ErrLeaseLost). The returned function stops it and
// waits for its goroutines.
func (s *Scheduler) supervise(j *job, lease lock.Lease, cancelJob context.CancelCauseFunc, log zerolog.Logger) func() {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		s.renewLoop(j, lease, cancelJob, done, log)
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		<-finished
	}
}

func (s *Scheduler) renewLoop(j *job, lease lock.Lease, cancelJob context.CancelCauseFunc, done <-chan struct{}, log zerolog.Logger) {
	clk := s.cfg.clock
	ctx, cancel := context.WithCancel(context.Background())
	results := make(chan renewResult, 1)
	inflight := false
	defer func() {
		cancel()
		if inflight {
			<-results
		}
	}()

	expiry := clk.NewTimer(lease.Deadline.Sub(clk.Now()) - s.margin)
	defer expiry.Stop()
	renew := clk.NewTimer(s.renewEvery)
	defer renew.Stop()
	var timeout <-chan time.Time
	if j.cfg.timeout > 0 {
		t := clk.NewTimer(j.cfg.timeout)
		defer t.Stop()
		timeout = t.Chan()
	}
	for {
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
			inflight = true
			go func() {
				// Asynchronous, so that a renewal that hangs does not
				// delay the cancellation at the deadline.
				r, err := s.locker.Renew(ctx, s.keeper, j.lockID)
				results <- renewResult{r, err}
			}()
		case res := <-results:
			inflight = false
			switch {
			case res.err != nil:
				log.Warn().Err(res.err).Msg("lease renewal failed; retrying")
				renew.Reset(s.renewEvery / 2)
			case len(res.r.Held) == 0:
				log.Error().Msg("lease lost; job cancelled")
				cancelJob(lock.ErrLeaseLost)
				return
			default:
				expiry.Reset(res.r.Deadline.Sub(clk.Now()) - s.margin)
				renew.Reset(s.renewEvery)
			}
		}
	}
}
