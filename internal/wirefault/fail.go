package wirefault

import (
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/mongoutil"
)

// Fail answers the commands named command (as the driver spells it) for
// which match returns true (match nil: all) with reply, without sending them
// to the server.
func Fail(command string, match func(cmd bson.D) bool, reply bson.D) Rule {
	return RuleFuncs{OnRequest: func(cmd bson.D) (out, answer bson.D) {
		if commandName(cmd) != command || match != nil && !match(cmd) {
			return nil, nil
		}
		return nil, reply
	}}
}

// HiddenIndexUnsupported plays a server that cannot hide an index (FerretDB
// 2.x, whose DocumentDB refuses it with PostgreSQL's feature_not_supported,
// which reaches the client as an InternalError): a collMod that sets
// index.hidden (to anything) fails with
//
//	{ok: 0, code: 1, codeName: "InternalError",
//	 errmsg: "'collMod.index.hidden' is not supported yet."}
//
// and a createIndexes that builds an index with hidden: true with
//
//	{ok: 0, code: 1, codeName: "InternalError",
//	 errmsg: "hidden indexes are not supported yet."}
//
// (FerretDB 1.24 answers both with NotImplemented, code 238.)
func HiddenIndexUnsupported() Rule {
	collMod := Fail("collMod", func(cmd bson.D) bool {
		index, _ := lookupDoc(cmd, "index")
		_, ok := lookup(index, "hidden")
		return ok
	}, internalError("'collMod.index.hidden' is not supported yet."))
	create := Fail("createIndexes", func(cmd bson.D) bool {
		specs, _ := lookupValue(cmd, "indexes").(bson.A)
		return slices.ContainsFunc(specs, func(s any) bool {
			spec, _ := s.(bson.D)
			return isTrue(lookupValue(spec, "hidden"))
		})
	}, internalError("hidden indexes are not supported yet."))
	return RuleFuncs{OnRequest: func(cmd bson.D) (out, reply bson.D) {
		if _, reply := collMod.Request(cmd); reply != nil {
			return nil, reply
		}
		return create.Request(cmd)
	}}
}

// internalError is FerretDB 2.x's answer to what PostgreSQL refused:
// InternalError with PostgreSQL's message.
func internalError(msg string) bson.D {
	return bson.D{
		{Key: "ok", Value: 0.0},
		{Key: "errmsg", Value: msg},
		{Key: "code", Value: int32(1)},
		{Key: "codeName", Value: "InternalError"},
	}
}

// Deadlock plays FerretDB 2.x choosing a command as the victim of a
// deadlock: PostgreSQL rolls its transaction back, and the client gets
//
//	{ok: 0, code: 16908292, errmsg: "deadlock detected"}
//
// (mongoutil.CodeDeadlockDetected). It answers the commands named command
// for which match returns true (match nil: all), without sending them:
// nothing of them is applied. The codeName FerretDB sends with it was not
// observed; the rule sends none.
func Deadlock(command string, match func(cmd bson.D) bool) Rule {
	return Fail(command, match, bson.D{
		{Key: "ok", Value: 0.0},
		{Key: "errmsg", Value: "deadlock detected"},
		{Key: "code", Value: int32(mongoutil.CodeDeadlockDetected)},
	})
}
