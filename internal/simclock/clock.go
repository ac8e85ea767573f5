// Package simclock is a simulated process's clock for tests under
// testing/synctest: a wall clock off true time by an offset (which steps
// change), a monotonic clock that a suspend stops, and timers that a
// stopped or suspended process does not see fire until it thaws.
package simclock

import (
	"cmp"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/jonboulle/clockwork"
)

// Clock is one simulated process's clock, on the true time of the
// testing/synctest bubble (time.Now): its wall clock reads true time plus
// an offset, which steps change; its monotonic clock does not count the
// time the process spent suspended. While the process is frozen (stopped,
// suspended, or dead until the end of the run), its timers do not fire:
// they fire at once when it thaws, as a stopped process's overdue timers
// do. Readings carry both clocks, as time.Now's do outside a bubble:
// t.Sub(u) is monotonic, t.Round(0) the wall clock.
type Clock struct {
	epoch time.Time // true time of monotonic zero

	mu          sync.Mutex
	offset      time.Duration // wall clock minus true time
	lost        time.Duration // suspended time the monotonic clock did not count
	suspendedAt time.Time     // true time the current suspend began; zero if none
	frozen      bool
	held        []*timer // fired while frozen
}

var _ clockwork.Clock = (*Clock)(nil)

// NewClock returns a clock whose wall clock is offset from true time.
func New(offset time.Duration) *Clock {
	return &Clock{epoch: time.Now(), offset: offset}
}

// Now returns the wall clock, with the monotonic reading.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked()
}

func (c *Clock) nowLocked() time.Time {
	t := time.Now()
	return withMonotonic(t.Add(c.offset), int64(c.monoLocked(t)))
}

// monoLocked is the monotonic clock at true time t.
func (c *Clock) monoLocked(t time.Time) time.Duration {
	if !c.suspendedAt.IsZero() {
		t = c.suspendedAt
	}
	return t.Sub(c.epoch) - c.lost
}

// SinceBoot reads the boot clock (lock.BootClock): true time since the
// clock was made, suspends counted, steps ignored, as CLOCK_BOOTTIME
// counts an OS suspend.
func (c *Clock) SinceBoot() time.Duration { return time.Since(c.epoch) }

// Offset returns how far the wall clock is from true time.
func (c *Clock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

// Step moves the wall clock by d; the monotonic clock does not move.
func (c *Clock) Step(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

// Freeze holds the process's timers: it is stopped (SIGSTOP) or dead.
// Its clocks go on.
func (c *Clock) Freeze() {
	c.mu.Lock()
	c.frozen = true
	c.mu.Unlock()
}

// Suspend freezes the process and stops its monotonic clock, as an OS
// suspend or a VM pause does; its wall clock goes on.
func (c *Clock) Suspend() {
	c.mu.Lock()
	c.frozen = true
	if c.suspendedAt.IsZero() {
		c.suspendedAt = time.Now()
	}
	c.mu.Unlock()
}

// Thaw ends a Freeze or Suspend: the monotonic clock runs again, and the
// timers that came due meanwhile fire, in the order they came due.
func (c *Clock) Thaw() {
	c.mu.Lock()
	if !c.suspendedAt.IsZero() {
		c.lost += time.Since(c.suspendedAt)
		c.suspendedAt = time.Time{}
	}
	c.frozen = false
	held := c.held
	c.held = nil
	slices.SortStableFunc(held, func(a, b *timer) int { return cmp.Compare(a.due, b.due) })
	c.mu.Unlock()
	// One at a time, in the order they came due, each a nanosecond after
	// the one before: in a testing/synctest bubble what a timer sets off
	// runs before the next fires, rather than all of them at one instant in
	// the order the Go scheduler picks.
	for i, t := range held {
		if i > 0 {
			time.Sleep(late)
		}
		t.fire()
	}
}

// Since returns the time elapsed since t.
func (c *Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Until returns the time until t.
func (c *Clock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// After waits d and then sends the time.
func (c *Clock) After(d time.Duration) <-chan time.Time { return c.NewTimer(d).Chan() }

// Sleep waits d.
func (c *Clock) Sleep(d time.Duration) { <-c.After(d) }

// NewTimer returns a timer that sends the time on its channel d from now,
// by the monotonic clock.
func (c *Clock) NewTimer(d time.Duration) clockwork.Timer {
	t := &timer{c: c, ch: make(chan time.Time, 1)}
	t.arm(d)
	return t
}

// AfterFunc calls f in a goroutine of its own d from now.
func (c *Clock) AfterFunc(d time.Duration, f func()) clockwork.Timer {
	t := &timer{c: c, fn: f}
	t.arm(d)
	return t
}

// NewTicker returns a ticker that sends the time every d.
func (c *Clock) NewTicker(d time.Duration) clockwork.Ticker {
	if d <= 0 {
		panic("simclock: non-positive interval for NewTicker")
	}
	t := &timer{c: c, ch: make(chan time.Time, 1), period: d}
	t.arm(d)
	return &ticker{t}
}

// timer is a Timer, an AfterFunc's, or a Ticker's.
type timer struct {
	c      *Clock
	ch     chan time.Time // nil for AfterFunc
	fn     func()
	period time.Duration // tickers

	// Guarded by c.mu.
	due    time.Duration // monotonic time it fires at
	real   *time.Timer
	active bool
	gen    int // arm count: a stale real timer's firing is ignored
}

func (t *timer) arm(d time.Duration) {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	t.armLocked(d)
}

// late is how long after its time a timer fires, as an OS's timers fire
// late: never on the instant a deadline of the real clock falls on (a
// context's of lock.WithTimeout, set from the same duration), where which
// of the two goroutines runs first would be the Go scheduler's choice.
const late = time.Nanosecond

func (t *timer) armLocked(d time.Duration) {
	c := t.c
	d += late
	if t.real != nil {
		t.real.Stop()
	}
	t.c.removeHeldLocked(t)
	t.due = c.monoLocked(time.Now()) + d
	t.active = true
	t.gen++
	gen := t.gen
	t.real = time.AfterFunc(max(d, 0), func() { t.fireGen(gen) })
}

func (t *timer) fireGen(gen int) {
	t.c.mu.Lock()
	stale := gen != t.gen
	t.c.mu.Unlock()
	if !stale {
		t.fire()
	}
}

// fire delivers t if it is due by the monotonic clock and the process is
// not frozen; otherwise it waits for the rest, or for the thaw.
func (t *timer) fire() {
	c := t.c
	c.mu.Lock()
	if !t.active {
		c.mu.Unlock()
		return
	}
	if c.frozen {
		c.held = append(c.held, t)
		c.mu.Unlock()
		return
	}
	if left := t.due - c.monoLocked(time.Now()); left > 0 {
		// A suspend ate part of the wait: wait out the rest.
		t.gen++
		gen := t.gen
		t.real = time.AfterFunc(left, func() { t.fireGen(gen) })
		c.mu.Unlock()
		return
	}
	now := c.nowLocked()
	if t.period > 0 {
		t.due += t.period
		t.gen++
		gen := t.gen
		t.real = time.AfterFunc(max(t.due-c.monoLocked(time.Now()), 0), func() { t.fireGen(gen) })
	} else {
		t.active = false
	}
	c.mu.Unlock()
	switch {
	case t.fn != nil:
		go t.fn()
	default:
		select {
		case t.ch <- now:
		default: // a ticker drops ticks nobody takes
		}
	}
}

func (c *Clock) removeHeldLocked(t *timer) {
	for i, h := range c.held {
		if h == t {
			c.held = append(c.held[:i], c.held[i+1:]...)
			return
		}
	}
}

func (t *timer) Chan() <-chan time.Time { return t.ch }

func (t *timer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	was := t.active
	t.active = false
	t.gen++
	if t.real != nil {
		t.real.Stop()
	}
	c.removeHeldLocked(t)
	return was
}

func (t *timer) Reset(d time.Duration) bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	was := t.active
	t.armLocked(d)
	return was
}

type ticker struct{ t *timer }

func (k *ticker) Chan() <-chan time.Time { return k.t.ch }
func (k *ticker) Stop()                  { k.t.Stop() }
func (k *ticker) Reset(d time.Duration) {
	k.t.c.mu.Lock()
	defer k.t.c.mu.Unlock()
	k.t.period = d
	k.t.armLocked(d)
}

// timeLayout is time.Time's representation (stable since Go 1.9): with
// hasMonotonic set in wall, wall holds the seconds since 1885 and the
// nanoseconds, and ext the monotonic reading.
type timeLayout struct {
	wall uint64
	ext  int64
	loc  *time.Location
}

const (
	hasMonotonic   = 1 << 63
	nsecShift      = 30
	nsecMask       = 1<<30 - 1
	wallToInternal = (1884*365 + 1884/4 - 1884/100 + 1884/400) * 86400
)

// withMonotonic returns wall with the monotonic reading mono, as time.Now
// would read both: a testing/synctest bubble's time.Now carries none,
// and the simulation needs the two to differ (a suspend stops one).
// Checked by TestWithMonotonic.
func withMonotonic(wall time.Time, mono int64) time.Time {
	w := wall.Round(0)
	l := (*timeLayout)(unsafe.Pointer(&w))
	sec := l.ext - wallToInternal
	if sec < 0 || sec >= 1<<33 {
		return w // beyond what a reading with a monotonic clock can hold
	}
	l.wall = hasMonotonic | uint64(sec)<<nsecShift | l.wall&nsecMask
	l.ext = mono
	return w
}
