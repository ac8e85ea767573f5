package wirefault

import (
	"bytes"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/wiremessage"
)

func mustMarshal(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := bson.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// insertMsg builds an insert as the driver sends it: a body, a "documents"
// sequence, and optionally a checksum.
func insertMsg(tb testing.TB, checksum bool) []byte {
	tb.Helper()
	var flags wiremessage.MsgFlag
	if checksum {
		flags |= wiremessage.ChecksumPresent
	}
	idx, dst := wiremessage.AppendHeaderStart(nil, 7, 0, wiremessage.OpMsg)
	dst = wiremessage.AppendMsgFlags(dst, flags)
	dst = wiremessage.AppendMsgSectionType(dst, wiremessage.SingleDocument)
	dst = append(dst, mustMarshal(tb, bson.D{{Key: "insert", Value: "c"}, {Key: "$db", Value: "d"}})...)
	dst = wiremessage.AppendMsgSectionType(dst, wiremessage.DocumentSequence)
	seq, dst := bsoncore.ReserveLength(dst)
	dst = append(dst, "documents\x00"...)
	dst = append(dst, mustMarshal(tb, bson.D{{Key: "_id", Value: int32(1)}})...)
	dst = append(dst, mustMarshal(tb, bson.D{{Key: "_id", Value: int32(2)}})...)
	dst = bsoncore.UpdateLength(dst, seq, int32(len(dst[seq:])))
	if checksum {
		dst = append(dst, 1, 2, 3, 4) // not checked by the proxy
	}
	return bsoncore.UpdateLength(dst, idx, int32(len(dst[idx:])))
}

func TestParseFoldsSequences(t *testing.T) {
	for _, checksum := range []bool{false, true} {
		m, err := parse(insertMsg(t, checksum))
		if err != nil {
			t.Fatal(err)
		}
		var got bson.D
		if err := bson.Unmarshal(m.doc, &got); err != nil {
			t.Fatal(err)
		}
		want := bson.D{{Key: "insert", Value: "c"}, {Key: "$db", Value: "d"}, {Key: "documents", Value: bson.A{
			bson.D{{Key: "_id", Value: int32(1)}}, bson.D{{Key: "_id", Value: int32(2)}},
		}}}
		if !bytes.Equal(mustMarshal(t, got), mustMarshal(t, want)) {
			t.Errorf("checksum=%v: folded %v, want %v", checksum, got, want)
		}

		// Rebuilt: one body section, no checksum, same ids.
		re, err := parse(m.withDoc(m.doc))
		if err != nil {
			t.Fatal(err)
		}
		if re.requestID != 7 || re.flags != 0 || !bytes.Equal(re.doc, m.doc) {
			t.Errorf("checksum=%v: rebuilt id %d flags %v doc %v", checksum, re.requestID, re.flags, re.doc)
		}
	}
}

// helloQuery builds the driver's legacy handshake.
func helloQuery(tb testing.TB) []byte {
	tb.Helper()
	idx, dst := wiremessage.AppendHeaderStart(nil, 9, 0, wiremessage.OpQuery)
	dst = wiremessage.AppendQueryFlags(dst, 0)
	dst = wiremessage.AppendQueryFullCollectionName(dst, "admin.$cmd")
	dst = wiremessage.AppendQueryNumberToSkip(dst, 0)
	dst = wiremessage.AppendQueryNumberToReturn(dst, -1)
	dst = append(dst, mustMarshal(tb, bson.D{{Key: "isMaster", Value: int32(1)}})...)
	return bsoncore.UpdateLength(dst, idx, int32(len(dst[idx:])))
}

func TestParseQueryAndReply(t *testing.T) {
	q, err := parse(helloQuery(t))
	if err != nil {
		t.Fatal(err)
	}
	hello := mustMarshal(t, bson.D{{Key: "hello", Value: int32(1)}})
	re, err := parse(q.withDoc(hello))
	if err != nil || re.op != wiremessage.OpQuery || !bytes.Equal(re.doc, hello) || re.requestID != 9 {
		t.Fatalf("rewritten query: %+v, %v", re, err)
	}

	ok := mustMarshal(t, bson.D{{Key: "ok", Value: 1.0}})
	r, err := parse(q.replyTo(3, ok))
	if err != nil || r.op != wiremessage.OpReply || r.responseTo != 9 || !bytes.Equal(r.doc, ok) {
		t.Fatalf("reply: %+v, %v", r, err)
	}
	okInt := mustMarshal(t, bson.D{{Key: "ok", Value: int32(1)}})
	r2, err := parse(r.withDoc(okInt))
	if err != nil || !bytes.Equal(r2.doc, okInt) || r2.responseTo != 9 {
		t.Fatalf("rewritten reply: %+v, %v", r2, err)
	}
}

func TestParseRejectsMalformed(t *testing.T) {
	good := insertMsg(t, false)
	tests := map[string][]byte{
		"short":           good[:10],
		"length mismatch": append(bytes.Clone(good), 0),
		"truncated":       bsoncore.UpdateLength(bytes.Clone(good[:len(good)-3]), 0, int32(len(good)-3)),
		"no body": func() []byte {
			idx, dst := wiremessage.AppendHeaderStart(nil, 1, 0, wiremessage.OpMsg)
			dst = wiremessage.AppendMsgFlags(dst, 0)
			return bsoncore.UpdateLength(dst, idx, int32(len(dst)))
		}(),
	}
	for name, raw := range tests {
		if _, err := parse(raw); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(insertMsg(f, false))
	f.Add(insertMsg(f, true))
	f.Add(helloQuery(f))
	m, _ := parse(insertMsg(f, false))
	f.Add(m.replyTo(1, mustMarshal(f, bson.D{{Key: "ok", Value: 1.0}})))
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := parse(raw)
		if err != nil || m.doc == nil {
			return
		}
		if m.op != wiremessage.OpMsg && m.op != wiremessage.OpQuery && m.op != wiremessage.OpReply {
			t.Fatalf("doc for opcode %v", m.op)
		}
		if _, err := parse(m.withDoc(m.doc)); err != nil {
			t.Fatalf("rebuilt message does not parse: %v", err)
		}
	})
}
