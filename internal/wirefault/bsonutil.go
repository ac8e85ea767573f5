package wirefault

import (
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Helpers for rules. None modifies its argument: rules share documents with
// the rules before them.

// commandName is the first key of cmd.
func commandName(cmd bson.D) string {
	if len(cmd) == 0 {
		return ""
	}
	return cmd[0].Key
}

// isHello reports whether cmd is a handshake or heartbeat.
func isHello(cmd bson.D) bool {
	switch commandName(cmd) {
	case "hello", "isMaster", "ismaster":
		return true
	}
	return false
}

// lookup returns the value of key in d.
func lookup(d bson.D, key string) (any, bool) {
	for _, e := range d {
		if e.Key == key {
			return e.Value, true
		}
	}
	return nil, false
}

// lookupDoc returns the document at key in d.
func lookupDoc(d bson.D, key string) (bson.D, bool) {
	v, _ := lookup(d, key)
	doc, ok := v.(bson.D)
	return doc, ok
}

// without returns d without keys, or d itself if it has none of them.
func without(d bson.D, keys ...string) bson.D {
	drop := func(e bson.E) bool { return slices.Contains(keys, e.Key) }
	if !slices.ContainsFunc(d, drop) {
		return d
	}
	return slices.DeleteFunc(slices.Clone(d), drop)
}

// with returns a copy of d with key set to v, in place if d has key.
func with(d bson.D, key string, v any) bson.D {
	out := slices.Clone(d)
	for i := range out {
		if out[i].Key == key {
			out[i].Value = v
			return out
		}
	}
	return append(out, bson.E{Key: key, Value: v})
}

// isOK reports whether a reply says ok: 1.
func isOK(reply bson.D) bool {
	n, ok := toInt64(lookupValue(reply, "ok"))
	return ok && n == 1
}

func lookupValue(d bson.D, key string) any {
	v, _ := lookup(d, key)
	return v
}

// toInt64 converts a BSON number.
func toInt64(v any) (int64, bool) {
	switch n := v.(type) {
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case float64:
		return int64(n), float64(int64(n)) == n
	}
	return 0, false
}

// addInt adds n to the BSON number v and keeps its type.
func addInt(v any, n int) (any, bool) {
	switch x := v.(type) {
	case int32:
		return x + int32(n), true
	case int64:
		return x + int64(n), true
	case float64:
		return x + float64(n), true
	}
	return v, false
}

// isTrue reports whether v is BSON true or a non-zero number.
func isTrue(v any) bool {
	if b, ok := v.(bool); ok {
		return b
	}
	n, ok := toInt64(v)
	return ok && n != 0
}
