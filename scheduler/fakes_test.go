package scheduler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jonboulle/clockwork"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
)

// fakeStore keeps claims and runs in memory, with the semantics of
// mongoStore: a jobDoc per job, changed under one mutex as the server
// changes one document atomically.
type fakeStore struct {
	mu      sync.Mutex
	docs    map[string]*jobDoc
	hist    []Run
	clock   clockwork.Clock
	onClaim func(job string, f time.Time) // called after a successful claim
	// onStart, if set, is called by start first: start applies the write
	// only if it says so, then returns its error if non-nil (a write that
	// failed, or that went through but whose reply was lost).
	onStart    func(ctx context.Context, r Run) (applied bool, err error)
	afterStart func(d *jobDoc) // called with s.mu held after start applied, before it returns
	onHistory  func(r Run)     // called by addHistory
	// onFinish, if set, is called by finish first: a non-nil error fails
	// the write, unapplied.
	onFinish    func(r Run) error
	histWrites  int
	finishCalls int
	// claimLatency and pollLatency delay each claim's and each poll's
	// reply, as a round trip would.
	claimLatency, pollLatency time.Duration
	onResume                  func(job string) // called by resume first
}

func newFakeStore(clk clockwork.Clock) *fakeStore {
	return &fakeStore{docs: map[string]*jobDoc{}, clock: clk}
}

// doc returns job's document, made if missing. Called with s.mu held.
func (s *fakeStore) doc(job string) *jobDoc {
	d := s.docs[job]
	if d == nil {
		d = &jobDoc{ID: job, Last: neverClaimed}
		s.docs[job] = d
	}
	return d
}

// settledThrough makes job's document as a claim of f settled it.
func (s *fakeStore) settledThrough(job string, f time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.docs[job] = &jobDoc{ID: job, Last: f, Done: f}
}

func (s *fakeStore) register(_ context.Context, jobs []regReq, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range jobs {
		if d := s.doc(j.job); j.reg.By != "" {
			if d.Regs == nil {
				d.Regs = regsDoc{}
			}
			d.Regs[regKey(j.spec)] = j.reg
		}
		if d := s.docs[j.job]; d == nil || d.Hash == "" {
			d := s.doc(j.job)
			d.Spec, d.Hash = j.spec, j.hash()
		}
		if d := s.docs[j.job]; d.Last.Equal(neverClaimed) && d.Done.IsZero() {
			d.Done = now // settleRegistered
		}
		if d := s.docs[j.job]; d.Hash != j.hash() {
			d.Spec, d.Hash, d.SpecSince = j.spec, j.hash(), s.clock.Now()
		}
	}
	return nil
}

func (s *fakeStore) claim(_ context.Context, job, spec string, f time.Time, keeper string, catchUp bool) (*work, error) {
	time.Sleep(s.claimLatency)
	s.mu.Lock()
	d, ok := s.docs[job]
	switch {
	case catchUp && (!ok || !d.Last.After(neverClaimed)),
		ok && (!d.Last.Before(f) || !d.Done.Before(f) || d.Pending || d.Hash != "" && d.Hash != specHash(job, spec)):
		s.mu.Unlock()
		return nil, nil
	}
	d = s.doc(job)
	d.Last, d.By, d.Pending, d.Spec, d.At, d.ClaimID = f, keeper, true, spec, s.clock.Now(), bson.NewObjectID()
	d.Hash = specHash(job, spec)
	w := workOf(d)
	hook := s.onClaim
	s.mu.Unlock()
	if hook != nil {
		hook(job, f)
	}
	return w, nil
}

func (s *fakeStore) claimTrigger(_ context.Context, job string, t time.Time, keeper string) (*work, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.docs[job]
	if d == nil || !d.Control.Trigger.Equal(t) || d.Pending {
		return nil, nil
	}
	d.Control.Trigger, d.PTrig, d.By, d.Pending, d.At, d.ClaimID = time.Time{}, t, keeper, true, s.clock.Now(), bson.NewObjectID()
	return workOf(d), nil
}

func (s *fakeStore) takeOver(_ context.Context, jobs []string, from, keeper string) ([]*work, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*work
	cid := bson.NewObjectID()
	for _, job := range jobs {
		if d := s.docs[job]; d != nil && d.Pending && d.By == from {
			d.By, d.At, d.ClaimID = keeper, s.clock.Now(), cid
			out = append(out, workOf(d))
		}
	}
	return out, nil
}

func (s *fakeStore) resume(_ context.Context, job, keeper string, cid bson.ObjectID) (*work, error) {
	if s.onResume != nil {
		s.onResume(job)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.docs[job]
	if d == nil || !d.Pending || d.By != keeper || d.ClaimID != cid {
		return nil, nil
	}
	d.At, d.ClaimID = s.clock.Now(), bson.NewObjectID()
	return workOf(d), nil
}

func (s *fakeStore) poll(_ context.Context, jobs []claimReq) ([]jobDoc, error) {
	time.Sleep(s.pollLatency)
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []jobDoc
	for _, j := range jobs {
		d := s.docs[j.job]
		if d != nil && (d.Pending || !d.Control.Trigger.IsZero() || d.Control.Removed || d.Hash != "" && d.Hash != j.hash()) {
			c := *d
			c.Regs = maps.Clone(d.Regs) // read after the lock is released
			out = append(out, c)
		}
	}
	return out, nil
}

func (s *fakeStore) start(ctx context.Context, r Run, w *work, deadline time.Time) (time.Time, bool, error) {
	s.mu.Lock()
	hook := s.onStart
	s.mu.Unlock()
	late := false
	apply := func() (time.Time, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		d := s.docs[r.Job]
		if !d.startable(r, w) {
			return d.startOf(r, w) // refused, or a retried write
		}
		if !deadline.IsZero() && !s.clock.Now().Before(deadline) {
			late = true
			return time.Time{}, false
		}
		switch {
		case w.triggered():
			d.Pending, d.PTrig = false, time.Time{}
		case r.Scheduled.Equal(w.last):
			d.Done, d.Pending = r.Scheduled, false
		default:
			d.Done = r.Scheduled
		}
		d.Run = runDoc{Keeper: r.Keeper, Scheduled: r.Scheduled, Start: s.clock.Now(), Fence: fenceTS(r.Fence),
			Outcome: string(OutcomeRunning), Attempt: max(r.Attempt, 1), Trigger: r.Triggered, ClaimID: w.cid}
		if s.afterStart != nil {
			s.afterStart(d)
		}
		return d.Run.Start, true
	}
	if hook == nil {
		start, ok := apply()
		if late {
			return start, ok, errNotStarted
		}
		return start, ok, nil
	}
	var start time.Time
	ok := false
	applied, err := hook(ctx, r)
	if applied {
		start, ok = apply()
	}
	if err != nil {
		return time.Time{}, false, err
	}
	if late {
		return start, ok, errNotStarted
	}
	return start, ok, nil
}

func (s *fakeStore) settle(_ context.Context, w *work) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.docs[w.job]
	if d == nil || !d.Pending || d.By != w.keeper || d.ClaimID != w.cid ||
		w.triggered() && !d.PTrig.Equal(w.trig) || !w.triggered() && (!d.Last.Equal(w.last) || !d.PTrig.IsZero()) {
		return false, nil
	}
	d.Pending, d.PTrig = false, time.Time{}
	if !w.triggered() {
		d.Done = w.last
	}
	return true, nil
}

func (s *fakeStore) finish(_ context.Context, r Run, ran bool) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finishCalls++
	if s.onFinish != nil {
		if err := s.onFinish(r); err != nil {
			return false, err
		}
	}
	d := s.docs[r.Job]
	if d == nil || !d.Run.holds(r) {
		return false, nil
	}
	if d.Run.Outcome != string(OutcomeRunning) {
		return !d.Run.End.IsZero(), nil // ended already: a retried write
	}
	end := s.clock.Now() // $currentDate, unless the caller says (finishModel)
	if !r.End.IsZero() {
		end = r.End
	}
	d.Run.Outcome, d.Run.Error, d.Run.End, d.Run.Attempt = string(r.Outcome), r.Error, end, max(r.Attempt, 1)
	switch {
	case ran && r.Outcome == OutcomeSucceeded:
		d.Control.Fails = 0
	case ran:
		d.Control.Fails++
	}
	return true, nil
}

func (s *fakeStore) pauseAfter(_ context.Context, job string, n int) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.docs[job]
	if d == nil || d.Control.Fails < n || d.Control.Paused {
		return false, nil
	}
	d.Control.Paused, d.Control.PauseNote, d.Control.PauseTill, d.Control.PausedAt = true, pauseNote(n), time.Time{}, s.clock.Now()
	d.Control.Suspended = ReasonPaused
	return true, nil
}

// control changes job's control fields with fn: a control written at a
// time of the test's choosing (a trigger at a given instant, a pause
// whose end has passed since).
func (s *fakeStore) control(job string, fn func(c *controlDoc)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(&s.doc(job).Control)
}

// controlled changes the control fields of job's document with fn, at now
// by the store's clock, as the writes of control.go do: ErrUnknownJob if
// it has none.
func (s *fakeStore) controlled(op, job string, fn func(c *controlDoc, now time.Time) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.docs[job]
	if d == nil {
		return fmt.Errorf("%s %q: %w: no document", op, job, ErrUnknownJob)
	}
	return fn(&d.Control, s.clock.Now())
}

func (s *fakeStore) pauseJob(_ context.Context, job string, p Pause) error {
	return s.controlled("pause", job, func(c *controlDoc, now time.Time) error {
		if !p.Until.IsZero() {
			if err := checkUntil(job, p, now); err != nil {
				return err
			}
		}
		c.Paused, c.Suspended, c.PauseTill, c.PauseNote, c.PausedAt = true, ReasonPaused, p.Until, p.Note, now
		return nil
	})
}

func (s *fakeStore) resumeJob(_ context.Context, job string) error {
	return s.controlled("resume", job, func(c *controlDoc, now time.Time) error {
		if c.Paused || c.Removed { // as resumeIn: only a pause or removal ends
			c.Paused, c.PauseNote, c.Removed, c.ResumedAt = false, "", false, now
		}
		c.Fails = 0
		return nil
	})
}

func (s *fakeStore) triggerJob(_ context.Context, job string) (bool, error) {
	made := false
	err := s.controlled("trigger", job, func(c *controlDoc, now time.Time) error {
		switch {
		case c.Removed:
			return removedJob(job)
		case c.Trigger.IsZero():
			c.Trigger, made = now, true
		}
		return nil
	})
	return made, err
}

func (s *fakeStore) removeJob(_ context.Context, job string) error {
	return s.controlled("remove", job, func(c *controlDoc, now time.Time) error {
		c.Removed, c.Suspended, c.Trigger, c.PausedAt = true, ReasonRemoved, time.Time{}, now
		return nil
	})
}

func (s *fakeStore) addHistory(_ context.Context, r Run) error {
	s.mu.Lock()
	hook := s.onHistory
	s.mu.Unlock()
	if hook != nil {
		hook(r)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.histWrites++
	if r.End.IsZero() { // $currentDate, unless the caller says (historyBatch)
		r.End = s.clock.Now()
	}
	// By id, as mongoStore: a record of the same firing is replaced.
	for i, h := range s.hist {
		if historyID(h) == historyID(r) {
			s.hist[i] = r
			return nil
		}
	}
	s.hist = append(s.hist, r)
	return nil
}

func (s *fakeStore) addHistoryOnce(ctx context.Context, r Run) error {
	s.mu.Lock()
	for _, h := range s.hist {
		if historyID(h) == historyID(r) {
			s.mu.Unlock()
			return nil
		}
	}
	s.mu.Unlock()
	return s.addHistory(ctx, r)
}

func (s *fakeStore) records(_ context.Context, names []string) ([]Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Record
	for _, n := range names {
		if d := s.docs[n]; d != nil {
			out = append(out, d.record(s.clock.Now()))
		}
	}
	return out, nil
}

func (s *fakeStore) history(_ context.Context, job string, limit int) ([]Run, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Run
	for _, r := range s.hist {
		if r.Job == job {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Scheduled.After(out[k].Scheduled) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func (s *fakeStore) runs() []Run {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Run(nil), s.hist...)
}

// rig is a Scheduler on a fake store of claims and runs and an in-memory
// lock store, with a real Session, in a synctest bubble: its clock is the
// real clock, whose time only moves when every goroutine of the test waits
// for it.
type rig struct {
	t       *testing.T
	locks   *locktest.Store
	store   *fakeStore
	session *lock.Session
	obs     *recorder
	s       *Scheduler
}

// epoch is when every synctest bubble starts: a whole minute, so that
// firings are easy to reason about.
var epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// newRig makes a rig in the current synctest bubble, at its start. Its
// Scheduler is stopped and its Session closed when the test ends.
func newRig(t *testing.T, ttl time.Duration, opts ...Option) *rig {
	t.Helper()
	return newRigWith(t, ttl, nil, opts...)
}

// newRigWith is newRig with options for the Session.
func newRigWith(t *testing.T, ttl time.Duration, sopts []lock.SessionOption, opts ...Option) *rig {
	t.Helper()
	return rigOn(t, locktest.New(locktest.WithTTL(ttl)), sopts, opts...)
}

// rigOn is newRigWith on locks.
func rigOn(t *testing.T, locks *locktest.Store, sopts []lock.SessionOption, opts ...Option) *rig {
	t.Helper()
	if now := locks.Clock().Now(); !now.Equal(epoch) {
		t.Fatalf("a rig is made at the start of a synctest bubble, not at %v", now)
	}
	r := &rig{t: t, locks: locks, obs: newRecorder()}
	r.store = newFakeStore(r.locks.Clock())
	var err error
	r.session, err = lock.NewSession(r.locks,
		append([]lock.SessionOption{lock.WithKeeperID("me"), lock.WithObserver(r.obs)}, sopts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.session.Close() }) // after the Scheduler stopped
	cfg, err := buildConfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	r.s, err = newScheduler(r.store, r.session, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = r.s.Stop(ctx)
	})
	return r
}

// lockCounts returns how many job locks the lock store granted, and how many
// renew and release calls of job locks it got: the Scheduler's presence
// lock (claims.go) is not counted.
func (r *rig) lockCounts() (acquired, renewals, releases int) {
	for _, c := range r.locks.Calls(locktest.OpAcquire) {
		for _, g := range c.Acquisition.Granted {
			if !isPresence(g.LockID) {
				acquired++
			}
		}
	}
	return acquired, len(jobCalls(r.locks.Calls(locktest.OpRenew))), len(jobCalls(r.locks.Calls(locktest.OpRelease)))
}

// isPresence reports whether id is the id of a Scheduler's presence lock.
func isPresence(id string) bool { return strings.Contains(id, presenceMark) }

// jobCall reports whether c is about a job's lock, not only presence locks.
func jobCall(c locktest.Call) bool {
	return slices.ContainsFunc(c.LockIDs, func(id string) bool { return !isPresence(id) })
}

// jobCalls returns the calls of calls that are about a job's lock.
func jobCalls(calls []locktest.Call) []locktest.Call {
	var out []locktest.Call
	for _, c := range calls {
		if jobCall(c) {
			out = append(out, c)
		}
	}
	return out
}

// onCall runs fn at the start of every lock store call of op about a
// job's lock.
func (r *rig) onCall(op locktest.Op, fn func(ctx context.Context) error) {
	r.locks.BeforeCall(func(ctx context.Context, c locktest.Call) error {
		if c.Op != op || !jobCall(c) {
			return nil
		}
		return fn(ctx)
	})
}

func (r *rig) busy() bool {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	for _, j := range r.s.order {
		if j.inflight > 0 {
			return true
		}
	}
	return false
}

// idle checks that no firing is in progress once every goroutine waits:
// for the clock, or for something that will never come.
func (r *rig) idle() {
	r.t.Helper()
	synctest.Wait()
	if r.busy() {
		r.t.Fatalf("a firing is still in progress at %v", time.Since(epoch))
	}
}

// stop stops the Scheduler and closes the Session, and fails the test if
// either fails.
func (r *rig) stop() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.s.Stop(ctx); err != nil {
		r.t.Fatal(err)
	}
	if err := r.session.Close(); err != nil {
		r.t.Fatal(err)
	}
}

// recorder is an Observer that keeps every event, and passes each on to
// whoever waits for one (next).
type recorder struct {
	mu      sync.Mutex
	events  []lock.Event
	dropped bool // an event was not passed on: c was full
	c       chan lock.Event
}

func newRecorder() *recorder { return &recorder{c: make(chan lock.Event, 10000)} }

func (o *recorder) Observe(e lock.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, e)
	select {
	case o.c <- e:
	default:
		o.dropped = true
	}
}

// all returns the events of kinds (every event if none), in order.
func (o *recorder) all(kinds ...lock.EventKind) []lock.Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []lock.Event
	for _, e := range o.events {
		if len(kinds) == 0 || slices.Contains(kinds, e.Kind) {
			out = append(out, e)
		}
	}
	return out
}

// firingEvents returns the scheduler's events, those that name a job.
func (o *recorder) firingEvents() []lock.Event {
	return o.all(lock.FiringClaimed, lock.FiringLost, lock.FiringSkipped, lock.RunStarted, lock.RunEnded)
}

// next waits, letting time pass, for the next event of one of kinds.
func (r *rig) next(kinds ...lock.EventKind) lock.Event {
	r.t.Helper()
	timeout := time.After(10 * time.Minute)
	for {
		select {
		case e := <-r.obs.c:
			if slices.Contains(kinds, e.Kind) {
				return e
			}
		case <-timeout:
			r.obs.mu.Lock()
			dropped := r.obs.dropped
			r.obs.mu.Unlock()
			r.t.Fatalf("no %v event within 10 minutes (events dropped: %v)", kinds, dropped)
		}
	}
}

// end waits, letting time pass, for the event that ends a firing's try
// here: FiringLost, FiringSkipped or RunEnded.
func (r *rig) end() lock.Event {
	r.t.Helper()
	return r.next(lock.FiringLost, lock.FiringSkipped, lock.RunEnded)
}

// recv waits for a value from c, letting time pass.
func recv[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Minute):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

var errBoom = errors.New("boom")

// lastClaim is job's last claimed firing (zero if none).
func (s *fakeStore) lastClaim(job string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.docs[job]; d != nil && d.Last.After(neverClaimed) {
		return d.Last
	}
	return time.Time{}
}

// running is job's last started run, nil if none.
func (s *fakeStore) running(job string) *Run {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.docs[job]; d != nil {
		return d.Run.run(job)
	}
	return nil
}

// notRunOnly reports whether the history holds only the record of firing
// f not run, for reason.
func (s *fakeStore) notRunOnly(f time.Time, reason string) bool {
	runs := s.runs()
	return len(runs) == 1 && runs[0].Outcome == OutcomeSkipped && runs[0].Scheduled.Equal(f) &&
		runs[0].Reason == reason && runs[0].Fence == 0
}

// holdAlive makes another keeper, "other", hold lockID through a Session
// of its own, which keeps the lease renewed (a run still going elsewhere,
// unlike locktest.Store.TakeOver's holder, which never renews), until
// release, which the test calls before its rig stops.
func (r *rig) holdAlive(lockID string) (release func()) {
	r.t.Helper()
	other, err := lock.NewSession(r.locks, lock.WithKeeperID("other"))
	if err != nil {
		r.t.Fatal(err)
	}
	m, err := other.Mutex(lockID)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, _, err := m.AcquireLock(context.Background()); err != nil {
		r.t.Fatal(err)
	}
	return func() {
		_ = m.ReleaseLock(context.Background())
		_ = other.Close()
	}
}
