package embedded

import (
	"bytes"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/mongoutil"
)

// resolveDeadlines returns req, a find, findAndModify or update command,
// with the deadlines of its filters (mongoutil.Deadline) evaluated at now,
// FerretDB's clock (it runs on this host): FerretDB 1.24 knows no $$NOW.
// The proxy calls it under cmd, right before it sends req, so that no
// command comes between the evaluation and the write, as none comes
// within one write on MongoDB. nil if req has no deadline, or is not a
// command it reads (then FerretDB answers it as it is).
func resolveDeadlines(req []byte, now time.Time) []byte {
	if !bytes.Contains(req, []byte("$$NOW")) {
		return nil
	}
	p, ok := parseOpMsg(req)
	if !ok {
		return nil
	}
	var body bson.D
	if bson.Unmarshal(p.body, &body) != nil || len(body) == 0 {
		return nil
	}
	changed := false
	resolve := func(v any) any {
		f, isDoc := v.(bson.D)
		if !isDoc {
			return v
		}
		out, ok := mongoutil.ResolveDeadlines(f, now)
		changed = changed || ok
		return out
	}
	switch body[0].Key {
	case "find":
		setField(body, "filter", resolve)
	case "findAndModify", "findandmodify":
		setField(body, "query", resolve)
	case "update":
		stmt := func(v any) any {
			s, isDoc := v.(bson.D)
			if isDoc {
				setField(s, "q", resolve)
			}
			return s
		}
		setField(body, "updates", func(v any) any {
			if a, isArr := v.(bson.A); isArr {
				for i := range a {
					a[i] = stmt(a[i])
				}
			}
			return v
		})
		for i, raw := range p.seqs["updates"] {
			var s bson.D
			if bson.Unmarshal(raw, &s) != nil {
				return nil
			}
			setField(s, "q", resolve)
			b, err := bson.Marshal(s)
			if err != nil {
				return nil
			}
			p.seqs["updates"][i] = b
		}
	default:
		return nil
	}
	if !changed {
		return nil
	}
	b, err := bson.Marshal(body)
	if err != nil {
		return nil
	}
	p.body = b
	return p.build(0)
}

// setField sets d's field key, if it has one, to f of its value.
func setField(d bson.D, key string, f func(any) any) {
	for i := range d {
		if d[i].Key == key {
			d[i].Value = f(d[i].Value)
		}
	}
}
