package wirefault

import (
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// NoTTLConversion plays a server whose collMod can change the
// expireAfterSeconds of a TTL index but cannot give one to a plain index:
// MongoDB before 5.1 (4.4 and 5.0), and FerretDB 2.x's DocumentDB. Such a
// collMod fails with
//
//	{ok: 0, code: 72, codeName: "InvalidOptions",
//	 errmsg: "no expireAfterSeconds field to update"}
//
// The rule cannot see the server's indexes: it learns which are plain from
// the listIndexes replies it passes (their first batch), and a collMod of
// an index it has not seen listed goes on to the server.
func NoTTLConversion() Rule {
	r := &noTTLConversion{plain: make(map[indexName]bool)}
	return RuleFuncs{OnRequest: r.request, OnReply: r.reply}
}

type indexName struct{ ns, name string }

type noTTLConversion struct {
	mu    sync.Mutex
	plain map[indexName]bool // by what the last listing of the index said
}

func (r *noTTLConversion) request(cmd bson.D) (out, reply bson.D) {
	if commandName(cmd) != "collMod" {
		return nil, nil
	}
	index, _ := lookupDoc(cmd, "index")
	name, _ := lookupValue(index, "name").(string)
	if _, ok := lookup(index, "expireAfterSeconds"); !ok || name == "" {
		return nil, nil
	}
	r.mu.Lock()
	plain := r.plain[indexName{namespace(cmd), name}]
	r.mu.Unlock()
	if !plain {
		return nil, nil
	}
	return nil, bson.D{
		{Key: "ok", Value: 0.0},
		{Key: "errmsg", Value: "no expireAfterSeconds field to update"},
		{Key: "code", Value: int32(72)},
		{Key: "codeName", Value: "InvalidOptions"},
	}
}

func (r *noTTLConversion) reply(cmd, reply bson.D) bson.D {
	if commandName(cmd) != "listIndexes" || !isOK(reply) {
		return nil
	}
	cursor, _ := lookupDoc(reply, "cursor")
	batch, _ := lookupValue(cursor, "firstBatch").(bson.A)
	ns := namespace(cmd)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ix := range batch {
		spec, _ := ix.(bson.D)
		if name, ok := lookupValue(spec, "name").(string); ok {
			_, ttl := lookup(spec, "expireAfterSeconds")
			r.plain[indexName{ns, name}] = !ttl
		}
	}
	return nil
}

// namespace is "db.collection" of a command on a collection.
func namespace(cmd bson.D) string {
	db, _ := lookupValue(cmd, "$db").(string)
	coll, _ := lookupValue(cmd, commandName(cmd)).(string)
	return db + "." + coll
}
