package embedded

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// maxUpdateStatements is the most update statements the proxy sends to
// FerretDB in one command; it splits bigger update commands.
//
// Why: FerretDB 1.24's update handler (handler/msg_update.go,
// updateDocument) opens a query per statement and defers closing it to the
// end of the whole command (`defer closer.Close()` inside the loop over the
// statements). A statement that is not multi stops reading after the first
// match, so its query keeps its SQLite connection, and the SQLite backend has
// 100 per database (backends/sqlite/metadata/pool/opendb.go,
// SetMaxOpenConns(100)). A command with 100 or more statements that match
// therefore waits for ever for a connection it holds itself, and everything
// behind the proxy waits with it. MongoDB drivers send a whole BulkWrite of
// UpdateOne models as one command (FerretDB announces maxWriteBatchSize
// 100000). Well below 100, to leave room for other open cursors.
//
// Not by announcing a smaller maxWriteBatchSize in hello, which would make
// the driver split bulk writes itself: clients would then send more
// commands than to MongoDB, and the round trips the tests and benchmarks
// count would no longer be MongoDB's.
const maxUpdateStatements = 32

// opMsg flag bits (see the MongoDB wire protocol specification).
const (
	flagChecksumPresent = 1 << 0
	flagMoreToCome      = 1 << 1
)

// opMsgParts is an OP_MSG taken apart: the body (section kind 0) and the
// document sequences (kind 1), by identifier, in order.
type opMsgParts struct {
	requestID int32
	flags     uint32
	body      bson.Raw
	seqIDs    []string
	seqs      map[string][]bson.Raw
}

// parseOpMsg takes msg apart; false if it is not an OP_MSG or is malformed.
func parseOpMsg(msg []byte) (opMsgParts, bool) {
	var p opMsgParts
	if len(msg) < headerLen+4 || int32(binary.LittleEndian.Uint32(msg[12:16])) != opMsg ||
		int(binary.LittleEndian.Uint32(msg[0:4])) != len(msg) {
		return p, false
	}
	p.requestID = int32(binary.LittleEndian.Uint32(msg[4:8]))
	p.flags = binary.LittleEndian.Uint32(msg[16:20])
	rest := msg[headerLen+4:]
	if p.flags&flagChecksumPresent != 0 {
		if len(rest) < 4 {
			return p, false
		}
		rest = rest[:len(rest)-4]
	}
	p.seqs = map[string][]bson.Raw{}
	for len(rest) > 0 {
		kind := rest[0]
		rest = rest[1:]
		switch kind {
		case 0:
			doc, n, ok := readDoc(rest)
			if !ok || p.body != nil {
				return p, false
			}
			p.body, rest = doc, rest[n:]
		case 1:
			if len(rest) < 4 {
				return p, false
			}
			size := int(int32(binary.LittleEndian.Uint32(rest)))
			if size < 5 || size > len(rest) {
				return p, false
			}
			sec := rest[4:size]
			rest = rest[size:]
			end := bytes.IndexByte(sec, 0)
			if end < 0 {
				return p, false
			}
			id := string(sec[:end])
			if _, dup := p.seqs[id]; dup {
				return p, false
			}
			var docs []bson.Raw
			for sec = sec[end+1:]; len(sec) > 0; {
				doc, n, ok := readDoc(sec)
				if !ok {
					return p, false
				}
				docs, sec = append(docs, doc), sec[n:]
			}
			p.seqIDs = append(p.seqIDs, id)
			p.seqs[id] = docs
		default:
			return p, false
		}
	}
	return p, p.body != nil
}

// readDoc reads the BSON document at the start of b and its length.
func readDoc(b []byte) (bson.Raw, int, bool) {
	if len(b) < 5 {
		return nil, 0, false
	}
	n := int(int32(binary.LittleEndian.Uint32(b)))
	if n < 5 || n > len(b) || bson.Raw(b[:n]).Validate() != nil {
		return nil, 0, false
	}
	return bson.Raw(b[:n]), n, true
}

// build puts p together as a wire message, without a checksum.
func (p opMsgParts) build(responseTo int32) []byte {
	msg := make([]byte, headerLen+4, headerLen+4+len(p.body)+1)
	binary.LittleEndian.PutUint32(msg[4:], uint32(p.requestID))
	binary.LittleEndian.PutUint32(msg[8:], uint32(responseTo))
	binary.LittleEndian.PutUint32(msg[12:], opMsg)
	binary.LittleEndian.PutUint32(msg[16:], p.flags&^flagChecksumPresent)
	msg = append(msg, 0)
	msg = append(msg, p.body...)
	for _, id := range p.seqIDs {
		start := len(msg)
		msg = append(msg, 1, 0, 0, 0, 0)
		msg = append(msg, id...)
		msg = append(msg, 0)
		for _, d := range p.seqs[id] {
			msg = append(msg, d...)
		}
		binary.LittleEndian.PutUint32(msg[start+1:], uint32(len(msg)-start-1))
	}
	binary.LittleEndian.PutUint32(msg[0:], uint32(len(msg)))
	return msg
}

// updateSplit is an update command cut into commands of at most
// maxUpdateStatements statements each.
type updateSplit struct {
	chunks  [][]byte
	offsets []int // index in the whole command of each chunk's first statement
	ordered bool
}

// splitUpdate cuts req if it is an update command of more than max
// statements, sent as a document sequence (as drivers do); nil otherwise.
// A request that expects no reply is left alone: nobody would see how it
// went.
func splitUpdate(req []byte, max int) *updateSplit {
	if name, _ := commandName(req); name != "update" {
		return nil
	}
	p, ok := parseOpMsg(req)
	if !ok || p.flags&flagMoreToCome != 0 || len(p.seqIDs) != 1 || p.seqIDs[0] != "updates" ||
		len(p.seqs["updates"]) <= max {
		return nil
	}
	all := p.seqs["updates"]
	sp := &updateSplit{ordered: true}
	if v, err := p.body.LookupErr("ordered"); err == nil {
		b, isBool := v.BooleanOK()
		if !isBool {
			return nil // let FerretDB reject it
		}
		sp.ordered = b
	}
	for i := 0; i < len(all); i += max {
		c := p
		c.seqs = map[string][]bson.Raw{"updates": all[i:min(i+max, len(all))]}
		sp.chunks = append(sp.chunks, c.build(0))
		sp.offsets = append(sp.offsets, i)
	}
	return sp
}

// updateTotals adds up the replies to the chunks of an update command.
type updateTotals struct {
	n, nModified      int64
	upserted          []bson.D
	writeErrors       []bson.D
	writeConcernError bson.RawValue
}

// add adds the reply to the chunk whose first statement is at offset. It
// returns false if the reply is not a successful update reply (ok: 1), to be
// passed on as it is.
func (t *updateTotals) add(reply []byte, offset int) (bool, error) {
	p, ok := parseOpMsg(reply)
	if !ok {
		return false, fmt.Errorf("embedded: malformed reply to update")
	}
	if okv, ok := p.body.Lookup("ok").AsFloat64OK(); !ok || okv != 1 {
		return false, nil
	}
	n, _ := p.body.Lookup("n").AsInt64OK()
	m, _ := p.body.Lookup("nModified").AsInt64OK()
	t.n, t.nModified = t.n+n, t.nModified+m
	for _, key := range []string{"upserted", "writeErrors"} {
		arr, ok := p.body.Lookup(key).ArrayOK()
		if !ok {
			continue
		}
		vals, err := arr.Values()
		if err != nil {
			return false, fmt.Errorf("embedded: reply to update: %s: %w", key, err)
		}
		for _, v := range vals {
			d, err := reindexed(v, offset)
			if err != nil {
				return false, fmt.Errorf("embedded: reply to update: %s: %w", key, err)
			}
			if key == "upserted" {
				t.upserted = append(t.upserted, d)
			} else {
				t.writeErrors = append(t.writeErrors, d)
			}
		}
	}
	if v, err := p.body.LookupErr("writeConcernError"); err == nil && t.writeConcernError.Type == 0 {
		t.writeConcernError = v
	}
	return true, nil
}

// reindexed is the document v with its index field moved by offset.
func reindexed(v bson.RawValue, offset int) (bson.D, error) {
	raw, ok := v.DocumentOK()
	if !ok {
		return nil, fmt.Errorf("not a document: %v", v)
	}
	var d bson.D
	if err := bson.Unmarshal(raw, &d); err != nil {
		return nil, err
	}
	for i, e := range d {
		if e.Key == "index" {
			idx, ok := raw.Lookup("index").AsInt64OK()
			if !ok {
				return nil, fmt.Errorf("index %v", e.Value)
			}
			d[i].Value = int32(idx + int64(offset))
		}
	}
	return d, nil
}

// reply is the reply to the whole command, to the request requestID.
func (t *updateTotals) reply(requestID int32) ([]byte, error) {
	body := bson.D{{Key: "n", Value: int32(t.n)}, {Key: "nModified", Value: int32(t.nModified)}}
	if len(t.upserted) > 0 {
		body = append(body, bson.E{Key: "upserted", Value: t.upserted})
	}
	if len(t.writeErrors) > 0 {
		body = append(body, bson.E{Key: "writeErrors", Value: t.writeErrors})
	}
	if t.writeConcernError.Type != 0 {
		body = append(body, bson.E{Key: "writeConcernError", Value: t.writeConcernError})
	}
	body = append(body, bson.E{Key: "ok", Value: 1.0})
	raw, err := bson.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("embedded: reply to update: %w", err)
	}
	return opMsgParts{body: raw}.build(requestID), nil
}
