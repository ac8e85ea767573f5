package cluster

import (
	"context"
	"slices"
	"sync"

	"github.com/jonboulle/clockwork"
)

// Cluster is a set of instances and the log of what they reported, in the
// order it arrived. It is safe for concurrent use.
type Cluster struct {
	clock clockwork.Clock
	wg    sync.WaitGroup // one goroutine per process, until it exited

	mu      sync.Mutex
	events  []Event
	changed chan struct{} // closed and replaced by every Add
	leading string        // the instance that reported leading last, until its term ended
	procs   []*Proc
}

// New returns an empty Cluster whose recording times and exit times come
// from clock.
func New(clock clockwork.Clock) *Cluster {
	return &Cluster{clock: clock, changed: make(chan struct{})}
}

// Add records e, setting Received, and T if it is zero, to the clock's
// reading, and returns it as recorded.
func (c *Cluster) Add(e Event) Event {
	now := c.clock.Now()
	e.Received = now
	if e.T.IsZero() {
		e.T = now
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, e)
	switch e.Kind {
	case EvLead:
		c.leading = e.Instance
	case EvUnlead, EvExited:
		if e.Instance == c.leading {
			c.leading = ""
		}
	}
	close(c.changed)
	c.changed = make(chan struct{})
	return e
}

// Mark returns the index the next event will have.
func (c *Cluster) Mark() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.events)
}

// Events returns a copy of the log.
func (c *Cluster) Events() []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.events)
}

// Since returns the events from index from on.
func (c *Cluster) Since(from int) []Event {
	evs, _ := c.Next(from)
	return evs
}

// Next returns the events from index from on, and a channel closed when
// another is recorded: a loop that reads the log as it grows selects on it.
func (c *Cluster) Next(from int) ([]Event, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.events[min(from, len(c.events)):]), c.changed
}

// Await waits for n events at or after index from that match, and returns
// them. If ctx ends first it returns those it saw and the context's error.
func (c *Cluster) Await(ctx context.Context, from, n int, match func(Event) bool) ([]Event, error) {
	var got []Event
	for {
		evs, more := c.Next(from)
		from += len(evs)
		for _, e := range evs {
			if match(e) {
				got = append(got, e)
			}
		}
		if len(got) >= n {
			return got[:n], nil
		}
		select {
		case <-more:
		case <-ctx.Done():
			return got, context.Cause(ctx)
		}
	}
}

// Leader returns the process that reported leading last, if its term has
// not ended (by an unlead event or its exit) and it is up.
func (c *Cluster) Leader() *Proc {
	c.mu.Lock()
	name := c.leading
	c.mu.Unlock()
	if p := c.Proc(name); p != nil && p.Up() {
		return p
	}
	return nil
}

// Procs returns the processes started, in order.
func (c *Cluster) Procs() []*Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.procs)
}

// Proc returns the process called name, or nil.
func (c *Cluster) Proc(name string) *Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.name == name {
			return p
		}
	}
	return nil
}

// Wait waits until every process started has exited and its exit is
// recorded. It does not stop them.
func (c *Cluster) Wait() { c.wg.Wait() }
