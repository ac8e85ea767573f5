package simdb

import (
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// applyUpdate returns doc changed by update at now (the server's time, for
// $currentDate), and whether anything changed. An update document of
// operators supports $set, $unset, $inc, $max, $min, $currentDate and, when
// inserting, $setOnInsert; one without operators replaces the document but
// its _id. Update pipelines and other operators are errors.
func applyUpdate(doc bson.D, update any, now time.Time, inserting bool) (bson.D, bool, error) {
	u, ok := update.(bson.D)
	if !ok {
		if _, isArr := update.(bson.A); isArr {
			return nil, false, badValue("update pipelines are not simulated")
		}
		return nil, false, badValue("update must be a document")
	}
	if len(u) > 0 && !strings.HasPrefix(u[0].Key, "$") {
		repl := bson.D{{Key: "_id", Value: lookup(doc, "_id")}}
		for _, e := range u {
			if e.Key == "_id" {
				continue
			}
			if strings.HasPrefix(e.Key, "$") {
				return nil, false, badValue("replacement document with operator %s", e.Key)
			}
			repl = append(repl, bson.E{Key: e.Key, Value: clone(e.Value)})
		}
		return repl, !equal(repl, doc), nil
	}
	out := cloneDoc(doc)
	for _, op := range u {
		fields, ok := op.Value.(bson.D)
		if !ok {
			return nil, false, badValue("%s needs a document", op.Key)
		}
		for _, f := range fields {
			if f.Key == "_id" && op.Key != "$setOnInsert" && !(op.Key == "$set" && equal(f.Value, lookup(doc, "_id"))) {
				return nil, false, &cmdError{Code: 66, CodeName: "ImmutableField", Msg: "_id is immutable"}
			}
			var err error
			switch op.Key {
			case "$set":
				out = setPath(out, f.Key, clone(f.Value))
			case "$setOnInsert":
				if inserting {
					out = setPath(out, f.Key, clone(f.Value))
				}
			case "$unset":
				out = unsetPath(out, f.Key)
			case "$inc":
				out, err = incPath(out, f.Key, f.Value)
			case "$max", "$min":
				cur := lookup(out, f.Key)
				c := compare(f.Value, cur)
				if cur == missing || op.Key == "$max" && c > 0 || op.Key == "$min" && c < 0 {
					out = setPath(out, f.Key, clone(f.Value))
				}
			case "$currentDate":
				var v any = bson.NewDateTimeFromTime(now)
				if spec, ok := f.Value.(bson.D); ok && len(spec) == 1 && spec[0].Value == "timestamp" {
					v = bson.Timestamp{T: uint32(now.Unix()), I: 1}
				}
				out = setPath(out, f.Key, v)
			default:
				return nil, false, badValue("unknown update operator: %s", op.Key)
			}
			if err != nil {
				return nil, false, err
			}
		}
	}
	return out, !equal(out, doc), nil
}

// setPath sets a dotted path in d, making the documents on the way.
func setPath(d bson.D, path string, v any) bson.D {
	head, rest, dotted := strings.Cut(path, ".")
	for i, e := range d {
		if e.Key != head {
			continue
		}
		if !dotted {
			d[i].Value = v
			return d
		}
		sub, _ := e.Value.(bson.D)
		d[i].Value = setPath(sub, rest, v)
		return d
	}
	if !dotted {
		return append(d, bson.E{Key: head, Value: v})
	}
	return append(d, bson.E{Key: head, Value: setPath(nil, rest, v)})
}

func unsetPath(d bson.D, path string) bson.D {
	head, rest, dotted := strings.Cut(path, ".")
	for i, e := range d {
		if e.Key != head {
			continue
		}
		if !dotted {
			return append(d[:i:i], d[i+1:]...)
		}
		if sub, ok := e.Value.(bson.D); ok {
			d[i].Value = unsetPath(sub, rest)
		}
		return d
	}
	return d
}

func incPath(d bson.D, path string, by any) (bson.D, error) {
	cur := lookup(d, path)
	if cur == missing {
		return setPath(d, path, by), nil
	}
	a, aok := asInt64(cur)
	b, bok := asInt64(by)
	if aok && bok {
		_, a32 := cur.(int32)
		_, b32 := by.(int32)
		sum := a + b
		if a32 && b32 && sum == int64(int32(sum)) {
			return setPath(d, path, int32(sum)), nil
		}
		return setPath(d, path, sum), nil
	}
	fa, ok1 := number(cur)
	fb, ok2 := number(by)
	if !ok1 || !ok2 {
		return nil, &cmdError{Code: 14, CodeName: "TypeMismatch", Msg: "cannot $inc a non-numeric field " + path}
	}
	return setPath(d, path, fa+fb), nil
}

// upsertBase is the document an upsert inserts before its update: the
// equality conditions of filter (top level, and inside $and), as MongoDB
// takes them.
func upsertBase(filter bson.D) bson.D {
	var out bson.D
	for _, e := range filter {
		switch {
		case e.Key == "$and":
			arr, _ := e.Value.(bson.A)
			for _, c := range arr {
				if sub, ok := c.(bson.D); ok {
					for _, f := range upsertBase(sub) {
						out = setPath(out, f.Key, f.Value)
					}
				}
			}
		case strings.HasPrefix(e.Key, "$"):
		default:
			if ops, ok := operators(e.Value); ok {
				if len(ops) == 1 && ops[0].Key == "$eq" {
					out = setPath(out, e.Key, clone(ops[0].Value))
				}
				continue
			}
			out = setPath(out, e.Key, clone(e.Value))
		}
	}
	return out
}
