package simdb

import (
	"bytes"
	"encoding/binary"
	"math"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// The server's side of the wire: a command's bytes to a bson.D and a
// reply's bson.D to bytes, for every command the simulation sends. They
// give what bson.Unmarshal and bson.Marshal give (TestCodecMatchesBSON),
// without their reflection: that took a quarter of a simulated run's
// CPU time. A document with a type they do not know goes to bson's own.

// decoder reads documents, with a table of the strings it read (keys,
// names, ids), which commands repeat: each is allocated once. One
// decoder is used by one goroutine at a time; a nil one keeps no table.
type decoder struct {
	strs map[string]string
}

// Bounds of a decoder's table.
const (
	maxInterned    = 4096
	maxInternedLen = 64
)

func newDecoder() *decoder { return &decoder{strs: map[string]string{}} }

// decode is bson.Unmarshal of doc into a bson.D.
func (d *decoder) decode(doc []byte) (bson.D, error) {
	if out, ok := d.readDoc(doc); ok {
		return out, nil
	}
	var out bson.D
	err := bson.Unmarshal(doc, &out)
	return out, err
}

// str is b as a string, from the table if it is there.
func (d *decoder) str(b []byte) string {
	if d == nil {
		return string(b)
	}
	if s, ok := d.strs[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(b) <= maxInternedLen && len(d.strs) < maxInterned {
		d.strs[s] = s
	}
	return s
}

// readDoc reads a document, false if it is malformed or holds a type
// readValue does not know.
func (d *decoder) readDoc(doc []byte) (bson.D, bool) {
	body, ok := docBody(doc)
	if !ok {
		return nil, false
	}
	out := make(bson.D, 0, countElems(body))
	for len(body) > 0 {
		t, key, rest, ok := readHeader(body)
		if !ok {
			return nil, false
		}
		v, rest, ok := d.readValue(t, rest)
		if !ok {
			return nil, false
		}
		out = append(out, bson.E{Key: d.str(key), Value: v})
		body = rest
	}
	return out, true
}

// readArray reads an array as a bson.A.
func (d *decoder) readArray(arr []byte) (bson.A, bool) {
	body, ok := docBody(arr)
	if !ok {
		return nil, false
	}
	out := make(bson.A, 0, countElems(body))
	for len(body) > 0 {
		t, _, rest, ok := readHeader(body)
		if !ok {
			return nil, false
		}
		v, rest, ok := d.readValue(t, rest)
		if !ok {
			return nil, false
		}
		out = append(out, v)
		body = rest
	}
	return out, true
}

// readHeader reads an element's type and key.
func readHeader(src []byte) (bsoncore.Type, []byte, []byte, bool) {
	if len(src) < 2 {
		return 0, nil, nil, false
	}
	i := bytes.IndexByte(src[1:], 0)
	if i < 0 {
		return 0, nil, nil, false
	}
	return bsoncore.Type(src[0]), src[1 : 1+i], src[2+i:], true
}

// docBody is a document's elements: less its length and its final null,
// which it checks.
func docBody(doc []byte) ([]byte, bool) {
	if len(doc) < 5 {
		return nil, false
	}
	n := int(int32(binary.LittleEndian.Uint32(doc)))
	if n != len(doc) || doc[n-1] != 0 {
		return nil, false
	}
	return doc[4 : n-1], true
}

// countElems is how many elements a document's body has, at most: a
// capacity for its slice (a malformed body fails in the read).
func countElems(body []byte) int {
	n := 0
	for len(body) > 0 {
		t, _, rest, ok := readHeader(body)
		if !ok {
			return n
		}
		l, ok := valueLen(t, rest)
		if !ok || l < 0 || l > len(rest) {
			return n
		}
		body = rest[l:]
		n++
	}
	return n
}

// valueLen is the length of a value of type t at the start of src.
func valueLen(t bsoncore.Type, src []byte) (int, bool) {
	switch t {
	case bsoncore.TypeDouble, bsoncore.TypeDateTime, bsoncore.TypeInt64, bsoncore.TypeTimestamp:
		return 8, true
	case bsoncore.TypeInt32:
		return 4, true
	case bsoncore.TypeBoolean:
		return 1, true
	case bsoncore.TypeNull:
		return 0, true
	case bsoncore.TypeObjectID:
		return 12, true
	case bsoncore.TypeString:
		if len(src) < 4 {
			return 0, false
		}
		return 4 + int(int32(binary.LittleEndian.Uint32(src))), true
	case bsoncore.TypeEmbeddedDocument, bsoncore.TypeArray:
		if len(src) < 4 {
			return 0, false
		}
		return int(int32(binary.LittleEndian.Uint32(src))), true
	case bsoncore.TypeBinary:
		if len(src) < 4 {
			return 0, false
		}
		return 5 + int(int32(binary.LittleEndian.Uint32(src))), true
	}
	return 0, false
}

// readValue reads a value of type t as bson.Unmarshal gives it inside a
// bson.D; false for a type it does not know (bson's own reads those).
func (d *decoder) readValue(t bsoncore.Type, src []byte) (any, []byte, bool) {
	switch t {
	case bsoncore.TypeDouble:
		f, rest, ok := bsoncore.ReadDouble(src)
		return f, rest, ok
	case bsoncore.TypeString:
		return d.readString(src)
	case bsoncore.TypeEmbeddedDocument:
		raw, rest, ok := bsoncore.ReadDocument(src)
		if !ok {
			return nil, nil, false
		}
		out, ok := d.readDoc(raw)
		return out, rest, ok
	case bsoncore.TypeArray:
		raw, rest, ok := bsoncore.ReadArray(src)
		if !ok {
			return nil, nil, false
		}
		a, ok := d.readArray(raw)
		return a, rest, ok
	case bsoncore.TypeBinary:
		sub, data, rest, ok := bsoncore.ReadBinary(src)
		if !ok || sub == bson.TypeBinaryBinaryOld {
			return nil, nil, false
		}
		return bson.Binary{Subtype: sub, Data: append(make([]byte, 0, len(data)), data...)}, rest, true
	case bsoncore.TypeObjectID:
		oid, rest, ok := bsoncore.ReadObjectID(src)
		return bson.ObjectID(oid), rest, ok
	case bsoncore.TypeBoolean:
		b, rest, ok := bsoncore.ReadBoolean(src)
		return b, rest, ok
	case bsoncore.TypeDateTime:
		dt, rest, ok := bsoncore.ReadDateTime(src)
		return bson.DateTime(dt), rest, ok
	case bsoncore.TypeNull:
		return nil, src, true
	case bsoncore.TypeInt32:
		i, rest, ok := bsoncore.ReadInt32(src)
		return i, rest, ok
	case bsoncore.TypeTimestamp:
		ts, ti, rest, ok := bsoncore.ReadTimestamp(src)
		return bson.Timestamp{T: ts, I: ti}, rest, ok
	case bsoncore.TypeInt64:
		i, rest, ok := bsoncore.ReadInt64(src)
		return i, rest, ok
	}
	return nil, nil, false
}

// readString reads a string, and checks its final null as bson does.
func (d *decoder) readString(src []byte) (any, []byte, bool) {
	if len(src) < 4 {
		return nil, nil, false
	}
	n := int(int32(binary.LittleEndian.Uint32(src)))
	if n < 1 || n > len(src)-4 || src[4+n-1] != 0 {
		return nil, nil, false
	}
	return d.str(src[4 : 4+n-1]), src[4+n:], true
}

// encodeDoc is bson.Marshal of d.
func encodeDoc(d bson.D) ([]byte, error) {
	if d == nil {
		return bson.Marshal(d) // an error, as for any nil
	}
	if b, ok := appendDoc(make([]byte, 0, 256), d); ok {
		return b, nil
	}
	return bson.Marshal(d)
}

// appendDoc appends d as a document, false if it holds a type
// appendValue does not know.
func appendDoc(dst []byte, d bson.D) ([]byte, bool) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	for _, e := range d {
		var ok bool
		if dst, ok = appendElem(dst, e.Key, e.Value); !ok {
			return nil, false
		}
	}
	dst = append(dst, 0)
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(dst)-start))
	return dst, true
}

func appendArray(dst []byte, a bson.A) ([]byte, bool) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	var key [20]byte
	for i, v := range a {
		var ok bool
		if dst, ok = appendElem(dst, string(appendIndex(key[:0], i)), v); !ok {
			return nil, false
		}
	}
	dst = append(dst, 0)
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(dst)-start))
	return dst, true
}

func appendIndex(dst []byte, i int) []byte {
	if i < 10 {
		return append(dst, byte('0'+i))
	}
	return append(appendIndex(dst, i/10), byte('0'+i%10))
}

// appendElem appends one element as bson.Marshal does for the value in
// a bson.D (or bson.A); false for a type it does not know, or a key bson
// would refuse.
func appendElem(dst []byte, key string, v any) ([]byte, bool) {
	for i := 0; i < len(key); i++ {
		if key[i] == 0 {
			return nil, false
		}
	}
	header := func(t bsoncore.Type) []byte {
		dst = append(dst, byte(t))
		dst = append(dst, key...)
		return append(dst, 0)
	}
	switch x := v.(type) {
	case nil:
		return header(bsoncore.TypeNull), true
	case bson.D:
		if x == nil {
			return header(bsoncore.TypeNull), true
		}
		return appendDoc(header(bsoncore.TypeEmbeddedDocument), x)
	case bson.A:
		if x == nil {
			return header(bsoncore.TypeNull), true
		}
		return appendArray(header(bsoncore.TypeArray), x)
	case string:
		return bsoncore.AppendString(header(bsoncore.TypeString), x), true
	case float64:
		return binary.LittleEndian.AppendUint64(header(bsoncore.TypeDouble), math.Float64bits(x)), true
	case int32:
		return bsoncore.AppendInt32(header(bsoncore.TypeInt32), x), true
	case int64:
		return bsoncore.AppendInt64(header(bsoncore.TypeInt64), x), true
	case bool:
		return bsoncore.AppendBoolean(header(bsoncore.TypeBoolean), x), true
	case bson.DateTime:
		return bsoncore.AppendDateTime(header(bsoncore.TypeDateTime), int64(x)), true
	case bson.ObjectID:
		return append(header(bsoncore.TypeObjectID), x[:]...), true
	case bson.Binary:
		if x.Subtype == bson.TypeBinaryBinaryOld {
			return nil, false
		}
		return bsoncore.AppendBinary(header(bsoncore.TypeBinary), x.Subtype, x.Data), true
	case bson.Timestamp:
		return bsoncore.AppendTimestamp(header(bsoncore.TypeTimestamp), x.T, x.I), true
	}
	return nil, false
}
