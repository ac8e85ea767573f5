package locktest

import (
	"context"
	"slices"
	"time"

	"github.com/mongolock/mongolock/lock"
)

// Op names a lock.Store method, in Calls and fault switches.
type Op string

// The operations of a Store.
const (
	OpAcquire Op = "acquire" // AcquireLocks
	OpRenew   Op = "renew"   // Renew
	OpRelease Op = "release" // ReleaseTerms
	OpHolder  Op = "holder"  // Holder
	// OpSetValue is SetValue.
	OpSetValue Op = "setvalue"
)

// Call is one call of a lock.Store method: the request, and the outcome once
// it returned. Calls with invalid arguments or no lock ids do nothing and
// are not recorded, as the Locker sends nothing for them.
type Call struct {
	Op       Op
	KeeperID string      // empty for OpHolder
	LockIDs  []string    // deduplicated; for OpRelease the terms' ids
	Terms    []lock.Term // OpRelease, and OpSetValue's one term
	Value    []byte      // OpSetValue only
	// Start is when the call began, on the Store's clock: the Sent of its
	// grants. End is when it returned; zero while it is in flight.
	Start, End time.Time

	Acquisition lock.Acquisition // OpAcquire
	Renewal     lock.Renewal     // OpRenew
	Released    int              // OpRelease: how many terms it released
	Holder      lock.Holder      // OpHolder
	// Err is the error the call returned: a failure, or for OpHolder one
	// wrapping lock.ErrNotHeld.
	Err error
}

func (c *Call) clone() Call {
	d := *c
	d.LockIDs = slices.Clone(c.LockIDs)
	d.Terms = slices.Clone(c.Terms)
	d.Value = slices.Clone(c.Value)
	d.Acquisition.Granted = slices.Clone(c.Acquisition.Granted)
	d.Acquisition.Refused = slices.Clone(c.Acquisition.Refused)
	d.Renewal.Held = slices.Clone(c.Renewal.Held)
	d.Renewal.Lost = slices.Clone(c.Renewal.Lost)
	return d
}

// Calls returns the calls of ops so far (of every op if none), in the order
// they began, in-flight ones included (End zero).
func (s *Store) Calls(ops ...Op) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if len(ops) == 0 || slices.Contains(ops, c.Op) {
			out = append(out, c.clone())
		}
	}
	return out
}

// BeforeCall sets fn to run at the start of every call, after its Start is
// read and before it takes effect, outside the Store's lock: fn may block,
// sleep (on a synctest bubble's clock: latency) or move a fake clock. A
// non-nil error fails the call, which then does nothing; nil lets it
// proceed, even if its context ended meanwhile (a request already sent,
// which the server applies and answers late). nil removes the hook.
func (s *Store) BeforeCall(fn func(ctx context.Context, c Call) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.before = fn
}

// AfterCall sets fn to run when a call returns, with its outcome, outside
// the Store's lock, in the caller's goroutine before the call returns. nil
// removes it.
func (s *Store) AfterCall(fn func(c Call)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.after = fn
}
