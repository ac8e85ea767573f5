package embedded

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/wiremessage"

	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/internal/wiremsg"
)

// serializer is a MongoDB wire proxy in front of the embedded FerretDB that
// lets one command at a time reach it.
//
// Why it exists: MongoDB makes every single-document write atomic, and the lock
// protocol relies on that (two findAndModify calls racing for one lock document
// cannot both win). FerretDB 1.24 does not: findAndModify, update and delete
// first SELECT the matching documents and then UPDATE or DELETE them by _id in
// a separate statement, so two concurrent findAndModify calls on one document
// can both succeed. Forwarding requests one at a time makes every command
// atomic, which gives the same guarantee as MongoDB's document-level atomicity
// (and more). It is slow under contention, which tests can afford. It answers
// mongoutil.SerializedCommand itself, so that a Locker knows it is there and
// does not warn that FerretDB 1.x is not atomic.
//
// It evaluates the deadlines of writes (mongoutil.Deadline), which FerretDB
// 1.24 cannot, as MongoDB would (deadline.go).
//
// It also cuts update commands of more than maxUpdateStatements statements
// into several, sent back to back under one hold of cmd, and adds up their
// replies: FerretDB 1.24 holds a SQLite connection per statement until the
// end of an update command and deadlocks on big ones (see split.go).
//
// Its address never changes, so while the backend is stopped it closes every
// connection, and when the backend comes back clients reconnect by themselves.
//
// A backend that does not answer within replyTimeout (a deadlock inside
// FerretDB, say) gets its connection closed: the command fails on that one
// client, instead of holding cmd and so freezing every client for good.
type serializer struct {
	ln           net.Listener
	acceptDone   chan struct{}
	replyTimeout time.Duration
	log          *slog.Logger

	// cmd is held from writing a request to the backend until its reply is
	// read, never while talking to a client.
	cmd sync.Mutex

	mu       sync.Mutex
	backend  string // FerretDB address; "" while stopped
	sessions map[*session]struct{}
	wg       sync.WaitGroup // serve goroutines
}

// session is one client connection and its own backend connection.
type session struct {
	client  net.Conn
	backend net.Conn // set under serializer.mu once dialled
}

func (s *session) close() {
	s.client.Close()
	if s.backend != nil {
		s.backend.Close()
	}
}

const (
	headerLen   = wiremsg.HeaderLen
	opMsg       = 2013 // OP_MSG (see the MongoDB wire protocol specification)
	dialTimeout = 2 * time.Second
)

// ReplyTimeout bounds how long the proxy waits for FerretDB to take a command
// and reply to it. Commands run one at a time, so one that never returns would
// otherwise stop every client; this one fails instead, and its connection is
// closed. It is far above any command the tests or the demo send.
const ReplyTimeout = 2 * time.Minute

// errNoReply reports a backend that did not reply within the reply timeout.
var errNoReply = errors.New("embedded: no reply from FerretDB")

// newSerializer listens on addr and forwards to backend.
func newSerializer(addr, backend string, replyTimeout time.Duration, log *slog.Logger) (*serializer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &serializer{
		ln:           ln,
		acceptDone:   make(chan struct{}),
		replyTimeout: replyTimeout,
		log:          log,
		backend:      backend,
		sessions:     make(map[*session]struct{}),
	}
	go s.accept()
	return s, nil
}

// addr is the address clients connect to.
func (s *serializer) addr() string { return s.ln.Addr().String() }

func (s *serializer) accept() {
	defer close(s.acceptDone)
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return // listener closed
		}
		s.mu.Lock()
		if s.backend == "" {
			s.mu.Unlock()
			c.Close()
			continue
		}
		sess := &session{client: c}
		s.sessions[sess] = struct{}{}
		s.wg.Add(1)
		backend := s.backend
		s.mu.Unlock()
		go s.serve(sess, backend)
	}
}

func (s *serializer) serve(sess *session, addr string) {
	defer s.wg.Done()
	defer s.drop(sess)

	b, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return
	}
	s.mu.Lock()
	if _, ok := s.sessions[sess]; !ok { // pause ran meanwhile
		s.mu.Unlock()
		b.Close()
		return
	}
	sess.backend = b
	s.mu.Unlock()

	for {
		req, err := wiremsg.Read(sess.client)
		if err != nil {
			return
		}
		if reply := serializedReply(req); reply != nil {
			if _, err := sess.client.Write(reply); err != nil {
				return
			}
			continue
		}
		if err := s.forward(sess.client, b, req); err != nil {
			return
		}
	}
}

// forward sends req to the backend under cmd and relays the replies, if any.
// Handshakes and heartbeats bypass cmd: they change nothing, and a long
// command must not starve the driver's monitor into declaring the server
// down (which makes the driver close connections that are in use).
func (s *serializer) forward(client, backend net.Conn, req []byte) error {
	lock, unlock := s.cmd.Lock, s.cmd.Unlock
	if !needsSerializing(req) {
		lock, unlock = func() {}, func() {}
	}
	lock()
	if r := resolveDeadlines(req, time.Now()); r != nil {
		req = r
	}
	if sp := splitUpdate(req, maxUpdateStatements); sp != nil {
		reply, err := s.roundTripSplit(backend, req, sp)
		unlock()
		if err != nil {
			return err
		}
		_, err = client.Write(reply)
		return err
	}
	// Bound the write too: a backend that stopped reading fills the socket.
	if err := backend.SetDeadline(time.Now().Add(s.replyTimeout)); err != nil {
		unlock()
		return err
	}
	if _, err := backend.Write(req); err != nil {
		unlock()
		return s.noReply(err)
	}
	if wiremsg.MoreToCome(req) { // the client expects no reply
		unlock()
		return nil
	}
	reply, err := wiremsg.Read(backend)
	unlock()
	for {
		if err != nil {
			return s.noReply(err)
		}
		if _, err := client.Write(reply); err != nil {
			return err
		}
		if !wiremsg.MoreToCome(reply) {
			return nil
		}
		// An exhaust reply: the server sends more without being asked.
		if err := backend.SetReadDeadline(time.Now().Add(s.replyTimeout)); err != nil {
			return err
		}
		reply, err = wiremsg.Read(backend)
	}
}

// roundTripSplit sends the chunks of the update command req one after the
// other (for an ordered one, up to the first that has a write error) and
// returns the reply to the whole command. The caller holds cmd, so that no
// other command comes in between, as none would within one command.
func (s *serializer) roundTripSplit(backend net.Conn, req []byte, sp *updateSplit) ([]byte, error) {
	var t updateTotals
	for i, chunk := range sp.chunks {
		if err := backend.SetDeadline(time.Now().Add(s.replyTimeout)); err != nil {
			return nil, err
		}
		if _, err := backend.Write(chunk); err != nil {
			return nil, s.noReply(err)
		}
		reply, err := wiremsg.Read(backend)
		if err != nil {
			return nil, s.noReply(err)
		}
		errs := len(t.writeErrors)
		ok, err := t.add(reply, sp.offsets[i])
		switch {
		case err != nil:
			return nil, err
		case !ok: // a command error: FerretDB's answer is the answer
			return reply, nil
		case sp.ordered && len(t.writeErrors) > errs:
			return t.reply(sp.requestID)
		}
	}
	return t.reply(sp.requestID)
}

// noReply turns a deadline passing on the backend connection into errNoReply,
// and logs it: it means FerretDB hung, which nothing else would show.
func (s *serializer) noReply(err error) error {
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return err
	}
	s.log.Error("FerretDB did not answer a command in time; closing the connection", "timeout", s.replyTimeout)
	return fmt.Errorf("%w within %v: %w", errNoReply, s.replyTimeout, err)
}

func (s *serializer) drop(sess *session) {
	s.mu.Lock()
	delete(s.sessions, sess)
	sess.close()
	s.mu.Unlock()
}

// pause closes every connection and refuses new ones until resume.
func (s *serializer) pause() {
	s.mu.Lock()
	s.backend = ""
	for sess := range s.sessions {
		delete(s.sessions, sess)
		sess.close()
	}
	s.mu.Unlock()
	// No serve goroutine can start now, so waiting cannot race with Add.
	s.wg.Wait()
}

// resume forwards new connections to backend.
func (s *serializer) resume(backend string) {
	s.mu.Lock()
	s.backend = backend
	s.mu.Unlock()
}

// close stops listening and closes every connection.
func (s *serializer) close() {
	s.ln.Close()
	<-s.acceptDone
	s.pause()
}

// readOnlyCommands change nothing on the server.
var readOnlyCommands = map[string]bool{
	"hello": true, "isMaster": true, "ismaster": true, "ping": true, "buildInfo": true, "buildinfo": true,
}

// needsSerializing reports whether req is an OP_MSG command other than a
// handshake or heartbeat. Legacy opcodes are only used for handshakes.
func needsSerializing(req []byte) bool {
	name, ok := commandName(req)
	return ok && !readOnlyCommands[name]
}

// commandName returns the name of the OP_MSG command req, and whether req
// is one. A command whose body section does not come first (drivers send it
// first) has no name here.
func commandName(req []byte) (string, bool) {
	// header, flagBits, section kind 0, document length, element type, name
	const nameAt = headerLen + 4 + 1 + 4 + 1
	if len(req) <= nameAt || int32(binary.LittleEndian.Uint32(req[12:16])) != opMsg {
		return "", false
	}
	if req[headerLen+4] != 0 {
		return "", true
	}
	name := req[nameAt:]
	if i := bytes.IndexByte(name, 0); i >= 0 {
		return string(name[:i]), true
	}
	return "", true
}

// serializedReply is the proxy's own answer to mongoutil.SerializedCommand
// in req, {ok: 1}, which tells a Locker that commands are serialized here
// (FerretDB would answer CommandNotFound); nil for any other message.
func serializedReply(req []byte) []byte {
	if name, _ := commandName(req); name != mongoutil.SerializedCommand || wiremsg.MoreToCome(req) {
		return nil
	}
	body, err := bson.Marshal(bson.D{{Key: "ok", Value: 1.0}})
	if err != nil {
		panic(err) // a constant document
	}
	_, requestID, _, _, _, _ := wiremessage.ReadHeader(req) // an OP_MSG: commandName read it
	return opMsgParts{body: body}.build(requestID)
}
