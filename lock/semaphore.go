package lock

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mongolock/mongolock/internal/planted"
)

// MaxSlots is the largest n a Semaphore accepts: a refused attempt reads
// the documents of all n slots, so n stays small enough for one read.
const MaxSlots = 256

// SlotSeparator joins a semaphore's name and a slot number in the slot's
// lock id (SlotID).
const SlotSeparator = "#"

// SlotID returns the lock id of slot k of the semaphore name: name, "#"
// and k in decimal ("pool#0", "pool#1", …).
func SlotID(name string, k int) string {
	return name + SlotSeparator + strconv.Itoa(k)
}

// ParseSlotID splits a lock id made by SlotID into the semaphore's name
// and the slot number; ok is false for an id that is not one (no "#", or
// what follows the last one is not a slot number below MaxSlots written
// as SlotID writes it).
func ParseSlotID(lockID string) (name string, k int, ok bool) {
	i := strings.LastIndex(lockID, SlotSeparator)
	if i <= 0 {
		return "", 0, false
	}
	num := lockID[i+len(SlotSeparator):]
	k, err := strconv.Atoi(num)
	if err != nil || k < 0 || k >= MaxSlots || strconv.Itoa(k) != num {
		return "", 0, false
	}
	return lockID[:i], k, true
}

// Semaphore is a handle on an n-slot lock of a Session: at most n holders
// at once, by the server's clock, as for a lock. Each slot k is a lock of
// its own, with id SlotID(name, k), so each has its own lease, fencing
// token, renewal (the Session's one keep-alive, in the same round trip as
// every other lease), events and listing; a slot is taken and released as
// a Mutex's lock is. A Semaphore holds at most one slot at a time and is
// not re-entrant: acquiring through one that holds a slot is an error
// (ErrAlreadyHeld). Give each goroutine its own; its methods may be called
// from several.
//
// Every caller should give a name the same n. Each tries only the slots
// below its own n, so while callers disagree (a limit changed in a rolling
// deploy) at most the largest n hold at once, and a caller with a smaller
// n waits for a slot below its n even when a higher one is free.
type Semaphore struct {
	s    *Session
	name string
	n    int
	seed uint64 // spreads the first slot tried over keepers

	mu   sync.Mutex
	held *Mutex // the slot held, nil if none
}

// Semaphore returns a handle on the n-slot lock name. It does no I/O. The
// name must be a valid lock id (ValidateID) short enough for its slot ids,
// and n between 1 and MaxSlots; an error wrapping ErrInvalidArgument says
// which is wrong.
func (s *Session) Semaphore(name string, n int) (*Semaphore, error) {
	if err := ValidateID("semaphore name", name); err != nil {
		return nil, err
	}
	if n < 1 || n > MaxSlots {
		return nil, fmt.Errorf("%w: semaphore %q: %d slots, want 1 to %d", ErrInvalidArgument, name, n, MaxSlots)
	}
	if last := SlotID(name, n-1); len(last) > MaxIDLength {
		return nil, fmt.Errorf("%w: semaphore name is %d bytes: its slot id %q… would be longer than %d",
			ErrInvalidArgument, len(name), last[len(last)-8:], MaxIDLength)
	}
	h := fnv.New64a()
	h.Write([]byte(s.cfg.keeperID))
	h.Write([]byte{0})
	h.Write([]byte(name))
	return &Semaphore{s: s, name: name, n: n, seed: h.Sum64()}, nil
}

// Name returns the semaphore's name.
func (m *Semaphore) Name() string { return m.name }

// Slots returns n, the number of slots this handle tries.
func (m *Semaphore) Slots() int { return m.n }

// Lease returns the lease of the slot the Semaphore holds, nil if none;
// its LockID is the slot's id. It may have ended (Lease.Err) and not yet
// been released.
func (m *Semaphore) Lease() *Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held == nil {
		return nil
	}
	return m.held.Lease()
}

// AcquireLock tries once to take a free slot. It first tries one slot,
// drawn from the keeper id, the name and the clock (spreading holders
// over the slots, and replayed by a simulation that replays the clock): one
// round trip when it is free, as for a Mutex. If that slot is held, it
// reads the n slots' documents (one round trip) and tries those it found
// free or lapsed by the server's clock, one round trip each, until one is
// taken. It returns the lease and true if it took a slot; false and a nil
// error if every slot is held. Errors are those of Mutex.AcquireLock, for
// the slot that failed.
func (m *Semaphore) AcquireLock(ctx context.Context) (*Lease, bool, error) {
	if err := checkContext(ctx, "acquire", m.name); err != nil {
		return nil, false, err
	}
	return m.acquireLock(ctx, 0)
}

// acquireLock is AcquireLock; attempt counts Lock's tries, for the spans.
func (m *Semaphore) acquireLock(ctx context.Context, attempt int) (*Lease, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held != nil {
		if err := m.held.Lease().Err(); errors.Is(err, ErrSessionClosed) {
			return nil, false, fmt.Errorf("acquire %q: %w", m.name, err)
		}
		return nil, false, fmt.Errorf("acquire semaphore %q: %w; release it first", m.name, ErrAlreadyHeld)
	}
	first := m.firstSlot()
	lease, ok, err := m.try(ctx, first, attempt)
	if ok || err != nil || m.tried() == 1 {
		return lease, ok, err
	}
	for _, k := range m.freeSlots(ctx, first) {
		if lease, ok, err := m.try(ctx, k, attempt); ok || err != nil {
			return lease, ok, err
		}
	}
	return nil, false, nil
}

// firstSlot is the slot an attempt tries first.
func (m *Semaphore) firstSlot() int {
	return int(jitter(m.s.clock.Now(), int(m.seed)) * float64(m.tried()))
}

// tried is how many slots an attempt tries: n.
func (m *Semaphore) tried() int {
	if planted.On(planted.SlotBeyondN) { // planted: one slot too many
		return m.n + 1
	}
	return m.n
}

// try takes slot k, as the Semaphore's lease if it gets it.
func (m *Semaphore) try(ctx context.Context, k, attempt int) (*Lease, bool, error) {
	mu := &Mutex{s: m.s, id: SlotID(m.name, k)}
	lease, ok, err := mu.acquireLock(ctx, attempt)
	if ok {
		m.held = mu
	}
	return lease, ok, err
}

// slotReader is a Store that reads locks by id (*Locker).
type slotReader interface {
	holdersOf(ctx context.Context, ids []string) ([]Holder, error)
}

// freeSlots returns the slots other than first that are worth trying, in
// order after first: those no holder in this Session has, whose documents
// say they are free, released, lapsed by the server's clock or this
// Session's own. It reads only the slots not held here (nothing when
// every other slot is), in one round trip. A store that cannot read them,
// or a failed read (bounded as an acquisition is, by the renew deadline),
// gives every slot not held here: the attempts then find out.
func (m *Semaphore) freeSlots(ctx context.Context, first int) []int {
	n := m.tried()
	busy := make([]bool, n)
	var ids []string
	m.s.mu.Lock()
	for k := range busy {
		id := SlotID(m.name, k)
		if busy[k] = m.s.slots[id] != nil; !busy[k] && k != first {
			ids = append(ids, id)
		}
	}
	m.s.mu.Unlock()
	if r, ok := m.s.store.(slotReader); ok && len(ids) > 0 {
		rctx, cancel := WithTimeout(ctx, m.s.clock, m.s.cfg.timings.RenewDeadline)
		hs, _ := r.holdersOf(rctx, ids) // failed: nil, every slot tried
		cancel()
		for _, h := range hs {
			name, k, ok := ParseSlotID(h.LockID)
			if !ok || name != m.name || k >= n {
				continue
			}
			mine := h.KeeperID == m.s.cfg.keeperID && h.Token == m.s.owner.tok
			busy[k] = busy[k] || !h.Released && !h.Expired && !mine
		}
	}
	var out []int
	for i := 1; i < n; i++ {
		if k := (first + i) % n; !busy[k] {
			out = append(out, k)
		}
	}
	return out
}

// Lock waits until it takes a slot or ctx ends, as Mutex.Lock does: each
// attempt is an AcquireLock, and the pauses between them, from the
// Session's Backoff, end early when a holder in this Session releases a
// slot. It returns at once on ErrAlreadyHeld, ErrSessionClosed and
// ErrInvalidArgument.
func (m *Semaphore) Lock(ctx context.Context) (*Lease, error) {
	if err := checkContext(ctx, "lock", m.name); err != nil {
		return nil, err
	}
	return waitFor(ctx, m.s, "lock semaphore "+strconv.Quote(m.name), m.acquireLock, m.Wait)
}

// Wait pauses d on the Session's clock, or until a holder in this Session
// lets any of the slots go, between the attempts of a caller's own waiting loop
// (Lock is one). It returns ctx's error if ctx ends first,
// ErrSessionClosed if the Session closes.
func (m *Semaphore) Wait(ctx context.Context, d time.Duration) error {
	if err := checkContext(ctx, "wait for", m.name); err != nil {
		return err
	}
	s := m.s
	var freed []<-chan struct{}
	s.mu.Lock()
	for k := range m.n {
		if sl := s.slots[SlotID(m.name, k)]; sl != nil {
			freed = append(freed, sl.freed)
		}
	}
	s.mu.Unlock()
	if len(freed) <= 1 {
		var one <-chan struct{}
		if len(freed) == 1 {
			one = freed[0]
		}
		return s.sleep(ctx, d, one)
	}
	// Any of the slots held here may come free first: wait on them all,
	// without a goroutine per slot.
	t := s.clock.NewTimer(d)
	defer t.Stop()
	cases := []reflect.SelectCase{
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(t.Chan())},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.stop)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
	}
	for _, c := range freed {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c)})
	}
	switch i, _, _ := reflect.Select(cases); i {
	case 1:
		return ErrSessionClosed
	case 2:
		return ctx.Err()
	}
	return nil
}

// ReleaseLock releases the slot held, in one round trip, as
// Mutex.ReleaseLock does (an error wrapping the lease's cause if it ended
// before the release). With no slot held it returns an error wrapping
// ErrNotHeld, after releasing any slot a failed AcquireLock may have left
// this Session's.
func (m *Semaphore) ReleaseLock(ctx context.Context) error {
	if err := checkContext(ctx, "release", m.name); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held == nil {
		for k := range m.n {
			if err := m.s.releaseMaybe(ctx, SlotID(m.name, k)); err != nil {
				return err
			}
		}
		return fmt.Errorf("release semaphore %q: %w", m.name, ErrNotHeld)
	}
	held := m.held
	m.held = nil
	return held.ReleaseLock(ctx)
}

// DoSemaphore runs fn holding a slot of the n-slot lock name, as Do runs
// it holding a lock: it waits for a slot (Semaphore.Lock), keeps it alive
// while fn runs and releases it when fn returns. fn's context carries the
// slot's lease (LeaseFrom, FenceFrom: the slot's own fencing token) and is
// cancelled, with cause ErrLeaseLost, if the lease is lost. Errors, grace
// period and panics are as for Do.
func (s *Session) DoSemaphore(ctx context.Context, name string, n int, fn func(ctx context.Context) error) error {
	if fn == nil {
		return fmt.Errorf("do %q: %w: nil function", name, ErrInvalidArgument)
	}
	if err := checkContext(ctx, "do", name); err != nil {
		return err
	}
	m, err := s.Semaphore(name, n)
	if err != nil {
		return err
	}
	return s.do(ctx, name, m, fn)
}
