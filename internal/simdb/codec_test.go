package simdb

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// codecCorpus are documents of every type the codec reads and writes
// itself, and of some it leaves to bson's own, in the corners where bson
// might differ: empty and nil documents, arrays and binaries, nesting.
func codecCorpus() []bson.D {
	oid := bson.ObjectID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	return []bson.D{
		nil,
		{},
		{{Key: "ok", Value: 1.0}},
		{{Key: "find", Value: "locks"}, {Key: "filter", Value: bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{"a", "b"}}}}}},
			{Key: "limit", Value: int64(2)}, {Key: "$db", Value: "app"}, {Key: "lsid", Value: bson.D{{Key: "id", Value: bson.Binary{Subtype: 4, Data: []byte("0123456789abcdef")}}}}},
		{{Key: "a", Value: int32(-7)}, {Key: "b", Value: int64(1 << 40)}, {Key: "c", Value: true}, {Key: "d", Value: false},
			{Key: "e", Value: bson.DateTime(1764590400000)}, {Key: "f", Value: nil}, {Key: "g", Value: oid},
			{Key: "h", Value: bson.Timestamp{T: 7, I: 9}}, {Key: "i", Value: -0.5}},
		{{Key: "empty doc", Value: bson.D{}}, {Key: "empty array", Value: bson.A{}}, {Key: "empty binary", Value: bson.Binary{}},
			{Key: "empty string", Value: ""}, {Key: "", Value: "empty key"}},
		{{Key: "nil doc", Value: bson.D(nil)}, {Key: "nil array", Value: bson.A(nil)}},
		{{Key: "nested", Value: bson.A{bson.A{int32(1), bson.D{{Key: "x", Value: bson.A{}}}}, bson.D{}, nil, "s"}}},
		{{Key: "long array", Value: func() bson.A {
			a := bson.A{}
			for i := range 123 {
				a = append(a, int32(i))
			}
			return a
		}()}},
		// Left to bson's own.
		{{Key: "int", Value: 5}, {Key: "big int", Value: 1 << 40}},
		{{Key: "regex", Value: bson.Regex{Pattern: "^a", Options: "i"}}, {Key: "minKey", Value: bson.MinKey{}}},
		{{Key: "old binary", Value: bson.Binary{Subtype: bson.TypeBinaryBinaryOld, Data: []byte("xy")}}},
		{{Key: "decimal", Value: bson.NewDecimal128(1, 2)}, {Key: "undefined", Value: bson.Undefined{}}},
		{{Key: "strings", Value: []string{"a"}}, {Key: "map", Value: map[string]any{"k": int32(1)}}},
	}
}

// randomDoc is a document of the types the codec knows, drawn from rng.
func randomDoc(rng *rand.Rand, depth int) bson.D {
	d := bson.D{}
	for i := range rng.IntN(6) {
		d = append(d, bson.E{Key: string(rune('a' + i)), Value: randomValue(rng, depth)})
	}
	return d
}

func randomValue(rng *rand.Rand, depth int) any {
	switch n := rng.IntN(13); {
	case n == 0 && depth > 0:
		return randomDoc(rng, depth-1)
	case n == 1 && depth > 0:
		a := bson.A{}
		for range rng.IntN(12) {
			a = append(a, randomValue(rng, depth-1))
		}
		return a
	case n == 2:
		return bson.Binary{Subtype: byte(rng.IntN(5)), Data: []byte("data")[:rng.IntN(5)]}
	case n == 3:
		return bson.ObjectID{byte(rng.IntN(256))}
	case n == 4:
		return rng.IntN(2) == 0
	case n == 5:
		return bson.DateTime(rng.Int64())
	case n == 6:
		return nil
	case n == 7:
		return int32(rng.Uint32())
	case n == 8:
		return rng.Int64() - rng.Int64()
	case n == 9:
		return bson.Timestamp{T: rng.Uint32(), I: rng.Uint32()}
	case n == 10:
		return rng.NormFloat64()
	}
	return "s" + string(rune('a'+rng.IntN(26)))
}

// TestCodecMatchesBSON: the server's codec writes the bytes bson.Marshal
// writes, and reads back what bson.Unmarshal reads.
func TestCodecMatchesBSON(t *testing.T) {
	docs := codecCorpus()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		docs = append(docs, randomDoc(rng, 3))
	}
	for _, d := range docs {
		want, wantErr := bson.Marshal(d)
		got, gotErr := encodeDoc(d)
		if !bytes.Equal(got, want) || (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("encodeDoc(%v) = %x, %v; bson.Marshal: %x, %v", d, got, gotErr, want, wantErr)
		}
		if wantErr != nil {
			continue
		}
		checkDecode(t, want)
	}
}

// checkDecode fails unless a decoder reads raw as bson.Unmarshal does.
func checkDecode(t *testing.T, raw []byte) {
	t.Helper()
	var want bson.D
	wantErr := bson.Unmarshal(raw, &want)
	dec := newDecoder()
	for _, d := range []*decoder{nil, dec, dec} { // without a table, with one, with its strings in it
		got, gotErr := d.decode(raw)
		if (gotErr == nil) != (wantErr == nil) || wantErr == nil && !same(got, want) {
			t.Fatalf("decode(%x) = %#v, %v; bson.Unmarshal: %#v, %v", raw, got, gotErr, want, wantErr)
		}
	}
}

// same is reflect.DeepEqual, but for a float's NaN, which equals the
// same NaN.
func same(a, b any) bool {
	switch x := a.(type) {
	case bson.D:
		y, ok := b.(bson.D)
		if !ok || len(x) != len(y) || (x == nil) != (y == nil) {
			return false
		}
		for i := range x {
			if x[i].Key != y[i].Key || !same(x[i].Value, y[i].Value) {
				return false
			}
		}
		return true
	case bson.A:
		y, ok := b.(bson.A)
		if !ok || len(x) != len(y) || (x == nil) != (y == nil) {
			return false
		}
		for i := range x {
			if !same(x[i], y[i]) {
				return false
			}
		}
		return true
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	}
	return reflect.DeepEqual(a, b)
}

// FuzzDecodeDoc: a decoder reads any bytes as bson.Unmarshal does, or
// fails where it fails.
func FuzzDecodeDoc(f *testing.F) {
	for _, d := range codecCorpus() {
		if raw, err := bson.Marshal(d); err == nil {
			f.Add(raw)
		}
	}
	f.Add([]byte{5, 0, 0, 0, 0})
	f.Add([]byte{6, 0, 0, 0, 0, 0})
	f.Fuzz(checkDecode)
}
