package simdb

import (
	"bytes"
	"math"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Documents are bson.D, values what bson.Unmarshal puts in one: int32,
// int64, float64, string, bool, nil, bson.D, bson.A, bson.DateTime,
// bson.ObjectID, bson.Timestamp, bson.Binary and the rarer kinds, which
// compare by their canonical type only.

// missing stands for a field a document does not have.
type missingT struct{}

var missing = missingT{}

// typeOrder is MongoDB's comparison order of BSON types: values of
// different types compare by it, numbers as one.
func typeOrder(v any) int {
	switch v.(type) {
	case missingT:
		return 0
	case bson.MinKey:
		return 1
	case nil, bson.Null, bson.Undefined:
		return 2
	case int32, int64, float64, bson.Decimal128:
		return 3
	case string, bson.Symbol:
		return 4
	case bson.D, bson.M:
		return 5
	case bson.A:
		return 6
	case bson.Binary:
		return 7
	case bson.ObjectID:
		return 8
	case bool:
		return 9
	case bson.DateTime:
		return 10
	case bson.Timestamp:
		return 11
	case bson.Regex:
		return 12
	case bson.MaxKey:
		return 100
	}
	return 50
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int32:
		return float64(n), true
	case int64:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

// compare orders a and b as MongoDB sorts them: -1, 0 or 1.
func compare(a, b any) int {
	ta, tb := typeOrder(a), typeOrder(b)
	if ta != tb {
		return sign(ta - tb)
	}
	switch x := a.(type) {
	case int32, int64, float64:
		// Exact for int64s beyond 2^53 too.
		if xi, ok := asInt64(a); ok {
			if yi, ok := asInt64(b); ok {
				return cmpInt(xi, yi)
			}
		}
		fa, _ := number(a)
		fb, _ := number(b)
		switch {
		case math.IsNaN(fa) && math.IsNaN(fb):
			return 0
		case math.IsNaN(fa):
			return -1
		case math.IsNaN(fb):
			return 1
		case fa < fb:
			return -1
		case fa > fb:
			return 1
		}
		return 0
	case string:
		return strings.Compare(x, asString(b))
	case bson.Symbol:
		return strings.Compare(string(x), asString(b))
	case bson.D:
		return compareDocs(x, asDoc(b))
	case bson.A:
		y := b.(bson.A)
		for i := 0; i < len(x) && i < len(y); i++ {
			if c := compare(x[i], y[i]); c != 0 {
				return c
			}
		}
		return sign(len(x) - len(y))
	case bson.Binary:
		y := b.(bson.Binary)
		if len(x.Data) != len(y.Data) {
			return sign(len(x.Data) - len(y.Data))
		}
		if x.Subtype != y.Subtype {
			return sign(int(x.Subtype) - int(y.Subtype))
		}
		return bytes.Compare(x.Data, y.Data)
	case bson.ObjectID:
		y := b.(bson.ObjectID)
		return bytes.Compare(x[:], y[:])
	case bool:
		y := b.(bool)
		switch {
		case x == y:
			return 0
		case !x:
			return -1
		}
		return 1
	case bson.DateTime:
		return cmpInt(int64(x), int64(b.(bson.DateTime)))
	case bson.Timestamp:
		y := b.(bson.Timestamp)
		if x.T != y.T {
			return cmpInt(int64(x.T), int64(y.T))
		}
		return cmpInt(int64(x.I), int64(y.I))
	}
	return 0
}

func asInt64(v any) (int64, bool) {
	switch n := v.(type) {
	case int32:
		return int64(n), true
	case int64:
		return n, true
	}
	return 0, false
}

func asString(v any) string {
	switch s := v.(type) {
	case string:
		return s
	case bson.Symbol:
		return string(s)
	}
	return ""
}

func asDoc(v any) bson.D {
	switch d := v.(type) {
	case bson.D:
		return d
	case bson.M:
		out := make(bson.D, 0, len(d))
		for k, v := range d {
			out = append(out, bson.E{Key: k, Value: v})
		}
		return out
	}
	return nil
}

// compareDocs compares field by field, names then values, as MongoDB
// compares embedded documents.
func compareDocs(a, b bson.D) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if ta, tb := typeOrder(a[i].Value), typeOrder(b[i].Value); ta != tb {
			return sign(ta - tb)
		}
		if c := strings.Compare(a[i].Key, b[i].Key); c != 0 {
			return c
		}
		if c := compare(a[i].Value, b[i].Value); c != 0 {
			return c
		}
	}
	return sign(len(a) - len(b))
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

// equal is MongoDB's equality of values: numbers by value, documents field
// by field in order.
func equal(a, b any) bool {
	return typeOrder(a) == typeOrder(b) && compare(a, b) == 0
}

// lookup returns the value at a dotted path of doc, missing if there is
// none. Arrays on the way are not traversed (this module's documents have
// none where it queries).
func lookup(doc bson.D, path string) any {
	head, rest, dotted := strings.Cut(path, ".")
	for _, e := range doc {
		if e.Key != head {
			continue
		}
		if !dotted {
			return e.Value
		}
		if sub, ok := e.Value.(bson.D); ok {
			return lookup(sub, rest)
		}
		return missing
	}
	return missing
}

// clone copies v deeply, so that stored documents share nothing with
// commands or replies.
func clone(v any) any {
	switch x := v.(type) {
	case bson.D:
		out := make(bson.D, len(x))
		for i, e := range x {
			out[i] = bson.E{Key: e.Key, Value: clone(e.Value)}
		}
		return out
	case bson.A:
		out := make(bson.A, len(x))
		for i, e := range x {
			out[i] = clone(e)
		}
		return out
	case bson.Binary:
		return bson.Binary{Subtype: x.Subtype, Data: bytes.Clone(x.Data)}
	}
	return v
}

func cloneDoc(d bson.D) bson.D { return clone(d).(bson.D) }
