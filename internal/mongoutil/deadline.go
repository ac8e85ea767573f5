package mongoutil

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// A write's deadline is a condition of its filter that the server's clock
// reads before an instant: {$expr: {$lt: ["$$NOW", deadline]}}. A write
// that carries one cannot apply after it, however late it reaches the
// server, so that a client that gave up on it knows, once the server's
// clock passed the deadline, that a read shows its fate for good.
// MongoDB (4.2 and later) and FerretDB 2 evaluate it; FerretDB 1.x does
// not know $$NOW, and the embedded server's proxy evaluates it in its place
// (ResolveDeadlines).

// Deadline is the filter element of a write that applies only before
// deadline by the server's clock.
func Deadline(deadline time.Time) bson.E {
	return bson.E{Key: "$expr", Value: bson.D{{Key: "$lt", Value: bson.A{"$$NOW", deadline}}}}
}

// ProbeDeadlines reports whether coll's server evaluates Deadline, on
// the document of coll whose _id is id, which must exist: a filter of id
// under a deadline in the year 9999 matches it, and under one in 1970
// does not (whatever the server's clock, and this host's, read).
// FerretDB 1.x refuses $$NOW, or matches neither: false. The server's
// refusal of the filter (an unknown operator or variable) says false too;
// any other error is returned, a network error or a timeout included: the
// driver reports those as server errors too, and they say nothing of what
// the server evaluates (simulation seed 498: a slow probe read as false
// sent starts without their deadline).
func ProbeDeadlines(ctx context.Context, coll *mongo.Collection, id any) (bool, error) {
	for _, c := range []struct {
		deadline time.Time
		want     bool
	}{{time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), true}, {time.Unix(0, 0), false}} {
		err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}, Deadline(c.deadline)}).Err()
		var se mongo.ServerError
		switch {
		case errors.Is(err, mongo.ErrNoDocuments):
			if c.want {
				return false, nil
			}
		case errors.As(err, &se) && !mongo.IsNetworkError(err) && !mongo.IsTimeout(err) && ctx.Err() == nil:
			return false, nil
		case err != nil:
			return false, err
		case !c.want:
			return false, nil
		}
	}
	return true, nil
}

// matchNothing is a filter element no document matches.
var matchNothing = bson.E{Key: "_id", Value: bson.D{{Key: "$exists", Value: false}}}

// ResolveDeadlines returns filter with each of its Deadline elements
// evaluated at now, the server's time: dropped if now is before its
// deadline, else replaced by a condition no document matches. Other
// elements, and other $expr, are left as they are; ok is false if filter
// has none to resolve, and then it is returned unchanged.
func ResolveDeadlines(filter bson.D, now time.Time) (out bson.D, ok bool) {
	for _, e := range filter {
		deadline, is := deadlineOf(e)
		switch {
		case !is:
			out = append(out, e)
		case !now.Before(deadline):
			ok, out = true, append(out, matchNothing)
		default:
			ok = true
		}
	}
	if !ok {
		return filter, false
	}
	return out, true
}

// deadlineOf returns e's deadline if e is a Deadline element.
func deadlineOf(e bson.E) (time.Time, bool) {
	if e.Key != "$expr" {
		return time.Time{}, false
	}
	expr, ok := e.Value.(bson.D)
	if !ok || len(expr) != 1 || expr[0].Key != "$lt" {
		return time.Time{}, false
	}
	args, ok := expr[0].Value.(bson.A)
	if !ok || len(args) != 2 || args[0] != "$$NOW" {
		return time.Time{}, false
	}
	switch d := args[1].(type) {
	case time.Time:
		return d, true
	case bson.DateTime:
		return d.Time(), true
	}
	return time.Time{}, false
}
