package sim

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// digestWas is digest as it was written first, with hash/fnv: the fates
// of every seed's commands were drawn from its values.
func digestWas(cmd bson.D) uint64 {
	var hash func(v any) uint64
	hash = func(v any) uint64 {
		h := fnv.New64a()
		var buf [8]byte
		put := func(n uint64) {
			binary.LittleEndian.PutUint64(buf[:], n)
			h.Write(buf[:])
		}
		switch x := v.(type) {
		case bson.D:
			for _, e := range x {
				if ignored(e) {
					continue
				}
				h.Write([]byte(e.Key))
				put(hash(e.Value))
			}
		case bson.A:
			sums := make([]uint64, len(x))
			for i, e := range x {
				sums[i] = hash(e)
			}
			slices.Sort(sums)
			for _, n := range sums {
				put(n)
			}
		case bson.ObjectID, bson.Binary:
		case string:
			h.Write([]byte(x))
		case int32:
			put(uint64(x))
		case int64:
			put(uint64(x))
		case bool:
			if x {
				put(1)
			}
		case bson.DateTime:
			put(uint64(x))
		case float64:
			put(math.Float64bits(x))
		default:
			fmt.Fprint(h, v)
		}
		return h.Sum64()
	}
	return hash(cmd)
}

// TestDigestUnchanged: digest gives the values it gave, which the fates
// of the default seeds' commands were drawn from.
func TestDigestUnchanged(t *testing.T) {
	cmd := bson.D{{Key: "findAndModify", Value: "locks"}, {Key: "query", Value: bson.D{{Key: "_id", Value: "leader"}}},
		{Key: "update", Value: bson.A{bson.D{{Key: "$set", Value: bson.D{{Key: "kid", Value: "k1-1-0"}, {Key: "n", Value: int32(3)}}}}}},
		{Key: "lsid", Value: bson.D{{Key: "id", Value: bson.Binary{Subtype: 4, Data: []byte("x")}}}}, {Key: "$db", Value: "app"}}
	if got, want := digest(cmd), digestWas(cmd); got != want {
		t.Fatalf("digest %016x, was %016x", got, want)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 3000 {
		d := randomCommand(rng, 3)
		if got, want := digest(d), digestWas(d); got != want {
			t.Fatalf("digest(%v) = %016x, was %016x", d, got, want)
		}
	}
}

func randomCommand(rng *rand.Rand, depth int) bson.D {
	keys := []string{"find", "_id", "kid", "$set", "lsid", "rn", "tok", "maxTimeMS", "", "ordered"}
	d := bson.D{}
	for range rng.IntN(6) {
		d = append(d, bson.E{Key: keys[rng.IntN(len(keys))], Value: randomCommandValue(rng, depth)})
	}
	return d
}

func randomCommandValue(rng *rand.Rand, depth int) any {
	switch n := rng.IntN(14); {
	case n == 0 && depth > 0:
		return randomCommand(rng, depth-1)
	case n == 1 && depth > 0:
		a := bson.A{}
		for range rng.IntN(20) {
			a = append(a, randomCommandValue(rng, depth-1))
		}
		return a
	case n == 2:
		return bson.Binary{Subtype: 4, Data: []byte("data")}
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
	case n == 11:
		return rng.IntN(100) // a type digest prints
	}
	return "s" + string(rune('a'+rng.IntN(26)))
}

// TestNamesJob: namesJob is x == j || strings.HasSuffix(x, "/"+j) ||
// strings.HasPrefix(x, j+"@").
func TestNamesJob(t *testing.T) {
	for _, x := range []string{"", "job1", "job10", "mongolock.jobs/job1", "/job1", "xjob1", "job1@", "job1@2026", "job1x@",
		"@job1", "job", "ob1", "job1/", "a/job1@b", "job11"} {
		for _, j := range []string{"job1", "job11", ""} {
			want := x == j || strings.HasSuffix(x, "/"+j) || strings.HasPrefix(x, j+"@")
			if got := namesJob(x, j); got != want {
				t.Errorf("namesJob(%q, %q) = %v, want %v", x, j, got, want)
			}
		}
	}
}
