package wirefault

import (
	"strings"

	"github.com/mongolock/mongolock/internal/wiremsg"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/wiremessage"
)

const headerLen = wiremsg.HeaderLen

// errMalformed reports a message the proxy cannot parse. The connection is
// closed: forwarding half-understood bytes would only move the failure.
var errMalformed = wiremsg.ErrMalformed

// message is one wire message and, for the opcodes rules can see, its
// command or reply document.
type message struct {
	raw        []byte
	requestID  int32
	responseTo int32
	op         wiremessage.OpCode

	// doc is what rules see: an OP_MSG body with its document sequences
	// folded in as arrays, an OP_QUERY command, or the first OP_REPLY
	// document. nil for other opcodes and for OP_QUERY on a collection.
	doc bsoncore.Document

	flags wiremessage.MsgFlag // OP_MSG only
	// For OP_QUERY and OP_REPLY, doc is raw[docStart:docEnd].
	docStart, docEnd int
}

// parse splits raw into a message. Opcodes other than OP_MSG, OP_QUERY and
// OP_REPLY are kept opaque (doc nil).
func parse(raw []byte) (*message, error) {
	length, reqID, respTo, op, rem, ok := wiremessage.ReadHeader(raw)
	if !ok || int(length) != len(raw) {
		return nil, errMalformed
	}
	m := &message{raw: raw, requestID: reqID, responseTo: respTo, op: op}
	var err error
	switch op {
	case wiremessage.OpMsg:
		m.flags, m.doc, err = wiremsg.FoldMsg(rem)
	case wiremessage.OpQuery:
		err = m.parseQuery(rem)
	case wiremessage.OpReply:
		err = m.parseReply(rem)
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// parseQuery reads an OP_QUERY. Only commands (on a "db.$cmd" namespace)
// get a doc: the driver sends nothing else this way.
func (m *message) parseQuery(src []byte) error {
	_, rem, ok := wiremessage.ReadQueryFlags(src)
	if !ok {
		return errMalformed
	}
	ns, rem, ok := wiremessage.ReadQueryFullCollectionName(rem)
	if !ok {
		return errMalformed
	}
	if _, rem, ok = wiremessage.ReadQueryNumberToSkip(rem); !ok {
		return errMalformed
	}
	if _, rem, ok = wiremessage.ReadQueryNumberToReturn(rem); !ok {
		return errMalformed
	}
	doc, after, ok := wiremessage.ReadQueryQuery(rem)
	if !ok || doc.Validate() != nil {
		return errMalformed
	}
	if strings.HasSuffix(ns, ".$cmd") {
		m.doc = doc
		m.docStart = len(m.raw) - len(rem)
		m.docEnd = len(m.raw) - len(after)
	}
	return nil
}

// parseReply reads an OP_REPLY; its first document is the command reply.
func (m *message) parseReply(src []byte) error {
	// responseFlags, cursorID, startingFrom, numberReturned
	const fieldsLen = 4 + 8 + 4 + 4
	if len(src) < fieldsLen {
		return errMalformed
	}
	rem := src[fieldsLen:]
	if len(rem) == 0 {
		return nil
	}
	doc, after, ok := bsoncore.ReadDocument(rem)
	if !ok || doc.Validate() != nil {
		return errMalformed
	}
	m.doc = doc
	m.docStart = len(m.raw) - len(rem)
	m.docEnd = len(m.raw) - len(after)
	return nil
}

// moreToCome reports whether m is an OP_MSG with the moreToCome flag: a
// request that gets no reply, or a reply that more replies follow.
func (m *message) moreToCome() bool {
	return m.op == wiremessage.OpMsg && m.flags&wiremessage.MoreToCome != 0
}

// withDoc returns m's bytes with doc in place of m.doc. An OP_MSG becomes a
// single body section and loses its checksum, which would no longer match.
func (m *message) withDoc(doc bsoncore.Document) []byte {
	if m.op == wiremessage.OpMsg {
		return wiremsg.BuildMsg(m.requestID, m.responseTo, m.flags&^wiremessage.ChecksumPresent, doc)
	}
	idx, dst := wiremessage.AppendHeaderStart(nil, m.requestID, m.responseTo, m.op)
	dst = append(dst, m.raw[headerLen:m.docStart]...)
	dst = append(dst, doc...)
	dst = append(dst, m.raw[m.docEnd:]...)
	return bsoncore.UpdateLength(dst, idx, int32(len(dst[idx:])))
}

// replyTo builds the reply the server would send to m: an OP_MSG for an
// OP_MSG, an OP_REPLY with one document for an OP_QUERY.
func (m *message) replyTo(requestID int32, doc bsoncore.Document) []byte {
	if m.op == wiremessage.OpMsg {
		return wiremsg.BuildMsg(requestID, m.requestID, 0, doc)
	}
	idx, dst := wiremessage.AppendHeaderStart(nil, requestID, m.requestID, wiremessage.OpReply)
	dst = wiremessage.AppendReplyFlags(dst, 0)
	dst = wiremessage.AppendReplyCursorID(dst, 0)
	dst = wiremessage.AppendReplyStartingFrom(dst, 0)
	dst = wiremessage.AppendReplyNumberReturned(dst, 1)
	dst = append(dst, doc...)
	return bsoncore.UpdateLength(dst, idx, int32(len(dst[idx:])))
}
