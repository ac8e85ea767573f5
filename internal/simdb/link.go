package simdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/address"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/description"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/mnet"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/wiremessage"

	"github.com/mongolock/mongolock/internal/wiremsg"
)

// Fate is what happens to one command on its way to the server and back.
type Fate struct {
	// Send is how long the command takes to reach the server, Queue how
	// long it then waits there before it starts (counted by its
	// maxTimeMS, unlike Send), and Reply how long its reply takes back.
	Send, Queue, Reply time.Duration
	// Drop: the command is lost on the way and never applied; the client
	// sees the connection fail after Send+Reply.
	Drop bool
	// LoseReply: the command is applied but its reply is lost; the client
	// sees the connection fail after Send+Queue+Reply.
	LoseReply bool
}

// Plan decides the fate of each command a link sends. It is called in the
// order the link's commands are sent.
type Plan func(cmd bson.D) Fate

// ErrConnection is what a client sees of a command whose connection
// failed (Fate.Drop, Fate.LoseReply, a dead link).
var ErrConnection = errors.New("simdb: connection reset")

// Sent is what a link did with one command, for traces.
type Sent struct {
	Link    string
	Command bson.D
	Fate    Fate
	At      time.Time // when the client sent it, by time.Now
}

// Link is one client's path to a Server: a driver Deployment whose
// connections carry each command, with the fate its Plan gives it, to the
// server, and its reply back, on time.Now's clock (a testing/synctest
// bubble's). Pause holds what crosses it, Kill ends it. It is safe for
// concurrent use.
type Link struct {
	srv  *Server
	name string
	plan Plan

	mu     sync.Mutex
	paused bool
	held   []func() // sends and deliveries held while paused
	dead   bool
	sent   func(Sent)
	conns  atomic.Int64
	// unknownUntil: after a connection error the driver's view of the
	// server is unknown until its next heartbeat; server selection waits
	// for it, as it waits for a primary during an election.
	unknownUntil time.Time

	decMu sync.Mutex
	dec   *decoder // of the link's commands (a connection carries one)
}

// heartbeat is how long after a connection error server selection finds
// the server again (the driver's minimum heartbeat frequency).
const heartbeat = 500 * time.Millisecond

// NewLink returns a link named name (a client's name in traces) to s. A
// nil plan gives every command a fate of no delay and no fault.
func (s *Server) NewLink(name string, plan Plan) *Link {
	if plan == nil {
		plan = func(bson.D) Fate { return Fate{} }
	}
	return &Link{srv: s, name: name, plan: plan}
}

// decode reads a command the link carries.
func (l *Link) decode(body []byte) (bson.D, error) {
	l.decMu.Lock()
	defer l.decMu.Unlock()
	if l.dec == nil {
		l.dec = newDecoder()
	}
	return l.dec.decode(body)
}

// OnSend sets a function called with each command the link sends and its
// fate.
func (l *Link) OnSend(fn func(Sent)) {
	l.mu.Lock()
	l.sent = fn
	l.mu.Unlock()
}

// Connect returns a client of the server on l, with co's options (nil
// for none) but its deployment, which is l.
func (l *Link) Connect(co *options.ClientOptions) (*mongo.Client, error) {
	if co == nil {
		co = options.Client()
	}
	co.Deployment = l //nolint:staticcheck // the driver's hook for an in-process deployment
	return mongo.Connect(co)
}

// Pause holds every command sent on l and every reply to it until Resume,
// as for a process that is stopped (SIGSTOP) or cut off.
func (l *Link) Pause() {
	l.mu.Lock()
	l.paused = true
	l.mu.Unlock()
}

// Resume releases what Pause held, in order.
func (l *Link) Resume() {
	l.mu.Lock()
	held := l.held
	l.held, l.paused = nil, false
	l.mu.Unlock()
	for _, fn := range held {
		fn()
	}
}

// Kill ends l, as for a process that died: what it held is dropped,
// nothing sent on it later reaches the server, and commands fail at once
// with ErrConnection (the process is gone; this only lets its goroutines
// end).
func (l *Link) Kill() {
	l.mu.Lock()
	l.dead, l.paused, l.held = true, false, nil
	l.mu.Unlock()
}

// gate runs fn now, or when l resumes; never once l is dead.
func (l *Link) gate(fn func()) {
	l.mu.Lock()
	switch {
	case l.dead:
		l.mu.Unlock()
		return
	case l.paused:
		l.held = append(l.held, fn)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	fn()
}

// after runs fn through the gate d from now.
func (l *Link) after(d time.Duration, fn func()) {
	if d <= 0 {
		l.gate(fn)
		return
	}
	time.AfterFunc(d, func() { l.gate(fn) })
}

type result struct {
	wm  []byte
	err error
}

// send carries cmd (requestID id) to the server and its reply back to
// out, as fate says.
func (l *Link) send(id int32, cmd bson.D, out chan<- result) {
	l.mu.Lock()
	dead, onSent := l.dead, l.sent
	l.mu.Unlock()
	if dead {
		// Refused, after a while: a dead process's goroutines (it does
		// nothing any more) retry slowly rather than spin.
		time.AfterFunc(heartbeat, func() { out <- result{err: ErrConnection} })
		return
	}
	fate := l.plan(cmd)
	if onSent != nil {
		onSent(Sent{Link: l.name, Command: cmd, Fate: fate, At: time.Now()})
	}
	deliver := func(r result) {
		l.after(fate.Reply, func() {
			if r.err != nil {
				l.mu.Lock()
				l.unknownUntil = time.Now().Add(heartbeat)
				l.mu.Unlock()
			}
			out <- r
		})
	}
	l.gate(func() {
		l.after(fate.Send, func() {
			if fate.Drop {
				deliver(result{err: ErrConnection})
				return
			}
			exec := func() {
				var reply bson.D
				if ms, ok := asInt64(lookup(cmd, "maxTimeMS")); ok && ms > 0 && fate.Queue > time.Duration(ms)*time.Millisecond {
					reply = errorReply(&cmdError{Code: codeMaxTimeMSExpired, CodeName: "MaxTimeMSExpired", Msg: "operation exceeded time limit"})
				} else {
					reply = l.srv.Handle(l.name, cmd)
				}
				if fate.LoseReply {
					deliver(result{err: ErrConnection})
					return
				}
				raw, err := encodeDoc(reply)
				if err != nil {
					deliver(result{err: fmt.Errorf("simdb: reply: %w", err)})
					return
				}
				deliver(result{wm: wiremsg.BuildMsg(wiremessage.NextRequestID(), id, 0, raw)})
			}
			// Queued at the server: not held by the client's pause.
			if fate.Queue > 0 {
				time.AfterFunc(fate.Queue, exec)
			} else {
				exec()
			}
		})
	})
}

// The driver's side: Link is a Deployment with one server, itself.

var (
	_ driver.Deployment = (*Link)(nil)
	_ driver.Server     = (*Link)(nil)
	_ driver.Subscriber = (*Link)(nil)
)

var sessionTimeout int64 = 30

var serverDesc = description.Server{
	Addr:                  address.Address("sim:27017"),
	CanonicalAddr:         address.Address("sim:27017"),
	Kind:                  description.ServerKindRSPrimary,
	WireVersion:           &description.VersionRange{Min: 0, Max: 21},
	SessionTimeoutMinutes: &sessionTimeout,
	MaxDocumentSize:       16 << 20,
	MaxMessageSize:        48000000,
	MaxBatchCount:         100000,
}

// SelectServer implements driver.Deployment: it waits while there is no
// primary, and until the heartbeat after a connection error, as the
// driver's server selection does.
func (l *Link) SelectServer(ctx context.Context, _ description.ServerSelector) (driver.Server, error) {
	for {
		l.mu.Lock()
		wait := time.Until(l.unknownUntil)
		l.mu.Unlock()
		if l.srv.isElecting() {
			wait = max(wait, heartbeat)
		}
		if wait <= 0 {
			return l, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("simdb: server selection: %w", ctx.Err())
		}
	}
}

// Kind implements driver.Deployment.
func (l *Link) Kind() description.TopologyKind { return description.TopologyKindReplicaSetWithPrimary }

// GetServerSelectionTimeout implements driver.Deployment.
func (l *Link) GetServerSelectionTimeout() time.Duration { return 0 }

// Subscribe implements driver.Subscriber: sessions are supported.
func (l *Link) Subscribe() (*driver.Subscription, error) {
	c := make(chan description.Topology, 1)
	c <- description.Topology{Kind: description.TopologyKindReplicaSetWithPrimary, SessionTimeoutMinutes: &sessionTimeout}
	return &driver.Subscription{Updates: c}, nil
}

// Unsubscribe implements driver.Subscriber.
func (l *Link) Unsubscribe(*driver.Subscription) error { return nil }

// Connection implements driver.Server.
func (l *Link) Connection(context.Context) (*mnet.Connection, error) {
	return mnet.NewConnection(&conn{l: l, id: l.conns.Add(1), replies: make(chan result, 1)}), nil
}

// RTTMonitor implements driver.Server.
func (l *Link) RTTMonitor() driver.RTTMonitor { return zeroRTT{} }

type zeroRTT struct{}

func (zeroRTT) EWMA() time.Duration { return 0 }
func (zeroRTT) Min() time.Duration  { return 0 }
func (zeroRTT) Stats() string       { return "" }

// conn is one connection of a link: a command at a time.
type conn struct {
	l       *Link
	id      int64
	replies chan result
}

func (c *conn) Write(_ context.Context, wm []byte) error {
	_, reqID, _, op, rem, ok := wiremessage.ReadHeader(wm)
	if !ok || op != wiremessage.OpMsg {
		return fmt.Errorf("simdb: only OP_MSG is simulated (opcode %v)", op)
	}
	_, body, err := wiremsg.FoldMsg(rem)
	if err != nil {
		return err
	}
	cmd, err := c.l.decode(body)
	if err != nil {
		return fmt.Errorf("simdb: command: %w", err)
	}
	c.l.send(reqID, cmd, c.replies)
	return nil
}

func (c *conn) Read(ctx context.Context) ([]byte, error) {
	select {
	case r := <-c.replies:
		return r.wm, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *conn) Close() error                    { return nil }
func (c *conn) Description() description.Server { return serverDesc }
func (c *conn) ID() string                      { return c.l.name + "-" + strconv.FormatInt(c.id, 10) }
func (c *conn) ServerConnectionID() *int64      { return &c.id }
func (c *conn) DriverConnectionID() int64       { return c.id }
func (c *conn) Address() address.Address        { return serverDesc.Addr }
func (c *conn) Stale() bool                     { return false }
func (c *conn) OIDCTokenGenID() uint64          { return 0 }
func (c *conn) SetOIDCTokenGenID(uint64)        {}
