package wirefault

import (
	"bytes"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mongolock/mongolock/internal/wiremsg"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// dialTimeout bounds connecting to the upstream server.
const dialTimeout = 2 * time.Second

// Proxy forwards MongoDB wire traffic from its own loopback address to one
// upstream server, passing commands and replies through its rules. Point one
// client at it with a direct connection.
type Proxy struct {
	ln         net.Listener
	upstream   string
	rules      []Rule
	acceptDone chan struct{}
	replyID    atomic.Int32 // request IDs of replies the rules make up

	mu     sync.Mutex
	closed bool
	conns  map[*conn]struct{}
	wg     sync.WaitGroup // serve goroutines
}

// conn is one client connection and its own upstream connection.
type conn struct {
	client, server net.Conn
}

func (c *conn) close() {
	c.client.Close()
	if c.server != nil {
		c.server.Close()
	}
}

// Start listens on a fresh loopback port and forwards every connection to
// upstream (host:port) through rules. Close stops it.
func Start(upstream string, rules ...Rule) (*Proxy, error) {
	for i, r := range rules {
		if r == nil {
			return nil, fmt.Errorf("wirefault: rule %d is nil", i)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("wirefault: listen: %w", err)
	}
	p := &Proxy{
		ln:         ln,
		upstream:   upstream,
		rules:      rules,
		acceptDone: make(chan struct{}),
		conns:      make(map[*conn]struct{}),
	}
	go p.accept()
	return p, nil
}

// Addr returns the address clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops listening, closes every connection and waits until every
// goroutine of p has returned. It is safe to call more than once.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	<-p.acceptDone
	p.mu.Lock()
	first := !p.closed
	p.closed = true
	for c := range p.conns {
		c.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	if !first {
		return nil
	}
	return err
}

func (p *Proxy) accept() {
	defer close(p.acceptDone)
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // listener closed
		}
		cn := &conn{client: c}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[cn] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(cn)
	}
}

func (p *Proxy) serve(c *conn) {
	defer p.wg.Done()
	defer p.drop(c)

	s, err := net.DialTimeout("tcp", p.upstream, dialTimeout)
	if err != nil {
		return // the client sees its connection closed, as if the server were down
	}
	p.mu.Lock()
	if _, ok := p.conns[c]; !ok { // Close ran meanwhile
		p.mu.Unlock()
		s.Close()
		return
	}
	c.server = s
	p.mu.Unlock()

	x := &exchange{rules: p.rules}
	for {
		req, err := wiremsg.Read(c.client)
		if err != nil {
			return
		}
		if err := p.roundTrip(c, x, req); err != nil {
			return
		}
	}
}

func (p *Proxy) drop(c *conn) {
	p.mu.Lock()
	delete(p.conns, c)
	c.close()
	p.mu.Unlock()
}

// roundTrip passes one request through the rules to the server and relays
// the replies, if any, back through the rules.
func (p *Proxy) roundTrip(c *conn, x *exchange, raw []byte) error {
	req, err := parse(raw)
	if err != nil {
		return err
	}
	if req.doc == nil { // not a command: pass it and its replies through
		return p.relay(c, nil, req)
	}
	var cmd bson.D
	if err := bson.Unmarshal(req.doc, &cmd); err != nil {
		return fmt.Errorf("%w: %w", errMalformed, err)
	}
	cmd = withoutCompression(cmd)
	out, reply := x.request(cmd)
	if reply != nil {
		if req.moreToCome() { // the client expects no reply
			return nil
		}
		doc, err := bson.Marshal(x.reply(reply))
		if err != nil {
			return fmt.Errorf("wirefault: marshal reply: %w", err)
		}
		_, err = c.client.Write(req.replyTo(p.replyID.Add(1), doc))
		return err
	}
	doc, err := bson.Marshal(out)
	if err != nil {
		return fmt.Errorf("wirefault: marshal command: %w", err)
	}
	if !bytes.Equal(doc, req.doc) {
		req.raw = req.withDoc(doc)
	}
	return p.relay(c, x, req)
}

// relay sends req and copies the server's replies to the client, through
// x's rules unless x is nil.
func (p *Proxy) relay(c *conn, x *exchange, req *message) error {
	if _, err := c.server.Write(req.raw); err != nil {
		return err
	}
	if req.moreToCome() {
		return nil
	}
	for {
		raw, err := wiremsg.Read(c.server)
		if err != nil {
			return err
		}
		reply, err := parse(raw)
		if err != nil {
			return err
		}
		if x != nil && reply.doc != nil {
			if raw, err = rewriteReply(x, reply); err != nil {
				return err
			}
		}
		if _, err := c.client.Write(raw); err != nil {
			return err
		}
		// An exhaust reply (a streaming hello): more follow unasked.
		if !reply.moreToCome() {
			return nil
		}
	}
}

// rewriteReply runs reply back through x's rules and returns its bytes.
func rewriteReply(x *exchange, reply *message) ([]byte, error) {
	var d bson.D
	if err := bson.Unmarshal(reply.doc, &d); err != nil {
		return nil, fmt.Errorf("%w: %w", errMalformed, err)
	}
	doc, err := bson.Marshal(x.reply(d))
	if err != nil {
		return nil, fmt.Errorf("wirefault: marshal reply: %w", err)
	}
	if bytes.Equal(doc, reply.doc) {
		return reply.raw, nil
	}
	return reply.withDoc(doc), nil
}

// withoutCompression drops the compressors a handshake offers, so the
// server never compresses and every message stays readable to the rules.
func withoutCompression(cmd bson.D) bson.D {
	if !isHello(cmd) {
		return cmd
	}
	return without(cmd, "compression")
}
