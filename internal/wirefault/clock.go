package wirefault

import (
	"slices"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Timestamps plays a server whose $currentDate timestamps are not a unique,
// increasing tick (FerretDB 2.x stamps wall-clock time, so two writes can
// tie, and a clock step makes them go backwards). In update and
// findAndModify commands, every $currentDate entry {f: {$type: "timestamp"}}
// becomes $set {f: next()}, merged into the update's $set; a $currentDate
// left empty is dropped. Pipeline updates are untouched. next must be safe
// for concurrent use if the client runs commands concurrently.
func Timestamps(next func() bson.Timestamp) Rule {
	return RuleFuncs{OnRequest: func(cmd bson.D) (out, reply bson.D) {
		return rewriteCurrentDate(cmd, func(spec any) (any, bool) {
			if !isTimestampSpec(spec) {
				return nil, false
			}
			return next(), true
		}), nil
	}}
}

// FixedTimestamp returns a Timestamps generator that always returns ts:
// every write ties.
func FixedTimestamp(ts bson.Timestamp) func() bson.Timestamp {
	return func() bson.Timestamp { return ts }
}

// Decreasing returns a Timestamps generator whose first call returns start
// and every later call a timestamp one second before the previous one. It is
// safe for concurrent use.
func Decreasing(start bson.Timestamp) func() bson.Timestamp {
	var calls atomic.Uint32
	return func() bson.Timestamp {
		return bson.Timestamp{T: start.T - (calls.Add(1) - 1), I: start.I}
	}
}

// Clock is the rule made by ServerClock.
type Clock struct {
	offset atomic.Int64 // time.Duration
}

var _ Rule = (*Clock)(nil)

// tick orders the timestamps of every Clock in the process, as one server
// orders its own: they all stand for the one server the tests share.
var tick atomic.Uint32

// ServerClock plays a server whose wall clock reads time.Now().Add(offset),
// such as a standalone restarted with its clock set back. In update and
// findAndModify commands every $currentDate entry becomes a $set of that
// time, computed once per command: {f: true} and {f: {$type: "date"}} as a
// date (milliseconds), {f: {$type: "timestamp"}} as Timestamp(seconds, i)
// with i from one process-wide increasing counter. Hello and isMaster
// replies get localTime + offset. Set changes the offset while clients run.
func ServerClock(offset time.Duration) *Clock {
	c := &Clock{}
	c.Set(offset)
	return c
}

// Set makes the server's clock read time.Now().Add(offset) from now on. It
// is safe for concurrent use.
func (c *Clock) Set(offset time.Duration) { c.offset.Store(int64(offset)) }

// Offset returns the current offset.
func (c *Clock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

// Request rewrites $currentDate to the server's time.
func (c *Clock) Request(cmd bson.D) (out, reply bson.D) {
	now := time.Now().Add(c.Offset())
	return rewriteCurrentDate(cmd, func(spec any) (any, bool) {
		switch {
		case isDateSpec(spec):
			return bson.NewDateTimeFromTime(now), true
		case isTimestampSpec(spec):
			return bson.Timestamp{T: uint32(now.Unix()), I: tick.Add(1)}, true
		}
		return nil, false
	}), nil
}

// Reply moves the localTime of hello replies by the offset.
func (c *Clock) Reply(cmd, reply bson.D) bson.D {
	if !isHello(cmd) {
		return nil
	}
	return shiftLocalTime(reply, c.Offset())
}

// isTimestampSpec reports whether a $currentDate entry asks for a timestamp.
func isTimestampSpec(spec any) bool {
	d, _ := spec.(bson.D)
	return lookupValue(d, "$type") == "timestamp"
}

// isDateSpec reports whether a $currentDate entry asks for a date.
func isDateSpec(spec any) bool {
	if b, ok := spec.(bool); ok {
		return b
	}
	d, _ := spec.(bson.D)
	return lookupValue(d, "$type") == "date"
}

// rewriteCurrentDate returns cmd with every $currentDate entry for which
// value returns true turned into a $set of that value, or nil if nothing
// changed. It sees the updates of update commands and the update of
// findAndModify.
func rewriteCurrentDate(cmd bson.D, value func(spec any) (any, bool)) bson.D {
	switch commandName(cmd) {
	case "update":
		updates, _ := lookupValue(cmd, "updates").(bson.A)
		var out bson.A
		for i, s := range updates {
			stmt, _ := s.(bson.D)
			u, _ := lookupDoc(stmt, "u")
			if nu := rewriteUpdate(u, value); nu != nil {
				if out == nil {
					out = slices.Clone(updates)
				}
				out[i] = with(stmt, "u", nu)
			}
		}
		if out != nil {
			return with(cmd, "updates", out)
		}
	case "findAndModify":
		u, _ := lookupDoc(cmd, "update")
		if nu := rewriteUpdate(u, value); nu != nil {
			return with(cmd, "update", nu)
		}
	}
	return nil
}

// rewriteUpdate does rewriteCurrentDate for one update document.
func rewriteUpdate(u bson.D, value func(spec any) (any, bool)) bson.D {
	current, _ := lookupDoc(u, "$currentDate")
	var keep, set bson.D
	for _, e := range current {
		if v, ok := value(e.Value); ok {
			set = append(set, bson.E{Key: e.Key, Value: v})
		} else {
			keep = append(keep, e)
		}
	}
	if set == nil {
		return nil
	}
	if len(keep) == 0 {
		u = without(u, "$currentDate")
	} else {
		u = with(u, "$currentDate", keep)
	}
	merged, _ := lookupDoc(u, "$set")
	for _, e := range set {
		merged = with(merged, e.Key, e.Value)
	}
	return with(u, "$set", merged)
}
