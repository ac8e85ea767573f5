package wirefault

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// ClockOffset plays a mongos whose own clock is d ahead of the shard that
// stamps documents (d < 0: behind): hello and isMaster replies get
// localTime + d. Documents and $currentDate are untouched.
func ClockOffset(d time.Duration) Rule {
	return RuleFuncs{OnReply: func(cmd, reply bson.D) bson.D {
		if !isHello(cmd) {
			return nil
		}
		return shiftLocalTime(reply, d)
	}}
}

// shiftLocalTime returns a hello reply with localTime moved by d, or nil if
// it has none.
func shiftLocalTime(reply bson.D, d time.Duration) bson.D {
	t, ok := lookupValue(reply, "localTime").(bson.DateTime)
	if !ok {
		return nil
	}
	return with(reply, "localTime", bson.DateTime(int64(t)+d.Milliseconds()))
}

// replicaSetFields are the hello fields that describe a replica set member.
var replicaSetFields = []string{
	"setName", "hosts", "primary", "me", "setVersion", "electionId", "secondary",
	"arbiterOnly", "passives", "arbiters", "tags", "lastWrite",
}

// Mongos plays a mongos in front of the server: hello and isMaster replies
// say msg: "isdbgrid" and lose every replica set field, so the driver treats
// the server as a mongos (it sends $readPreference with reads whose read
// preference is not primary, for one). logicalSessionTimeoutMinutes stays as
// the server sent it.
func Mongos() Rule {
	return RuleFuncs{OnReply: func(cmd, reply bson.D) bson.D {
		if !isHello(cmd) || !isOK(reply) {
			return nil
		}
		return with(without(reply, replicaSetFields...), "msg", "isdbgrid")
	}}
}
