package wirefault

import "go.mongodb.org/mongo-driver/v2/bson"

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
// 2.x): collMod commands that set index.hidden fail with
//
//	{ok: 0, code: 238, codeName: "NotImplemented",
//	 errmsg: "collMod: option 'index.hidden' is not implemented yet"}
//
// The code is a guess: FerretDB 2.5's exact answer was not observed. (FerretDB
// 1.24 implements no collMod at all and answers every one with code 238.)
func HiddenIndexUnsupported() Rule {
	return Fail("collMod", func(cmd bson.D) bool {
		index, _ := lookupDoc(cmd, "index")
		_, ok := lookup(index, "hidden")
		return ok
	}, bson.D{
		{Key: "ok", Value: 0.0},
		{Key: "errmsg", Value: "collMod: option 'index.hidden' is not implemented yet"},
		{Key: "code", Value: int32(238)},
		{Key: "codeName", Value: "NotImplemented"},
	})
}
