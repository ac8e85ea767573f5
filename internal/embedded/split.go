package embedded

import (
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/wiremessage"
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

// opMsgParts is an OP_MSG taken apart: the body (section kind 0) and the
// document sequences (kind 1), by identifier, in order.
type opMsgParts struct {
	requestID int32
	flags     wiremessage.MsgFlag
	body      bson.Raw
	seqIDs    []string
	seqs      map[string][]bson.Raw
}

// parseOpMsg takes msg apart with the driver's wire message readers; false
// if it is not an OP_MSG or is malformed.
func parseOpMsg(msg []byte) (opMsgParts, bool) {
	var p opMsgParts
	length, requestID, _, op, rest, ok := wiremessage.ReadHeader(msg)
	if !ok || int(length) != len(msg) || op != wiremessage.OpMsg {
		return p, false
	}
	p.requestID = requestID
	if p.flags, rest, ok = wiremessage.ReadMsgFlags(rest); !ok {
		return p, false
	}
	if p.flags&wiremessage.ChecksumPresent != 0 {
		if len(rest) < 4 {
			return p, false
		}
		rest = rest[:len(rest)-4]
	}
	p.seqs = map[string][]bson.Raw{}
	for len(rest) > 0 {
		kind, rem, ok := wiremessage.ReadMsgSectionType(rest)
		if !ok {
			return p, false
		}
		switch kind {
		case wiremessage.SingleDocument:
			var doc bsoncore.Document
			if doc, rest, ok = wiremessage.ReadMsgSectionSingleDocument(rem); !ok || p.body != nil || doc.Validate() != nil {
				return p, false
			}
			p.body = bson.Raw(doc)
		case wiremessage.DocumentSequence:
			var id string
			var docs []bsoncore.Document
			if id, docs, rest, ok = wiremessage.ReadMsgSectionDocumentSequence(rem); !ok {
				return p, false
			}
			if _, dup := p.seqs[id]; dup {
				return p, false
			}
			raws := make([]bson.Raw, len(docs))
			for i, d := range docs {
				if d.Validate() != nil {
					return p, false
				}
				raws[i] = bson.Raw(d)
			}
			p.seqIDs = append(p.seqIDs, id)
			p.seqs[id] = raws
		default:
			return p, false
		}
	}
	return p, p.body != nil
}

// build puts p together as a wire message, without a checksum.
func (p opMsgParts) build(responseTo int32) []byte {
	idx, msg := wiremessage.AppendHeaderStart(nil, p.requestID, responseTo, wiremessage.OpMsg)
	msg = wiremessage.AppendMsgFlags(msg, p.flags&^wiremessage.ChecksumPresent)
	msg = wiremessage.AppendMsgSectionType(msg, wiremessage.SingleDocument)
	msg = append(msg, p.body...)
	for _, id := range p.seqIDs {
		msg = wiremessage.AppendMsgSectionType(msg, wiremessage.DocumentSequence)
		var seq int32
		seq, msg = bsoncore.ReserveLength(msg)
		msg = append(msg, id...)
		msg = append(msg, 0)
		for _, d := range p.seqs[id] {
			msg = append(msg, d...)
		}
		msg = bsoncore.UpdateLength(msg, seq, int32(len(msg[seq:])))
	}
	return bsoncore.UpdateLength(msg, idx, int32(len(msg[idx:])))
}

// updateSplit is an update command cut into commands of at most
// maxUpdateStatements statements each.
type updateSplit struct {
	requestID int32 // the whole command's
	chunks    [][]byte
	offsets   []int // index in the whole command of each chunk's first statement
	ordered   bool
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
	if !ok || p.flags&wiremessage.MoreToCome != 0 || len(p.seqIDs) != 1 || p.seqIDs[0] != "updates" ||
		len(p.seqs["updates"]) <= max {
		return nil
	}
	all := p.seqs["updates"]
	sp := &updateSplit{requestID: p.requestID, ordered: true}
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
