package lock

import (
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
)

// TopologyWatch tells Lockers when the driver sees a new node accepting
// writes (a new primary, a restarted standalone), so that they read the
// server's clock again at once rather than within WithClockRefresh: the new
// node stamps leases with its own clock. It is optional; without it, a
// Locker reads the clock again after any failed command and when its
// estimate is old, and the clocks of the nodes that can become primary
// must agree within the session's safety margin anyway. Behind mongos or a
// load balancer the driver does not see the shards' primaries, and a watch
// adds nothing.
//
// Install its ServerMonitor on the client, then pass it to every Locker on
// that client:
//
//	watch := lock.NewTopologyWatch()
//	client, _ := mongo.Connect(options.Client().ApplyURI(uri).SetServerMonitor(watch.ServerMonitor(nil)))
//	locker, _ := lock.New(client.Database("app"), lock.WithTopologyWatch(watch))
type TopologyWatch struct {
	changes atomic.Uint64
}

// NewTopologyWatch returns a watch that has seen no change.
func NewTopologyWatch() *TopologyWatch { return &TopologyWatch{} }

// ServerMonitor returns a driver server monitor that feeds w and passes
// every event on to next's callbacks (next may be nil).
func (w *TopologyWatch) ServerMonitor(next *event.ServerMonitor) *event.ServerMonitor {
	m := &event.ServerMonitor{}
	if next != nil {
		*m = *next
	}
	prev := m.TopologyDescriptionChanged
	m.TopologyDescriptionChanged = func(e *event.TopologyDescriptionChangedEvent) {
		w.observe(e.PreviousDescription, e.NewDescription)
		if prev != nil {
			prev(e)
		}
	}
	return m
}

// observe counts a change when now has a writable node that before did
// not have: another address, election or process.
func (w *TopologyWatch) observe(before, now event.TopologyDescription) {
	had := writable(before)
	for id := range writable(now) {
		if !had[id] {
			w.changes.Add(1)
			return
		}
	}
}

// changed returns the number of changes seen.
func (w *TopologyWatch) changed() uint64 {
	if w == nil {
		return 0
	}
	return w.changes.Load()
}

type writer struct {
	addr     string
	election bson.ObjectID
	process  bson.ObjectID
}

func writable(t event.TopologyDescription) map[writer]bool {
	out := make(map[writer]bool)
	for _, s := range t.Servers {
		switch s.Kind {
		case "RSPrimary", "Standalone", "Mongos", "LoadBalancer":
			out[writer{addr: s.Addr.String(), election: s.ElectionID, process: s.TopologyVersionProcessID}] = true
		}
	}
	return out
}
