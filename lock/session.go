package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
)

// Store is what a Session needs from a lock store; *Locker is one. Every
// call names the keeper first, then the locks. The Session is the only
// caller a program needs: it owns the keeper id and keeps the leases alive.
type Store interface {
	// AcquireLocks takes those of lockIDs that are free, expired or
	// already keeperID's, each as a new term with a new fencing token.
	AcquireLocks(ctx context.Context, keeperID string, lockIDs ...string) (Acquisition, error)
	// Renew extends the live leases keeperID holds on lockIDs.
	Renew(ctx context.Context, keeperID string, lockIDs ...string) (Renewal, error)
	// ReleaseTerms releases those of terms that keeperID holds; a term
	// with a fencing token only while that term lasts.
	ReleaseTerms(ctx context.Context, keeperID string, terms ...Term) (int, error)
	// Holder tells who holds lockID; ErrNotHeld if nobody does.
	Holder(ctx context.Context, lockID string) (Holder, error)
	// TTL is the lease length.
	TTL() time.Duration
	// Clock is the clock Grant deadlines are instants of.
	Clock() clockwork.Clock
}

var _ Store = (*Locker)(nil)

// tokenStore is a Store that tells Sessions apart by a token of each
// Session, not by keeper id alone (*Locker: owner). On another Store two
// Sessions with one keeper id share their locks.
type tokenStore interface {
	acquireAs(ctx context.Context, o owner, lockIDs []string) (Acquisition, error)
	renewAs(ctx context.Context, o owner, lockIDs []string) (Renewal, error)
	releaseAs(ctx context.Context, o owner, terms []Term) (int, error)
}

var _ tokenStore = (*Locker)(nil)

// storeAcquire, storeRenew and storeRelease call the store as this
// Session: with its token where the store takes one.
func (s *Session) storeAcquire(ctx context.Context, ids []string) (Acquisition, error) {
	if ts, ok := s.store.(tokenStore); ok {
		return ts.acquireAs(ctx, s.owner, ids)
	}
	return s.store.AcquireLocks(ctx, s.cfg.keeperID, ids...)
}

func (s *Session) storeRenew(ctx context.Context, ids []string) (Renewal, error) {
	if ts, ok := s.store.(tokenStore); ok {
		return ts.renewAs(ctx, s.owner, ids)
	}
	return s.store.Renew(ctx, s.cfg.keeperID, ids...)
}

func (s *Session) storeRelease(ctx context.Context, terms []Term) (int, error) {
	if ts, ok := s.store.(tokenStore); ok {
		return ts.releaseAs(ctx, s.owner, terms)
	}
	return s.store.ReleaseTerms(ctx, s.cfg.keeperID, terms...)
}

// Session holds locks for one keeper and keeps their leases alive: one
// keep-alive renews every lease it holds in one round trip per renew
// interval. Take locks through its Mutexes (Mutex, Do) or many at once
// (AcquireLocks); the runner, scheduler and migrations packages take
// theirs through a Session too. Create it with NewSession, and Close it
// at shutdown; one per process suffices, and two Sessions exclude each
// other as two processes do (see "Sessions, mutexes and leases" in the
// package documentation). It is safe for concurrent use.
type Session struct {
	store Store
	clock clockwork.Clock
	boot  func() bootReading // nil: no boot clock (elapsed.go)
	cfg   sessionConfig
	owner owner // the keeper id and this Session's token (tokenStore)

	mu     sync.Mutex
	slots  map[string]*slot  // locks taken or being taken in this session
	maybe  map[string]uint64 // locks a failed call may have left ours: the term's fence, 0 if unknown
	closed bool
	warned atomic.Bool   // DeploymentWarning was reported
	shared atomic.Bool   // KeeperIDShared was reported
	wake   chan struct{} // the keep-alive plans again
	stop   chan struct{} // closed by Close
	done   chan struct{} // closed when the keep-alive returned
	watch  watchers      // observers added later, components (components.go)
}

// slot is a lock held, or being acquired or released, in a Session. It
// exists from the start of an acquisition until the end of the release, so
// no other holder in the Session sends a command for the lock meanwhile.
type slot struct {
	lease *Lease        // nil while being acquired
	freed chan struct{} // closed when the slot goes
}

// NewSession starts a Session on store and its keep-alive. Timings default
// to fractions of the store's TTL; NewSession rejects timings that cannot
// be safe, naming the option.
func NewSession(store Store, opts ...SessionOption) (*Session, error) {
	if l, ok := store.(*Locker); store == nil || ok && l == nil {
		return nil, fmt.Errorf("%w: NewSession: nil store", ErrInvalidOption)
	}
	cfg := sessionConfig{releaseTimeout: DefaultReleaseTimeout, gracePeriod: DefaultGracePeriod}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: NewSession: nil option", ErrInvalidOption)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if err := cfg.finish(store.TTL()); err != nil {
		return nil, err
	}
	if cfg.keeperID == "" {
		cfg.keeperID = NewKeeperID()
	}
	clk := store.Clock()
	if clk == nil {
		return nil, fmt.Errorf("%w: NewSession: store has no clock", ErrInvalidOption)
	}
	s := &Session{
		store: store,
		clock: clk,
		boot:  bootClockOf(clk),
		cfg:   cfg,
		owner: owner{kid: cfg.keeperID, tok: newNonce()},
		slots: make(map[string]*slot),
		maybe: make(map[string]uint64),
		wake:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go s.keepAlive()
	return s, nil
}

// KeeperID returns the keeper id the Session holds its locks as.
func (s *Session) KeeperID() string { return s.cfg.keeperID }

// Store returns the store the Session takes locks from.
func (s *Session) Store() Store { return s.store }

// Clock returns the clock of every time read and timer of the Session, and
// of everything built on it: the store's.
func (s *Session) Clock() clockwork.Clock { return s.clock }

// Timings returns the lease timings in effect, defaults included.
func (s *Session) Timings() Timings { return s.cfg.timings }

// GracePeriod returns how long work is given to return after its context
// was cancelled (WithGracePeriod).
func (s *Session) GracePeriod() time.Duration { return s.cfg.gracePeriod }

// ReleaseTimeout returns the bound of each release (WithReleaseTimeout).
func (s *Session) ReleaseTimeout() time.Duration { return s.cfg.releaseTimeout }

// Sleep waits d on the Session's clock. It returns ctx's error if ctx
// ends first, and ErrSessionClosed if the Session closes first: for the
// waits of what is built on the Session.
func (s *Session) Sleep(ctx context.Context, d time.Duration) error {
	if err := checkContext(ctx, "sleep", ""); err != nil {
		return err
	}
	return s.sleep(ctx, d, nil)
}

// sleep is Sleep that also ends, with nil, when wake is closed.
func (s *Session) sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	t := s.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
	case <-wake:
	case <-s.stop:
		return ErrSessionClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// Done is closed when the Session is closed.
func (s *Session) Done() <-chan struct{} { return s.stop }

// Emit passes e to the Session's observers, with KeeperID and At filled in
// when empty. It is for the packages built on Sessions; with no observer it
// costs nothing.
func (s *Session) Emit(e Event) {
	obs := s.observers()
	if len(obs) == 0 {
		return
	}
	if e.KeeperID == "" {
		e.KeeperID = s.cfg.keeperID
	}
	if e.At.IsZero() {
		e.At = s.clock.Now()
	}
	obs.Observe(e)
}

// observed reports whether anyone receives events, observers or a tracer's
// spans, so that callers build none for nobody.
func (s *Session) observed() bool { return len(s.observers()) > 0 || s.cfg.tracer != nil }

// Holder returns who holds lockID (Locker.Holder).
func (s *Session) Holder(ctx context.Context, lockID string) (Holder, error) {
	if err := checkContext(ctx, "holder", lockID); err != nil {
		return Holder{}, err
	}
	return s.store.Holder(ctx, lockID)
}

// Taken is the outcome of Session.AcquireLocks. Every requested id is in
// exactly one of its lists unless AcquireLocks returned an error.
type Taken struct {
	// Leases are the locks acquired, in the order requested.
	Leases []*Lease
	// Refused are held by another keeper, or by another holder in this
	// Session.
	Refused []string
	// Untrusted were granted too late to trust (ErrNotTrusted) and
	// released again.
	Untrusted []string
}

// AcquireLocks tries once to take each of lockIDs, in one store call (two
// round trips on MongoDB however many there are), and keeps the leases it
// took alive until they are released (ReleaseLocks) or lost. Locks held by
// another holder in this Session are refused without a round trip; one
// whose release is still on its way (retried) is held by nobody here, and
// is taken in a new term. On an error, Leases holds the locks known to be
// acquired; the others may have been written, and are released at Close if
// nobody takes them meanwhile.
func (s *Session) AcquireLocks(ctx context.Context, lockIDs ...string) (Taken, error) {
	if err := checkContext(ctx, "acquire locks", ""); err != nil {
		return Taken{}, err
	}
	if err := validateIDs("lockIDs", lockIDs); err != nil {
		return Taken{}, err
	}
	return s.acquire(ctx, dedup(lockIDs), 0)
}

// acquire is AcquireLocks of ids, deduplicated; attempt counts the tries
// of a waiting Lock (0: not counted), for its span.
func (s *Session) acquire(ctx context.Context, ids []string, attempt int) (Taken, error) {
	var t Taken
	var events []Event
	ctx, span := s.trace(ctx, OpAcquire, attempt, 0, ids)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		span.End(ErrSessionClosed)
		return Taken{}, ErrSessionClosed
	}
	mine := make([]string, 0, len(ids))
	refusedHere := make(map[string]bool)
	for _, id := range ids {
		if sl := s.slots[id]; sl != nil {
			if sl.lease == nil || !sl.lease.releasing {
				refusedHere[id] = true
				continue
			}
			// Its holder released it, and the release is still on its
			// way (retried after a lost reply, or slow): nobody here
			// holds it. Taking it begins a new term, which the release,
			// naming the old term's fence, leaves alone; the old slot's
			// waiters wake to find this one (sim seed 1253: the
			// scheduler took its own release for a run still going).
			s.freeLocked(id)
		}
		s.slots[id] = &slot{freed: make(chan struct{})}
		mine = append(mine, id)
	}
	s.mu.Unlock()
	if s.observed() {
		for id := range refusedHere {
			events = append(events, Event{Kind: Refused, LockID: id, Reason: "held in this session"})
		}
	}

	var acq Acquisition
	var err error
	boot := s.bootNow()
	sent := s.clock.Now()
	if len(mine) > 0 {
		acq, err = s.storeAcquire(ctx, mine)
	}
	now := s.clock.Now()
	if e, ok := s.deploymentWarning(); ok {
		events = append(events, e)
	}
	granted := make(map[string]Grant, len(acq.Granted))
	for _, g := range acq.Granted {
		granted[g.LockID] = g
	}
	refused := make(map[string]bool, len(acq.Refused))
	for _, id := range acq.Refused {
		refused[id] = true
	}
	shared := make(map[string]bool, len(acq.Shared))
	for _, id := range acq.Shared {
		shared[id] = true
	}
	if len(acq.Shared) > 0 && s.observed() && s.shared.CompareAndSwap(false, true) {
		events = append(events, Event{Kind: KeeperIDShared, LockID: acq.Shared[0],
			Reason: "held by another session with this keeper id"})
	}

	leases := make(map[string]*Lease, len(granted))
	var untrusted []string
	s.mu.Lock()
	closed := s.closed
	for _, id := range mine {
		g, ok := granted[id]
		switch {
		case ok && !closed && s.grantLeft(g, boot, now) > 0:
			l := s.newLease(g, boot)
			s.slots[id].lease = l
			delete(s.maybe, id)
			leases[id] = l
			if s.observed() {
				events = append(events, Event{Kind: Acquired, LockID: id, Fence: g.Fence, Took: now.Sub(sent), Remaining: s.leaseLeft(l, now)})
			}
		case ok:
			// Too late to trust, or the Session closed meanwhile: release
			// it before the slot goes, so nobody here races the delete.
			untrusted = append(untrusted, id)
		default:
			if !refused[id] {
				s.maybe[id] = 0 // the write may have happened
			}
			s.freeLocked(id)
		}
	}
	s.mu.Unlock()

	if len(untrusted) > 0 {
		terms := make([]Term, len(untrusted))
		for i, id := range untrusted {
			terms[i] = Term{LockID: id, Fence: granted[id].Fence}
		}
		rerr := s.releaseTerms(ctx, terms)
		s.mu.Lock()
		for _, id := range untrusted {
			if rerr != nil {
				s.maybe[id] = granted[id].Fence
			}
			s.freeLocked(id)
		}
		s.mu.Unlock()
		if s.observed() {
			reason, why := "acquired too late", ErrNotTrusted
			if closed {
				reason, why = "session closed", ErrSessionClosed
			}
			for _, id := range untrusted {
				events = append(events, Event{Kind: Refused, LockID: id, Fence: granted[id].Fence, Took: now.Sub(sent),
					Reason: reason, Err: why})
			}
		}
	}
	for _, id := range ids {
		switch {
		case leases[id] != nil:
			t.Leases = append(t.Leases, leases[id])
		case refusedHere[id] || refused[id]:
			t.Refused = append(t.Refused, id)
			if refused[id] && s.observed() {
				reason := "held elsewhere"
				if shared[id] {
					reason = "held elsewhere, by another session with this keeper id"
				}
				events = append(events, Event{Kind: Refused, LockID: id, Took: now.Sub(sent), Reason: reason})
			}
		case slices.Contains(untrusted, id):
			t.Untrusted = append(t.Untrusted, id)
		case err != nil && s.observed():
			events = append(events, Event{Kind: AcquireFailed, LockID: id, Took: now.Sub(sent), Err: err})
		}
	}
	for _, e := range events {
		s.Emit(e)
		span.Event(e)
	}
	if len(t.Leases) > 0 {
		s.poke()
	}
	switch {
	case err != nil:
	case closed && len(mine) > 0:
		err = ErrSessionClosed
	case len(t.Untrusted) > 0:
		span.End(ErrNotTrusted)
		return t, nil
	}
	span.End(err)
	return t, err
}

// deploymentWarning returns, once per Session, the warning its store (a
// *Locker) logged about the deployment.
func (s *Session) deploymentWarning() (Event, bool) {
	w, ok := s.store.(interface{ deploymentWarning() string })
	if !ok || !s.observed() || s.warned.Load() {
		return Event{}, false
	}
	reason := w.deploymentWarning()
	if reason == "" || !s.warned.CompareAndSwap(false, true) {
		return Event{}, false
	}
	return Event{Kind: DeploymentWarning, Reason: reason}, true
}

// grantLeft is how long a lease granted by g would still be trusted at
// now (boot: the boot clock read before g's command was sent).
func (s *Session) grantLeft(g Grant, boot bootReading, now time.Time) time.Duration {
	until := s.trustUntil(g)
	return s.leftOf(until, bootDeadline(until, g.Sent, boot), now)
}

// trustUntil is when a lease granted by g stops being trusted unless
// renewed.
func (s *Session) trustUntil(g Grant) time.Time {
	return earliest(g.Deadline, g.Sent.Add(s.cfg.timings.RenewDeadline))
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// freeLocked removes the slot of id and wakes whoever waits for it.
func (s *Session) freeLocked(id string) {
	if sl := s.slots[id]; sl != nil {
		delete(s.slots, id)
		close(sl.freed)
	}
}

// poke makes the keep-alive plan again.
func (s *Session) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// ReleaseLocks releases leases taken with AcquireLocks, in one round trip,
// bounded by the release timeout whatever ctx's deadline (ctx's values are
// kept; its cancellation is not). A lease already released, or one this
// Session no longer holds, is skipped. A failed release is retried within
// the timeout; if none succeeds the locks expire with their leases.
func (s *Session) ReleaseLocks(ctx context.Context, leases ...*Lease) error {
	if err := checkContext(ctx, "release locks", ""); err != nil {
		return err
	}
	var terms []Term
	var released []*Lease
	s.mu.Lock()
	for _, l := range leases {
		if l == nil || l.s != s {
			continue
		}
		if sl := s.slots[l.grant.LockID]; sl != nil && sl.lease == l && !l.releasing {
			l.releasing = true
			s.endLocked(l, errReleased)
			terms = append(terms, Term{LockID: l.grant.LockID, Fence: l.grant.Fence})
			released = append(released, l)
		}
	}
	s.mu.Unlock()
	if len(terms) == 0 {
		return nil
	}
	ctx, span := s.traceRelease(ctx, terms)
	sent := s.clock.Now()
	err := s.releaseTerms(ctx, terms)
	took := s.clock.Since(sent)
	s.mu.Lock()
	for i, t := range terms {
		sl := s.slots[t.LockID]
		if sl != nil && sl.lease != released[i] {
			continue // taken again here meanwhile, in a new term (acquire)
		}
		if err != nil {
			s.maybe[t.LockID] = t.Fence
		}
		s.freeLocked(t.LockID)
	}
	s.mu.Unlock()
	if s.observed() {
		for _, l := range released {
			e := Event{Kind: Released, LockID: l.grant.LockID, Fence: l.grant.Fence, Took: took, Err: err}
			s.Emit(e)
			span.Event(e)
		}
	}
	span.End(err)
	return err
}

// traceRelease begins the span of the release of terms.
func (s *Session) traceRelease(ctx context.Context, terms []Term) (context.Context, Span) {
	if s.cfg.tracer == nil {
		return ctx, noSpan{}
	}
	ids := make([]string, len(terms))
	for i, t := range terms {
		ids[i] = t.LockID
	}
	var fence uint64
	if len(terms) == 1 {
		fence = terms[0].Fence
	}
	return s.Trace(ctx, Op{Kind: OpRelease, LockIDs: ids, Fence: fence})
}

// releaseMaybe deletes id if a failed call may have left it this
// Session's and nobody in the Session holds it. Finding it free settles
// nothing: a write whose caller gave up may land later.
func (s *Session) releaseMaybe(ctx context.Context, id string) error {
	s.mu.Lock()
	fence, ok := s.maybe[id]
	if !ok || s.slots[id] != nil || s.closed {
		s.mu.Unlock()
		return nil
	}
	s.slots[id] = &slot{freed: make(chan struct{})}
	s.mu.Unlock()
	ctx, span := s.traceRelease(ctx, []Term{{LockID: id, Fence: fence}})
	var err error
	if fence == 0 {
		// Name the term, so that a delete reaching the server late cannot
		// free a term another holder here takes after the slot goes.
		fence, err = s.fenceOf(ctx, id)
	}
	if err == nil && fence != 0 {
		err = s.releaseTerms(ctx, []Term{{LockID: id, Fence: fence}})
	}
	s.mu.Lock()
	// Found free, it stays in maybe, for Close: the write may still be on
	// its way.
	if err == nil && fence != 0 {
		delete(s.maybe, id)
	}
	s.freeLocked(id)
	s.mu.Unlock()
	span.End(err)
	return err
}

// fenceOf returns the fencing token of this keeper's term of id, 0 if it
// holds none.
func (s *Session) fenceOf(ctx context.Context, id string) (uint64, error) {
	ctx, cancel := WithTimeout(context.WithoutCancel(ctx), s.clock, s.cfg.releaseTimeout)
	defer cancel()
	h, err := s.store.Holder(ctx, id)
	switch {
	case h.KeeperID == s.cfg.keeperID: // expired ones too (Locker.Holder)
		return h.Fence, nil
	case err == nil || errors.Is(err, ErrNotHeld):
		return 0, nil
	}
	return 0, err
}

// releaseTerms deletes terms if this keeper holds them, retrying failures
// with the Session's backoff until the release timeout.
func (s *Session) releaseTerms(ctx context.Context, terms []Term) error {
	ctx, cancel := WithTimeout(context.WithoutCancel(ctx), s.clock, s.cfg.releaseTimeout)
	defer cancel()
	b := s.Backoff()
	for attempt := 1; ; attempt++ {
		_, err := s.storeRelease(ctx, terms)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || b.Wait(ctx, s.clock, attempt) != nil {
			return err // the store's error says what it released
		}
	}
}

// Backoff is the pause policy of the Session's retries and waits, and of
// everything built on it: from a sixteenth of the retry period (at least a
// millisecond) up to the retry period.
func (s *Session) Backoff() Backoff {
	rp := s.cfg.timings.RetryPeriod
	return Backoff{First: max(time.Millisecond, rp/16), Max: rp}
}

// Close ends the Session: it stops the keep-alive, ends every lease it
// holds (cause ErrSessionClosed) and releases them all in one round trip,
// bounded by the release timeout and the Session's own context, not a
// caller's, so it never fails because a caller's context ended. Locks a
// failed call may have left this keeper's are released with them. Leases
// that had already ended (lost, or abandoned with their work still
// running) are not deleted: they expire, and their holders' ReleaseLock
// still works. Stop the work under live leases first (return from Do,
// stop runners and schedulers): Close releases their locks at once, so
// work still running then gets no safety margin. The release timeout
// (WithReleaseTimeout, default 5s) bounds Close: with the server down it
// takes that long and returns an error saying so. Close is idempotent;
// calls on a closed Session return ErrSessionClosed.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.done
		return nil
	}
	s.closed = true
	close(s.stop)
	s.mu.Unlock()
	<-s.done

	var terms []Term
	var ended []*Lease
	s.mu.Lock()
	for id, sl := range s.slots {
		// A lease that ended before (lost, or abandoned with its work
		// still running) is left to expire: deleting it would let another
		// keeper in at once, beside work that may not have stopped. Its
		// holder's ReleaseLock still deletes it.
		if sl.lease != nil && !sl.lease.releasing && !sl.lease.ended {
			sl.lease.releasing = true
			s.endLocked(sl.lease, ErrSessionClosed)
			ended = append(ended, sl.lease)
			terms = append(terms, Term{LockID: id, Fence: sl.lease.grant.Fence})
		}
	}
	for id, fence := range s.maybe {
		if s.slots[id] == nil {
			terms = append(terms, Term{LockID: id, Fence: fence})
		}
	}
	s.mu.Unlock()
	if len(terms) == 0 {
		return nil
	}
	ctx, span := s.traceRelease(context.Background(), terms)
	err := s.releaseTerms(ctx, terms)
	s.mu.Lock()
	for _, l := range ended {
		s.freeLocked(l.grant.LockID)
	}
	if err == nil {
		clear(s.maybe)
	}
	s.mu.Unlock()
	if s.observed() {
		for _, l := range ended {
			e := Event{Kind: Released, LockID: l.grant.LockID, Fence: l.grant.Fence, Err: err, Reason: "session closed"}
			s.Emit(e)
			span.Event(e)
		}
	}
	span.End(err)
	if err != nil {
		// releaseTerms retries until the release timeout passes.
		return fmt.Errorf("close session %s: its locks were not released within the release timeout (%v); they expire with their leases: %w",
			s.cfg.keeperID, s.cfg.releaseTimeout, err)
	}
	return nil
}

// errReleased is the cause of the end of a lease its holder released.
var errReleased = fmt.Errorf("%w: released", ErrNotHeld)

// isLoss reports whether cause ended a lease against its holder's will.
func isLoss(cause error) bool {
	return cause != nil && !errors.Is(cause, errReleased)
}
