package wirefault

import "go.mongodb.org/mongo-driver/v2/bson"

// Rule rewrites the commands one client sends and the replies it gets.
//
// A command is the document the server would see: an OP_MSG body with its
// document sequences (the driver's "documents", "updates", "deletes") folded
// in as arrays, or the command of a legacy OP_QUERY handshake. Its first
// element names the command ("hello", "findAndModify", ...), spelled as the
// driver sends it. Rules must not modify their arguments in place: return a
// changed copy.
//
// Rules run in the order given to Start on the way to the server, and in the
// reverse order on the way back, each seeing in Reply the command it passed
// on, like nested middleware.
type Rule interface {
	// Request returns the command to send instead of cmd (nil: cmd as it
	// is), or a reply that answers cmd without sending it. A command
	// answered this way passes only through the rules before this one.
	Request(cmd bson.D) (out, reply bson.D)
	// Reply returns the reply the client gets instead of reply (nil: reply
	// as it is). cmd is the command as this rule passed it on.
	Reply(cmd, reply bson.D) bson.D
}

// RuleFuncs adapts functions to a Rule. A nil function changes nothing.
type RuleFuncs struct {
	OnRequest func(cmd bson.D) (out, reply bson.D)
	OnReply   func(cmd, reply bson.D) bson.D
}

var _ Rule = RuleFuncs{}

// Request calls OnRequest.
func (f RuleFuncs) Request(cmd bson.D) (out, reply bson.D) {
	if f.OnRequest == nil {
		return nil, nil
	}
	return f.OnRequest(cmd)
}

// Reply calls OnReply.
func (f RuleFuncs) Reply(cmd, reply bson.D) bson.D {
	if f.OnReply == nil {
		return nil
	}
	return f.OnReply(cmd, reply)
}

// exchange is one command on its way through the rules.
type exchange struct {
	rules []Rule
	sent  []bson.D // sent[i]: the command rule i passed on
}

// request runs cmd through the rules. It returns the command to send, or
// a reply if a rule answered.
func (x *exchange) request(cmd bson.D) (out, reply bson.D) {
	x.sent = x.sent[:0]
	for _, r := range x.rules {
		next, reply := r.Request(cmd)
		if reply != nil {
			return nil, reply
		}
		if next != nil {
			cmd = next
		}
		x.sent = append(x.sent, cmd)
	}
	return cmd, nil
}

// reply runs reply back through the rules the command went through.
func (x *exchange) reply(reply bson.D) bson.D {
	for i := len(x.sent) - 1; i >= 0; i-- {
		if next := x.rules[i].Reply(x.sent[i], reply); next != nil {
			reply = next
		}
	}
	return reply
}
