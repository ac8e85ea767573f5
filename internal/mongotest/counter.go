package mongotest

import (
	"context"
	"maps"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Counter counts the commands a client starts, by name, so tests can assert
// round trips, including hello commands an application sends (the driver's
// own handshakes and heartbeats never reach the command monitor).
// Authentication, ping, buildInfo and session cleanup are not counted. It is
// safe for concurrent use.
type Counter struct {
	mu     sync.Mutex
	counts map[string]int
}

// uncounted are commands the driver sends on its own.
var uncounted = map[string]bool{
	"saslStart": true, "saslContinue": true, "authenticate": true, "getnonce": true,
	"ping": true, "buildInfo": true, "buildinfo": true, "endSessions": true,
}

// CountingClient returns a client (as NewClient) whose commands c counts.
func CountingClient(tb testing.TB) (*mongo.Client, *Counter) {
	tb.Helper()
	c := NewCounter()
	client := NewClient(tb, options.Client().SetMonitor(c.Monitor()))
	return client, c
}

// NewCounter returns a Counter of the commands of the clients given its
// Monitor (a client of a simulated server, say).
func NewCounter() *Counter { return &Counter{counts: make(map[string]int)} }

// Monitor returns a command monitor that counts into c.
func (c *Counter) Monitor() *event.CommandMonitor { return &event.CommandMonitor{Started: c.started} }

func (c *Counter) started(_ context.Context, e *event.CommandStartedEvent) {
	if uncounted[e.CommandName] {
		return
	}
	c.mu.Lock()
	c.counts[e.CommandName]++
	c.mu.Unlock()
}

// Reset sets every count to zero.
func (c *Counter) Reset() {
	c.mu.Lock()
	clear(c.counts)
	c.mu.Unlock()
}

// Count returns how many commands called name were started.
func (c *Counter) Count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[name]
}

// Total returns how many counted commands were started.
func (c *Counter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.counts {
		n += v
	}
	return n
}

// Counts returns the counts by command name.
func (c *Counter) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}
