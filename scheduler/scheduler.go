package scheduler

import (
	"container/heap"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/robfig/cron/v3"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/ctxlock"
	"github.com/mongolock/mongolock/lock"
)

// Scheduler runs cron jobs on a cluster of instances: each firing of a job
// runs on the instance that wins that firing's claim and holds that job's
// lock, at most once across every Scheduler sharing the database. It takes
// its locks through a lock.Session, which keeps their leases alive. It is
// safe for concurrent use.
type Scheduler struct {
	session *lock.Session
	clock   clockwork.Clock // the Session's
	keeper  string          // the Session's
	// claimant names this Scheduler in its claims, and its presence
	// lock: the keeper id and a suffix of its own, so that Schedulers
	// sharing a Session (and a jobs collection) have claims of their own.
	claimant string
	st       store                                     // limitedStore: its unbatched calls share slots
	slots    limiter                                   // MaxConcurrentWrites of them
	acquires *batcher[struct{}, string, acquireResult] // job locks, taken together
	releases *batcher[struct{}, *lock.Lease, struct{}] // and released together
	mst      *mongoStore                               // st, when it is MongoDB
	cfg      config
	ttl      time.Duration // the Session's
	// threshold is how late a firing may start and still count as on
	// time (misfire.go).
	threshold time.Duration

	mu       sync.Mutex
	jobs     map[string]*job
	order    []*job // registration order
	queue    jobQueue
	state    state
	ctx      context.Context // the loop's; cancelled by Stop
	cancel   context.CancelFunc
	wake     chan struct{}
	loopDone chan struct{}
	pollDone chan struct{}
	pollNow  chan struct{} // asks the poll loop for a poll now
	// catchUpDue: the next poll claims the firings missed before Start,
	// once it registered the jobs. Guarded by mu.
	catchUpDue bool
	done       chan struct{} // closed when the loops and every firing are gone
	wg         sync.WaitGroup

	// presence is this instance's presence lease (claims.go), guarded by
	// presenceMu, which also serializes taking it.
	presenceMu *ctxlock.Mutex
	presence   *lock.Lease
	leading    bool // leader-only: led at the last poll; guarded by mu

	// Guarded by mu: when Start was called, by the time firings fall due
	// by (timeBase), and by this instance's clock; whether that time is
	// the server's yet, and the last reading of it; the pending claims the
	// last poll saw, by job (pollOnce).
	startedAt, startedLocal time.Time
	serverBased             bool
	lastNow                 time.Time
	pending                 map[string]pendingClaim

	// Admission (admission.go), guarded by mu: firings dispatched here
	// and not started or given up yet, and how many may be.
	setups       int
	admitLimit   float64
	lastDecrease time.Time
}

// pendingClaim is a pending claim a poll saw, under token cid, first at
// since by this instance's clock.
type pendingClaim struct {
	cid   bson.ObjectID
	since time.Time
}

type state int

const (
	stateNew state = iota
	stateStarted
	stateStopped
)

// startKey identifies a run: its firing and the fence of its lease.
type startKey struct {
	at    int64
	fence uint64
}

type job struct {
	name, spec, lockID string
	req                claimReq // name and canonical spec: what it claims (specs.go)
	sched              cron.Schedule
	fn                 func(context.Context) error
	cfg                jobConfig

	// Guarded by Scheduler.mu.
	next     time.Time
	fired    time.Time // the last firing dispatched here
	index    int       // in the queue; -1 when not queued
	inflight int       // firings in progress on this instance
	setups   int       // of which in their setup (admission.go): claim, lock, start
	catchUps int       // of which catch-up claims (fire's catchUp)
	// claiming are the firings of those still claiming (fire): each works
	// on no claim yet, unless its own claim applied already.
	claiming []time.Time
	// owed is the latest firing dispatch skipped while the job was busy
	// here (ReasonBusy under OverlapSkip, ReasonSetupPending), zero if
	// none since: claimed as soon as the job is idle here (idle), not at
	// the next firing.
	owed    time.Time
	cancel  context.CancelCauseFunc // the running job's, nil if none
	runWork *work                   // the work of the running job, nil if none
	// started is the firing and fence of the last run whose start this
	// instance recorded: a run it records itself (displaced).
	started    startKey
	removed    bool // removed, as the last poll read
	registered bool // its document is known to exist
	refused    bool // admission refused its last firing here
	// superseded: another instance registered the job with another spec
	// since this one (specs.go), as the last poll read: active. It is not
	// fired here.
	superseded bool
	active     string
	// specFrom is when the job's spec became this instance's spec's: this
	// instance's registration, by its clock, if it changed the spec;
	// otherwise the document's (server time, zero if it never changed).
	// Catch-up claims no firing before it.
	specFrom time.Time
	// regSince is this instance's first registration of the job, by its
	// clock, zero before it: a registration again keeps it (takeBack).
	regSince time.Time
}

// New returns a Scheduler that stores claims and runs in db (collections
// DefaultJobsCollection and DefaultRunsCollection unless set by options) and
// takes job locks through session, as its keeper, on its clock. Stop the
// Scheduler before closing the Session: closing it ends the leases of
// running jobs (cause lock.ErrSessionClosed), and a Scheduler whose Session
// is closed claims no more firings. It is added to the session's components
// (lock.Session.AddComponent): the session's metrics and health cover it.
func New(db *mongo.Database, session *lock.Session, opts ...Option) (*Scheduler, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: New: nil database", ErrInvalidOption)
	}
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	if session == nil {
		return nil, fmt.Errorf("%w: New: nil session", ErrInvalidOption)
	}
	st := newMongoStore(db, cfg, session.Clock())
	s, err := newScheduler(st, session, cfg)
	if err != nil {
		return nil, err
	}
	s.mst = st
	st.bad = s.reportBad
	return s, nil
}

// reportBad reports a document a read of the Scheduler skipped
// (lock.BadDocument): lock.DocumentUnreadable, a warning in the log.
func (s *Scheduler) reportBad(b lock.BadDocument) {
	e := lock.Event{Kind: lock.DocumentUnreadable, At: s.clock.Now(), KeeperID: s.keeper, Err: b, Reason: b.String()}
	if id, ok := b.ID.(string); ok && b.Collection == s.cfg.jobsColl {
		e.Job = id
	}
	s.session.Emit(e)
}

func buildConfig(opts []Option) (config, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o(&cfg); err != nil {
			return config{}, err
		}
	}
	return cfg, nil
}

func newScheduler(st store, session *lock.Session, cfg config) (*Scheduler, error) {
	if session == nil {
		return nil, fmt.Errorf("%w: New: nil session", ErrInvalidOption)
	}
	select {
	case <-session.Done():
		return nil, fmt.Errorf("new scheduler: %w", lock.ErrSessionClosed)
	default:
	}
	made := session.Clock().Now()
	s := &Scheduler{
		session:  session,
		clock:    session.Clock(),
		keeper:   session.KeeperID(),
		claimant: claimantID(session.KeeperID(), made, schedulersBefore(session, nil)),
		st:       st, // wrapped below
		cfg:      cfg,
		ttl:      session.Timings().TTL,
		jobs:     make(map[string]*job),
		wake:     make(chan struct{}, 1),
		pollNow:  make(chan struct{}, 1),

		presenceMu: ctxlock.New(),

		admitLimit: admissionMax,
	}
	timings := session.Timings()
	s.threshold = cfg.threshold
	if s.threshold == 0 {
		s.threshold = MisfireThresholdFor(timings, s.pollInterval(), cfg.opTimeout)
	}
	if least := minMisfireThreshold(timings, s.pollInterval()); s.threshold < least {
		return nil, fmt.Errorf("%w: WithMisfireThreshold: %v is shorter than a dead claimant's takeover: TTL %v and two poll intervals of %v (%v)",
			ErrInvalidOption, s.threshold, timings.TTL, s.pollInterval(), least)
	}
	if err := lock.ValidateID("presence lock id (lock prefix, jobs collection and keeper id)", s.presenceID(s.claimant)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	s.acquires = newBatcher(s.clock, cfg.opTimeout, s.acquireBatch)
	s.releases = newBatcher(s.clock, cfg.opTimeout, s.releaseBatch)
	session.AddComponent(s) // for those who watch the session: metrics, health
	// Its place among the Session's Schedulers once it is one of them, so
	// that two made at once differ too.
	s.claimant = claimantID(s.keeper, made, schedulersBefore(session, s))
	s.slots = make(limiter, MaxConcurrentWrites)
	s.st = limitedStore{store: st, slots: s.slots}
	return s, nil
}

// KeeperID returns the keeper id the Scheduler takes job locks as: its
// Session's.
func (s *Scheduler) KeeperID() string { return s.keeper }

// ClaimantID returns the id the Scheduler claims firings as (Record's
// ClaimedBy): its keeper id, a slash and a suffix of its own, so that
// Schedulers sharing a Session each have their own claims, and a process
// restarted with the keeper id of one before it does not take that one's
// claims for its own. The suffix is the time New was called, by the
// Session's clock, and the Scheduler's place among those of its Session.
func (s *Scheduler) ClaimantID() string { return s.claimant }

// claimantID is the ClaimantID of the Scheduler of keeper made at made, the
// nth of its Session (from 0).
func claimantID(keeper string, made time.Time, n int) string {
	return keeper + "/" + strconv.FormatInt(made.UnixNano(), 36) + "-" + strconv.Itoa(n)
}

// schedulersBefore is how many Schedulers were built on session before s
// (all of them if s is not one).
func schedulersBefore(session *lock.Session, s *Scheduler) int {
	n := 0
	for _, c := range session.Components() {
		if c == any(s) {
			break
		}
		if _, ok := c.(*Scheduler); ok {
			n++
		}
	}
	return n
}

// LockID returns the lock id of the job called name.
func (s *Scheduler) LockID(name string) string { return s.cfg.lockPrefix + name }

// AddJob registers fn to run at every firing of spec, a robfig/cron spec:
// five fields (minute first, as in crontab) or six (a leading seconds
// field), a descriptor such as @daily or "@every 10m", optionally prefixed
// by CRON_TZ=Zone (see the package documentation). Jobs can be added
// before or after Start. name identifies the job across instances; if
// instances register it with different specs, the job follows the newest
// registration's (see "One spec per job" in the package documentation).
//
// fn receives a context that is cancelled when its lease is lost (cause
// lock.ErrLeaseLost), on Stop (ErrStopped) or after JobTimeout
// (ErrJobTimeout); RunFromContext tells it which firing it serves and its
// fencing token, and lock.LeaseFrom gives it the job's lease.
func (s *Scheduler) AddJob(name, spec string, fn func(ctx context.Context) error, opts ...JobOption) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: name is empty", ErrInvalidJob)
	case strings.HasPrefix(name, presenceMark):
		return fmt.Errorf("%w: %q: names beginning with %q are reserved", ErrInvalidJob, name, presenceMark)
	}
	lockID := s.LockID(name)
	if err := lock.ValidateID(fmt.Sprintf("lock id of job %q", name), lockID); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	if fn == nil {
		return fmt.Errorf("%w: %q: nil function", ErrInvalidJob, name)
	}
	sched, err := parseSpec(spec)
	if err != nil {
		return fmt.Errorf("job %q: %w", name, err)
	}
	now := s.clock.Now()
	if nextAfter(sched, s.cfg.location, now).IsZero() {
		return fmt.Errorf("job %q: %w %q: no firing in the next five years", name, ErrInvalidSpec, spec)
	}
	var jc jobConfig
	for _, o := range opts {
		if o == nil {
			return fmt.Errorf("job %q: %w: nil option", name, ErrInvalidOption)
		}
		if err := o(&jc); err != nil {
			return fmt.Errorf("job %q: %w", name, err)
		}
	}
	j := &job{name: name, spec: spec, lockID: lockID, sched: sched, fn: fn, cfg: jc, index: -1,
		req: claimReq{name, canonicalSpec(spec, s.cfg.location)}}

	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.state == stateStopped:
		return fmt.Errorf("add job %q: %w", name, ErrStopped)
	case s.jobs[name] != nil:
		return fmt.Errorf("%w: %q", ErrDuplicateJob, name)
	}
	s.jobs[name] = j
	s.order = append(s.order, j)
	if s.state == stateStarted {
		now := s.timeBase()
		s.schedule(j, now)
		if f, ok := s.missedAtStart(j, now); ok && s.cfg.leader == nil {
			s.dispatch(j, f, true) // as Start does
		}
		s.poke()
		s.pollSoon()
	}
	return nil
}

// pollSoon asks the poll loop for a poll now.
func (s *Scheduler) pollSoon() {
	select {
	case s.pollNow <- struct{}{}:
	default:
	}
}

// now is the instant firings fall due by: the server's clock, as the
// Session's Locker estimates it from its readings (the estimate's lower
// bound, so that no firing is tried before the server's clock reaches
// it), so that an instance whose own clock is wrong still fires on time;
// this instance's clock before the Locker's first reading, or on a Store
// that does not read the server's clock.
func (s *Scheduler) now() (now time.Time, server bool) {
	if st, ok := s.session.Store().(serverClock); ok {
		if lo, _, ok := st.ServerTime(); ok {
			return lo, true
		}
	}
	return s.clock.Now(), false
}

// serverClock is a Session's store that reads the server's clock (the
// Locker's: lock.Store).
type serverClock interface {
	ServerTime() (lo, hi time.Time, ok bool)
}

// unclocked reports whether firings cannot fall due yet: the Session's
// store reads the server's clock, and has not yet. Until it has, this
// instance's own clock, which may be ahead by any amount, would fire and
// claim firings the server has not reached (simulation seed 935: a claim
// six minutes ahead kept every instance from claiming the job's firings
// until then). Called with s.mu held.
func (s *Scheduler) unclocked() bool {
	_, reads := s.session.Store().(serverClock)
	return reads && !s.serverBased
}

// local is t, an instant of the time firings fall due by (now), on this
// instance's clock: deadlines set from a firing's time are waited for on
// it.
func (s *Scheduler) local(t time.Time) time.Time {
	now, _ := s.now()
	return s.clock.Now().Add(t.Sub(now))
}

// timeBase returns the time firings fall due by now (Scheduler.now). When
// that time moves back — at the Locker's first reading of the server's
// clock, if this instance's is ahead, or when the server's clock is
// stepped back — or becomes the server's, it queues each job again for its
// first firing from then on that it has not fired yet: so an instance whose
// clock is wrong does not wait for it, and Start's time is the server's
// too. Called with s.mu held, once started.
func (s *Scheduler) timeBase() time.Time {
	now, server := s.now()
	first := server && !s.serverBased
	if first {
		s.serverBased = true
		s.startedAt = now.Add(-s.clock.Since(s.startedLocal))
	}
	if first || now.Before(s.lastNow) {
		from := now
		if first {
			from = s.startedAt
		}
		for _, j := range s.queue {
			if n := nextAfter(j.sched, s.cfg.location, maxTime(from, j.fired)); first || n.Before(j.next) {
				j.next = n
			}
		}
		s.queue = slices.DeleteFunc(s.queue, func(j *job) bool {
			if j.next.IsZero() {
				j.index = -1
				return true
			}
			return false
		})
		for i, j := range s.queue {
			j.index = i
		}
		heap.Init(&s.queue)
		s.poke() // the loop waits for the next firing by the time before
	}
	s.lastNow = now
	return now
}

// schedule queues j for its first firing after now. Called with s.mu held.
func (s *Scheduler) schedule(j *job, now time.Time) {
	j.next = nextAfter(j.sched, s.cfg.location, now)
	if !j.next.IsZero() {
		heap.Push(&s.queue, j)
	}
}

func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Start begins scheduling in a goroutine of its own. Firings before Start
// are not run. It returns ErrStarted if called twice, ErrStopped after
// Stop, and an error wrapping lock.ErrSessionClosed if the Session is
// closed.
func (s *Scheduler) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case stateStarted:
		return ErrStarted
	case stateStopped:
		return ErrStopped
	}
	select {
	case <-s.session.Done():
		return fmt.Errorf("start scheduler: %w", lock.ErrSessionClosed)
	default:
	}
	now, server := s.now()
	s.startedAt, s.startedLocal, s.serverBased, s.lastNow = now, s.clock.Now(), server, now
	for _, j := range s.order {
		s.schedule(j, now)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.loopDone = make(chan struct{})
	s.pollDone = make(chan struct{})
	s.done = make(chan struct{})
	s.state = stateStarted
	// The latest firing before Start is claimed by the first poll, once
	// it registered the jobs (missedAtStart; a claim of it loses if
	// another instance claimed it): its claim runs or records the firings
	// since the last claim, as the misfire rule says. A job
	// whose spec it changes has no missed firings of this spec. In
	// leader-only mode the poll does it once this instance leads.
	s.catchUpDue = s.cfg.leader == nil
	s.pollSoon() // registers the jobs, and finds work left undone
	go s.loop(s.ctx)
	go s.pollLoop(s.ctx)
	go func() {
		<-s.loopDone
		<-s.pollDone
		s.wg.Wait() // the loops, the only callers of wg.Add, are gone
		// Only now: a claim not started can then be taken over at once.
		s.absent()
		close(s.done)
	}()
	return nil
}

// Stop stops scheduling: no firing is claimed and no job started after it
// begins. With StopCancel it cancels running jobs (cause ErrStopped); with
// StopWait it lets them finish until ctx is done, then cancels them. Every
// job's lease is released when the job returns. Stop returns nil once every
// goroutine of the Scheduler is gone, or ctx's error (wrapped) if ctx ends
// first, in which case the jobs have been cancelled and finish on their own;
// calling Stop again waits for them. A Scheduler cannot be restarted. Stop
// does not close the Session. A nil ctx is an error wrapping
// lock.ErrInvalidArgument, and stops nothing.
func (s *Scheduler) Stop(ctx context.Context) error {
	if err := checkCall("scheduler: stop", ctx); err != nil {
		return err
	}
	s.mu.Lock()
	if s.state == stateNew {
		s.state = stateStopped
		s.mu.Unlock()
		return nil
	}
	if s.state == stateStarted {
		s.state = stateStopped
		s.cancel()
	}
	if s.cfg.stopMode == StopCancel {
		s.cancelJobs(ErrStopped)
	}
	done := s.done
	s.mu.Unlock()
	if done == nil { // stopped before it started
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		s.cancelJobs(ErrStopped)
		s.mu.Unlock()
		return fmt.Errorf("scheduler: stop: %w", ctx.Err())
	}
}

// cancelJobs cancels every running job. Called with s.mu held.
func (s *Scheduler) cancelJobs(cause error) {
	for _, j := range s.order {
		if j.cancel != nil {
			j.cancel(cause)
		}
	}
}

// loop fires jobs when they are due, until ctx is cancelled or the Session
// closes: without it no firing could run, and claiming them would keep
// other instances from running them.
func (s *Scheduler) loop(ctx context.Context) {
	defer close(s.loopDone)
	var timer clockwork.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var fired <-chan time.Time
		wait, ok := s.dispatchDue()
		// The wait is by the Locker's estimate of the server's clock, which
		// a new reading may move forward (the server's clock stepped, a
		// tighter sample): look again a renew interval on at the latest,
		// rather than wait out a gap the estimate no longer has.
		wait = min(wait, s.session.Timings().RenewInterval)
		switch {
		case ok && timer == nil:
			timer = s.clock.NewTimer(wait)
		case ok:
			timer.Reset(wait)
		case timer != nil:
			timer.Stop()
		}
		if ok {
			fired = timer.Chan()
		}
		select {
		case <-ctx.Done():
			return
		case <-s.session.Done():
			return
		case <-s.wake:
		case <-fired:
		}
	}
}

// dispatchDue starts the firings that are due and returns how long to wait
// for the next one.
func (s *Scheduler) dispatchDue() (time.Duration, bool) {
	var events []lock.Event
	defer func() {
		// Outside s.mu: an observer may call back into the Scheduler.
		for _, e := range events {
			s.session.Emit(e)
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateStarted {
		return 0, false
	}
	now := s.timeBase()
	if s.unclocked() {
		// The first poll's presence lease reads the server's clock, and
		// timeBase queues the jobs again by it.
		return s.session.Timings().RenewInterval, true
	}
	for len(s.queue) > 0 && !s.queue[0].next.After(now) {
		j := s.queue[0]
		// Only the latest due firing is tried: firings missed while this
		// instance was not running (suspended, overloaded) are not replayed.
		f, missed := j.next, 0
		for {
			n := nextAfter(j.sched, s.cfg.location, f)
			if n.IsZero() || n.After(now) {
				break
			}
			f, missed = n, missed+1
		}
		if missed > 0 {
			events = append(events, lock.Event{Kind: lock.FiringSkipped, Job: j.name, LockID: j.lockID, Scheduled: j.next,
				Reason: fmt.Sprintf("%s: %d firings from this one on not tried here", ReasonBehind, missed)})
		}
		if e, ok := s.dispatch(j, f, false); !ok {
			events = append(events, e)
		}
		j.fired, j.next = f, nextAfter(j.sched, s.cfg.location, f)
		if j.next.IsZero() {
			heap.Remove(&s.queue, j.index)
		} else {
			heap.Fix(&s.queue, j.index)
		}
	}
	if len(s.queue) == 0 {
		return 0, false
	}
	return s.queue[0].next.Sub(now), true
}

// dispatch starts firing f of j (a catch-up claim at Start, if catchUp)
// unless j was removed, or a firing of j is
// still in progress here (for OverlapWait and OverlapCancel, unless one
// also waits for it); then it returns the event that says so, and false.
// Called with s.mu held.
func (s *Scheduler) dispatch(j *job, f time.Time, catchUp bool) (lock.Event, bool) {
	limit := 1
	if j.cfg.overlap != OverlapSkip {
		limit = 2
	}
	if !catchUp {
		// A catch-up claim still in flight does not make the job busy: it
		// mostly loses, and the firing due meanwhile would be missed.
		limit += j.catchUps
	}
	switch {
	case s.cfg.leader != nil && !s.cfg.leader.IsLeader():
		return lock.Event{}, true // a follower tries nothing
	case j.removed:
		return lock.Event{Kind: lock.FiringSkipped, Job: j.name, LockID: j.lockID, Scheduled: f, Reason: ReasonRemoved}, false
	case j.superseded:
		return lock.Event{}, true // another spec's firings are the job's (JobSpecSuperseded said so)
	case j.inflight >= limit:
		reason := ReasonBusy
		if j.setups >= j.inflight {
			reason = ReasonSetupPending // nothing runs: the database is slow
		}
		if !catchUp && (reason == ReasonSetupPending || j.cfg.overlap == OverlapSkip) {
			// Owed, unless two firings are here, one running and one
			// waiting for it (OverlapWait, OverlapCancel): those that
			// fall meanwhile are not run.
			j.owed = f
		}
		return lock.Event{Kind: lock.FiringSkipped, Job: j.name, LockID: j.lockID, Scheduled: f, Reason: reason}, false
	case !s.admit() && !j.refused:
		// A job refused once goes ahead the next time, however loaded:
		// the jobs that fire with it, tried first, would otherwise take
		// every slot, firing after firing.
		j.refused = true
		return lock.Event{Kind: lock.FiringSkipped, Job: j.name, LockID: j.lockID, Scheduled: f,
			Reason: fmt.Sprintf("%s: %d firings being claimed, locked or started", ReasonOverloaded, s.setups)}, false
	}
	j.refused = false
	j.inflight++
	if !f.Before(j.owed) {
		j.owed = time.Time{} // its claim covers it
	}
	if catchUp {
		j.catchUps++
	}
	s.setups++
	j.setups++
	s.wg.Add(1)
	go s.fire(j, f, catchUp)
	return lock.Event{}, true
}

// JobNames returns the names of the registered jobs, in registration
// order, without a round trip.
func (s *Scheduler) JobNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.order))
	for i, j := range s.order {
		out[i] = j.name
	}
	return out
}

// Lag is how far the scheduler's loop is behind its own schedule: how long
// ago the earliest firing it has not dispatched yet was due, by the
// server's clock as this instance estimates it (now). It is 0 when none is
// overdue, and before Start and after Stop.
func (s *Scheduler) Lag() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateStarted || len(s.queue) == 0 {
		return 0
	}
	now, _ := s.now()
	return max(now.Sub(s.queue[0].next), 0)
}

// Jobs describes every registered job, in registration order, with what
// MongoDB knows of its claims and runs (one query).
func (s *Scheduler) Jobs(ctx context.Context) ([]JobInfo, error) {
	if err := checkCall("jobs", ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	now, _ := s.now()
	out := make([]JobInfo, len(s.order))
	names := make([]string, len(s.order))
	for i, j := range s.order {
		next := j.next
		if s.state != stateStarted {
			next = nextAfter(j.sched, s.cfg.location, now)
		}
		out[i] = JobInfo{Record: Record{Name: j.name, Spec: j.req.spec}, Registered: j.req.spec, Superseded: j.superseded,
			LockID: j.lockID, Next: next}
		names[i] = j.name
	}
	s.mu.Unlock()
	if len(names) == 0 {
		return out, nil
	}
	recs, err := s.st.records(ctx, names)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]Record, len(recs))
	for _, r := range recs {
		byName[r.Name] = r
	}
	for i := range out {
		if r, ok := byName[out[i].Name]; ok {
			out[i].Record = r
		}
	}
	return out, nil
}

// History returns the last limit runs of job name, newest first, whichever
// instance ran them (all of them if limit <= 0).
func (s *Scheduler) History(ctx context.Context, name string, limit int) ([]Run, error) {
	if err := checkCall("history", ctx); err != nil {
		return nil, err
	}
	return s.st.history(ctx, name, limit)
}

// EnsureIndexes creates the indexes of the run history: one to read a job's
// runs and, unless WithHistory(0), a TTL index on their end time that keeps
// them for the history retention. It is idempotent. If the server does not
// implement TTL indexes (FerretDB) it creates a plain index instead, and
// the history is kept until PurgeHistory deletes it; the package-level
// EnsureIndexes tells when that happens.
func (s *Scheduler) EnsureIndexes(ctx context.Context) error {
	if err := checkCall("ensure indexes", ctx); err != nil {
		return err
	}
	if s.mst == nil {
		return nil
	}
	return s.mst.ensureIndexes(ctx, s.cfg.retention, func(string) {})
}

// PurgeHistory deletes runs that ended longer ago than the history retention
// by the server's clock, for servers without TTL indexes. It returns how
// many it deleted.
func (s *Scheduler) PurgeHistory(ctx context.Context) (int, error) {
	if err := checkCall("purge history", ctx); err != nil {
		return 0, err
	}
	if s.mst == nil || s.cfg.retention <= 0 {
		return 0, nil
	}
	return s.mst.purge(ctx, s.cfg.retention)
}

// jobQueue is a min-heap of jobs by next firing.
type jobQueue []*job

func (q jobQueue) Len() int           { return len(q) }
func (q jobQueue) Less(i, k int) bool { return q[i].next.Before(q[k].next) }
func (q jobQueue) Swap(i, k int) {
	q[i], q[k] = q[k], q[i]
	q[i].index, q[k].index = i, k
}
func (q *jobQueue) Push(x any) {
	j := x.(*job)
	j.index = len(*q)
	*q = append(*q, j)
}
func (q *jobQueue) Pop() any {
	old := *q
	j := old[len(old)-1]
	old[len(old)-1] = nil
	j.index = -1
	*q = old[:len(old)-1]
	return j
}
