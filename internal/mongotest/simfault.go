package mongotest

import (
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/simdb"
)

// SimFault breaks one client's link to a simulated server (simdb) as Fault
// breaks its proxy to the test server: while cut, every command fails at
// once (and server selection waits for the driver's next heartbeat); while
// silenced, every command and its reply are lost, and the client waits
// until its context ends. Restore heals the link for the commands sent
// after it. Otherwise a command takes the round trip given to NewSimFault
// there and back. Give its Plan to the link (simdb.Server.NewLink). Its
// methods are safe for concurrent use.
type SimFault struct {
	rtt   time.Duration
	state atomic.Int32 // a faultState
}

// NewSimFault returns a healthy SimFault whose commands take rtt there and
// back.
func NewSimFault(rtt time.Duration) *SimFault { return &SimFault{rtt: rtt} }

// Plan gives each command its fate.
func (f *SimFault) Plan(bson.D) simdb.Fate {
	switch faultState(f.state.Load()) {
	case cut:
		return simdb.Fate{Drop: true}
	case silenced:
		// Lost on the way; the connection fails a day later, long after
		// any operation's context.
		return simdb.Fate{Drop: true, Send: 24 * time.Hour}
	}
	return simdb.Fate{Send: f.rtt / 2, Reply: f.rtt - f.rtt/2}
}

// Cut makes every command fail at once until Restore.
func (f *SimFault) Cut() { f.state.Store(int32(cut)) }

// Silence loses every command until Restore.
func (f *SimFault) Silence() { f.state.Store(int32(silenced)) }

// Restore ends a Cut or Silence.
func (f *SimFault) Restore() { f.state.Store(int32(healthy)) }
