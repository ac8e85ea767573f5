package lock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"time"
)

// DefaultWatchPeriod is how often Watch reads a watched lock (WithWatchPeriod).
const DefaultWatchPeriod = time.Second

// MinWatchPeriod is the shortest period WithWatchPeriod accepts.
const MinWatchPeriod = time.Millisecond

// WithWatchPeriod sets how often the Locker reads a lock that is watched
// (Watch): a change of its holder is seen at most d, plus a read's round
// trip, after it was stored. Default: DefaultWatchPeriod (1s).
func WithWatchPeriod(d time.Duration) Option {
	return func(c *config) error {
		if d < MinWatchPeriod {
			return fmt.Errorf("%w: WithWatchPeriod: %v is shorter than %v", ErrInvalidOption, d, MinWatchPeriod)
		}
		c.watchPeriod = d
		return nil
	}
}

// WatchPeriod returns the poll period of Watch (WithWatchPeriod).
func (l *Locker) WatchPeriod() time.Duration { return l.cfg.watchPeriod }

// Watch returns the holders of lockID as they change, for as long as the
// range over it runs and ctx lasts: first the holder as last read, then
// one Holder for every change of its keeper, token, fence, value, or of
// whether it is released or expired (renewals are not changes). A lock
// without a document gives a Holder with only LockID; one whose document
// is bad, a Holder with LockID and Bad (naming the field, and reported as
// Locks reports it), until it is good again. A consumer slower
// than the changes sees the latest, not every one in between.
//
// It polls: one reader per Locker and lock, however many ranges watch it,
// reads the lock once every watch period (WithWatchPeriod, default 1s),
// so a change is seen at most a period plus a read's round trip after
// the server stored it. The reader starts with the first range and stops,
// its goroutine returned, when the last range ends. A failed read is
// retried a period later; watchers see nothing of it. (Change streams
// would be faster, but FerretDB has none; polling works everywhere.)
//
// It returns an error wrapping ErrInvalidArgument for a bad lock id or a
// nil context, and does no I/O until ranged over.
func (l *Locker) Watch(ctx context.Context, lockID string) (iter.Seq[Holder], error) {
	if err := checkContext(ctx, "watch", lockID); err != nil {
		return nil, err
	}
	if err := ValidateID("lockID", lockID); err != nil {
		return nil, err
	}
	return func(yield func(Holder) bool) {
		p := l.watches.join(l, lockID)
		defer l.watches.leave(lockID, p)
		var seen uint64
		for {
			l.watches.mu.Lock()
			h, ver, changed := p.h, p.ver, p.changed
			l.watches.mu.Unlock()
			if ver > seen {
				seen = ver
				h.Value = bytes.Clone(h.Value) // the caller's own
				if h.Bad != nil {
					b := *h.Bad
					h.Bad = &b
				}
				if !yield(h) {
					return
				}
				continue
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
		}
	}, nil
}

// watchSet is a Locker's readers of watched locks, one per lock id.
type watchSet struct {
	mu sync.Mutex
	m  map[string]*poller
}

// poller reads one watched lock every watch period. Its fields but done
// are guarded by watchSet.mu.
type poller struct {
	refs    int
	h       Holder
	ver     uint64        // changes of h so far; 0 before the first read
	changed chan struct{} // closed, and replaced, at every change
	cancel  context.CancelFunc
	done    chan struct{} // closed when run returned
}

// join adds a watcher of lockID, starting its reader if it has none.
func (w *watchSet) join(l *Locker, lockID string) *poller {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p := w.m[lockID]; p != nil {
		p.refs++
		return p
	}
	if w.m == nil {
		w.m = make(map[string]*poller)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &poller{refs: 1, changed: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	w.m[lockID] = p
	go l.poll(ctx, lockID, p)
	return p
}

// leave removes a watcher of lockID; the last one stops the reader and
// waits for it to return.
func (w *watchSet) leave(lockID string, p *poller) {
	w.mu.Lock()
	p.refs--
	last := p.refs == 0
	if last {
		delete(w.m, lockID)
	}
	w.mu.Unlock()
	if last {
		p.cancel()
		<-p.done
	}
}

// pollers returns how many readers run: for tests.
func (w *watchSet) pollers() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}

// poll is p's reader: a read of lockID every watch period until ctx ends.
func (l *Locker) poll(ctx context.Context, lockID string, p *poller) {
	defer close(p.done)
	for {
		if h, ok := l.watchRead(ctx, lockID); ok {
			l.watches.mu.Lock()
			if p.ver == 0 || !sameHolder(p.h, h) {
				p.h = h
				p.ver++
				close(p.changed)
				p.changed = make(chan struct{})
			}
			l.watches.mu.Unlock()
		}
		t := l.cfg.clock.NewTimer(l.cfg.watchPeriod)
		select {
		case <-t.Chan():
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// watchRead reads lockID's holder for Watch; ok=false when the read
// failed. A bad document (reported by Holder) is a Holder with Bad.
func (l *Locker) watchRead(ctx context.Context, lockID string) (Holder, bool) {
	// A read slower than a lease says nothing useful of it.
	rctx, cancel := WithTimeout(ctx, l.cfg.clock, l.cfg.ttl)
	defer cancel()
	h, err := l.Holder(rctx, lockID)
	switch {
	case err == nil:
		return h, true
	case errors.Is(err, ErrNotHeld):
		h.LockID = lockID // a lock without a document: nothing else
		return h, true
	}
	if b := (BadDocument{}); errors.As(err, &b) {
		return Holder{LockID: lockID, Bad: &b}, true
	}
	if ctx.Err() == nil {
		l.cfg.log.Debug().Str("lock", lockID).Err(err).Msg("watch: read failed")
	}
	return Holder{}, false
}

// sameHolder reports whether a and b describe one state of a lock, for
// Watch: renewals (RenewedAt, ExpiresAt) and reading times are not
// changes.
func sameHolder(a, b Holder) bool {
	// A released lock's "lease" ends at its release: it reads as
	// expired soon after, which is no change.
	return a.KeeperID == b.KeeperID && a.Token == b.Token && a.Fence == b.Fence &&
		a.Released == b.Released && (a.Released || a.Expired == b.Expired) &&
		a.AcquiredAt.Equal(b.AcquiredAt) && bytes.Equal(a.Value, b.Value) &&
		(a.Bad == nil) == (b.Bad == nil) && (a.Bad == nil || a.Bad.Field == b.Bad.Field && a.Bad.Problem == b.Bad.Problem)
}
