package locktest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/lock"
)

// Store is an in-memory lock.Store. It is safe for concurrent use.
type Store struct {
	cfg config

	mu        sync.Mutex
	locks     map[string]*entry
	calls     []*Call
	before    func(ctx context.Context, c Call) error
	after     func(c Call)
	fail      map[Op]*fault // calls that fail before taking effect
	failAfter map[Op]*fault // calls that fail after taking effect
	delay     map[Op]time.Duration
	paused    map[Op]bool
	pausedAll bool
	resumed   chan struct{} // non-nil while paused; closed by Resume
}

var (
	_ lock.Store      = (*Store)(nil)
	_ lock.ValueStore = (*Store)(nil)
)

// entry is a lock, held or released. It stays after a release so that the
// next term's fence is larger, as the Locker keeps its documents.
type entry struct {
	keeper   string // "" once released
	fence    uint64
	acquired time.Time
	renewed  time.Time // last acquire or renew; the release's time once released
	value    []byte    // the term's value (SetValue); nil once a term begins or ends
}

// New returns an empty Store. It panics on an invalid option (see the
// package documentation).
func New(opts ...Option) *Store {
	cfg := config{ttl: lock.DefaultTTL, clock: clockwork.NewRealClock()}
	for _, o := range opts {
		if o == nil {
			panic("locktest: New: nil option")
		}
		if err := o(&cfg); err != nil {
			panic("locktest: New: " + err.Error())
		}
	}
	if !cfg.noSafety {
		cfg.safety = time.Millisecond + cfg.ttl/1000
	}
	if cfg.safety >= cfg.ttl {
		panic(fmt.Sprintf("locktest: New: WithSafety (%v) must be shorter than the TTL (%v)", cfg.safety, cfg.ttl))
	}
	return &Store{
		cfg:       cfg,
		locks:     make(map[string]*entry),
		fail:      make(map[Op]*fault),
		failAfter: make(map[Op]*fault),
		delay:     make(map[Op]time.Duration),
		paused:    make(map[Op]bool),
	}
}

// TTL returns the lease length (WithTTL).
func (s *Store) TTL() time.Duration { return s.cfg.ttl }

// Clock returns the Store's clock (WithClock).
func (s *Store) Clock() clockwork.Clock { return s.cfg.clock }

// live reports whether e is a lease that has not expired at now.
func (s *Store) live(e *entry, now time.Time) bool {
	return e != nil && e.keeper != "" && now.Before(e.renewed.Add(s.cfg.ttl))
}

// deadline is the deadline of a lease won or renewed by a call sent at sent.
func (s *Store) deadline(sent time.Time) time.Time { return sent.Add(s.cfg.ttl - s.cfg.safety) }

// AcquireLocks takes those of lockIDs that are free, released, expired or
// already keeperID's, each as a new term with a larger fence; the others are
// Refused. A repeated id counts once. Deadlines count from the call's start
// (Grant.Sent), expiry from the instant it takes effect, after BeforeCall
// hooks and pauses, as a server's write comes after the sending.
func (s *Store) AcquireLocks(ctx context.Context, keeperID string, lockIDs ...string) (lock.Acquisition, error) {
	if err := validate(keeperID, lockIDs); err != nil {
		return lock.Acquisition{}, err
	}
	ids := dedup(lockIDs)
	if len(ids) == 0 {
		return lock.Acquisition{}, nil
	}
	c := &Call{Op: OpAcquire, KeeperID: keeperID, LockIDs: ids}
	var a lock.Acquisition
	err := s.do(ctx, c, "acquire "+desc(keeperID, ids), func(now time.Time) error {
		for _, id := range ids {
			e := s.locks[id]
			if s.live(e, now) && e.keeper != keeperID {
				a.Refused = append(a.Refused, id)
				continue
			}
			a.Granted = append(a.Granted, s.grant(id, keeperID, c.Start, now))
		}
		c.Acquisition = a
		return nil
	})
	if err != nil {
		return lock.Acquisition{}, err
	}
	return a, nil
}

// grant begins a term of keeperID on id at now, won by a call sent at
// sent. s.mu is held.
func (s *Store) grant(id, keeperID string, sent, now time.Time) lock.Grant {
	e := s.locks[id]
	if e == nil {
		e = &entry{}
		s.locks[id] = e
	}
	e.fence++
	e.keeper, e.acquired, e.renewed, e.value = keeperID, now, now, nil
	return lock.Grant{LockID: id, KeeperID: keeperID, Fence: e.fence, AcquiredAt: now,
		Deadline: s.deadline(sent), Sent: sent}
}

// Renew extends the live leases keeperID holds on lockIDs (Held) and
// reports the others Lost: released, expired or another keeper's. It never
// re-creates a lease and keeps fences.
func (s *Store) Renew(ctx context.Context, keeperID string, lockIDs ...string) (lock.Renewal, error) {
	if err := validate(keeperID, lockIDs); err != nil {
		return lock.Renewal{}, err
	}
	ids := dedup(lockIDs)
	if len(ids) == 0 {
		return lock.Renewal{}, nil
	}
	c := &Call{Op: OpRenew, KeeperID: keeperID, LockIDs: ids}
	var r lock.Renewal
	err := s.do(ctx, c, "renew "+desc(keeperID, ids), func(now time.Time) error {
		r.Deadline = s.deadline(c.Start)
		for _, id := range ids {
			if e := s.locks[id]; s.live(e, now) && e.keeper == keeperID {
				e.renewed = now
				r.Held = append(r.Held, id)
			} else {
				r.Lost = append(r.Lost, id)
			}
		}
		c.Renewal = r
		return nil
	})
	if err != nil {
		return lock.Renewal{}, err
	}
	return r, nil
}

// ReleaseTerms releases those of terms keeperID holds, expired or not; a
// term with a fence only if it is that term. It returns how many it
// released and never releases another keeper's lock.
func (s *Store) ReleaseTerms(ctx context.Context, keeperID string, terms ...lock.Term) (int, error) {
	ids := make([]string, len(terms))
	for i, t := range terms {
		ids[i] = t.LockID
	}
	if err := validate(keeperID, ids); err != nil {
		return 0, err
	}
	if len(terms) == 0 {
		return 0, nil
	}
	c := &Call{Op: OpRelease, KeeperID: keeperID, LockIDs: ids, Terms: append([]lock.Term(nil), terms...)}
	n := 0
	err := s.do(ctx, c, "release "+desc(keeperID, ids), func(now time.Time) error {
		for _, t := range terms {
			if e := s.locks[t.LockID]; e != nil && e.keeper == keeperID && (t.Fence == 0 || t.Fence == e.fence) {
				e.keeper, e.renewed, e.value = "", now, nil
				n++
			}
		}
		c.Released = n
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// SetValue publishes value with term t of a lock keeperID holds, as the
// Locker's: only while t is that lock's live term, refused otherwise with
// an error wrapping lock.ErrStaleTerm; a value longer than
// lock.MaxValueSize with one wrapping lock.ErrValueTooLarge.
func (s *Store) SetValue(ctx context.Context, keeperID string, t lock.Term, value []byte) error {
	if err := validate(keeperID, []string{t.LockID}); err != nil {
		return err
	}
	if t.Fence == 0 {
		return fmt.Errorf("set value of %q: %w: no fencing token", t.LockID, lock.ErrInvalidArgument)
	}
	if err := lock.CheckValue(value); err != nil {
		return fmt.Errorf("set value of %q: %w", t.LockID, err)
	}
	c := &Call{Op: OpSetValue, KeeperID: keeperID, LockIDs: []string{t.LockID}, Terms: []lock.Term{t}, Value: slices.Clone(value)}
	var stale error
	err := s.do(ctx, c, fmt.Sprintf("set value of %q", t.LockID), func(now time.Time) error {
		e := s.locks[t.LockID]
		if !s.live(e, now) || e.keeper != keeperID || e.fence != t.Fence {
			stale = fmt.Errorf("set value of %q: fence %d of keeper %q: %w", t.LockID, t.Fence, keeperID, lock.ErrStaleTerm)
			return stale
		}
		e.value = nil
		if len(value) > 0 {
			e.value = slices.Clone(value)
		}
		return nil
	})
	if stale != nil {
		return stale
	}
	return err
}

// Holder returns who holds lockID. A free, released or expired lock gives
// an error wrapping lock.ErrNotHeld; for a released or expired one the
// Holder returned with it describes the last term (Released, Expired), as
// the Locker's does. Times are instants of the Store's clock.
func (s *Store) Holder(ctx context.Context, lockID string) (lock.Holder, error) {
	if err := lock.ValidateID("lockID", lockID); err != nil {
		return lock.Holder{}, err
	}
	c := &Call{Op: OpHolder, LockIDs: []string{lockID}}
	var h lock.Holder
	var notHeld error
	err := s.do(ctx, c, fmt.Sprintf("holder of %q", lockID), func(now time.Time) error {
		h, notHeld = s.holder(lockID, now)
		c.Holder = h
		return notHeld
	})
	switch {
	case notHeld != nil:
		return h, notHeld
	case err != nil:
		return lock.Holder{}, err
	}
	return h, nil
}

// holder describes lockID at now. s.mu is held.
func (s *Store) holder(lockID string, now time.Time) (lock.Holder, error) {
	e := s.locks[lockID]
	if e == nil {
		return lock.Holder{}, fmt.Errorf("holder of %q: %w", lockID, lock.ErrNotHeld)
	}
	h := lock.Holder{
		LockID:     lockID,
		KeeperID:   e.keeper,
		Fence:      e.fence,
		Value:      slices.Clone(e.value),
		AcquiredAt: e.acquired,
		RenewedAt:  e.renewed,
		ExpiresAt:  e.renewed.Add(s.cfg.ttl),
		Released:   e.keeper == "",
		ReadAt:     now,
	}
	if h.Released {
		h.ExpiresAt = h.RenewedAt
		return h, fmt.Errorf("holder of %q: released at %s: %w", lockID, h.RenewedAt.Format(time.RFC3339Nano), lock.ErrNotHeld)
	}
	if !s.live(e, now) {
		h.Expired = true
		return h, fmt.Errorf("holder of %q: lease of %q expired at %s: %w", lockID, h.KeeperID, h.ExpiresAt.Format(time.RFC3339Nano), lock.ErrNotHeld)
	}
	return h, nil
}

// do runs one call: begin, then apply at the Store's time
// under s.mu, then a FailAfter switch, and the AfterCall hook. apply's
// error is the call's outcome (ErrNotHeld), returned as it is; the others
// fail the call and are wrapped with what.
func (s *Store) do(ctx context.Context, c *Call, what string, apply func(now time.Time) error) error {
	err := s.begin(ctx, c)
	s.mu.Lock()
	if err == nil {
		if outcome := apply(s.cfg.clock.Now()); outcome != nil {
			c.Err = outcome
		} else if ferr := s.failAfter[c.Op].take(); ferr != nil {
			err = ferr
		}
	}
	if err != nil {
		err = fmt.Errorf("%s: %w", what, err)
		c.Err = err
	}
	c.End = s.cfg.clock.Now()
	hook, rec := s.after, c.clone()
	s.mu.Unlock()
	if hook != nil {
		hook(rec)
	}
	return err
}

// begin records c and returns the error that fails it before it takes
// effect, if any. A call fails at once if ctx has ended; a Fail switch
// counts it when it begins, so a call already in flight when the switch
// is turned on goes through. Then come the BeforeCall hook, whose error
// fails the call, and Delay and Pause, which end early with ctx's error.
// A hook that returns nil lets the call proceed even if ctx ended
// meanwhile: a request already on its way, which the server applies.
func (s *Store) begin(ctx context.Context, c *Call) error {
	c.Start = s.cfg.clock.Now()
	s.mu.Lock()
	if !s.cfg.noLog {
		s.calls = append(s.calls, c)
	}
	var fail error
	if ctx.Err() == nil {
		fail = s.fail[c.Op].take()
	}
	hook, rec, delay := s.before, c.clone(), s.delay[c.Op]
	s.mu.Unlock()
	if ctx.Err() != nil {
		return ctxErr(ctx)
	}
	if hook != nil {
		if err := hook(ctx, rec); err != nil {
			return err
		}
	}
	if delay > 0 {
		t := s.cfg.clock.NewTimer(delay)
		select {
		case <-t.Chan():
		case <-ctx.Done():
			t.Stop()
			return ctxErr(ctx)
		}
	}
	if err := s.waitPaused(ctx, c.Op); err != nil {
		return err
	}
	return fail
}

// ctxErr is the error of a call whose ctx ended, as the Locker reports it:
// the cause (a timeout is a timeout) and ctx.Err().
func ctxErr(ctx context.Context) error {
	if cause := context.Cause(ctx); cause != ctx.Err() {
		return fmt.Errorf("%w (%w)", cause, ctx.Err())
	}
	return ctx.Err()
}

func validate(keeperID string, lockIDs []string) error {
	if err := lock.ValidateID("keeperID", keeperID); err != nil {
		return err
	}
	for i, id := range lockIDs {
		if err := lock.ValidateID(fmt.Sprintf("lockIDs[%d]", i), id); err != nil {
			return err
		}
	}
	return nil
}

func dedup(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// desc names the locks of a call in errors, as the Locker does.
func desc(keeperID string, ids []string) string {
	if len(ids) == 1 {
		return fmt.Sprintf("%q", ids[0])
	}
	return fmt.Sprintf("%d locks of %s", len(ids), keeperID)
}
