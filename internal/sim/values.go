package sim

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/lock"
)

// updateValue, in worlds with values, has the leader update its value
// for the i-th time through its term's lease, naming its instance and
// the term's fence ("app1@<fence>#i"), which checkValues reads back. A
// write refused because the term ended is what the fence is for. (Not
// the runner's SetValue: called after the term ended, that keeps the
// value for the next term, naming a fence that is not that term's.)
func (in *instance) updateValue(ctx context.Context, i int) {
	if !in.sim.world.Values {
		return
	}
	l, ok := lock.LeaseFrom(ctx)
	if !ok {
		return
	}
	_ = l.SetValue(ctx, []byte(fmt.Sprintf("%s@%d#%d", in.life.Name, l.Fence(), i)))
}

// checkValues checks, on the server's side, that a lock's value is only
// ever written by its current term's holder: every write that put a value
// in a lock document came over the link of an instance of the keeper the
// document names (the ground truth of who sent it, not the library's
// word), into the term whose fence the value names if it names one; no
// term begins with the value of the term before, and no release keeps
// one.
func checkValues(changes []Change, lives []*Life) []string {
	keeperOf := map[string]string{} // link (instance) name: its keeper id
	for _, l := range lives {
		keeperOf[l.Name] = l.Keeper
	}
	type state struct {
		val   string
		has   bool
		fence uint64
	}
	last := map[string]state{}
	var out []string
	for _, c := range changes {
		id, f, ok := lockChange(c)
		if !ok {
			continue
		}
		kid, _ := lookupDoc(c.Doc, "kid").(string)
		cur := state{fence: f}
		if b, ok := lookupDoc(c.Doc, "val").(bson.Binary); ok {
			cur.val, cur.has = string(b.Data), true
		}
		prev, seen := last[id]
		last[id] = cur
		at := c.At.Seconds()
		switch {
		case !cur.has:
		case kid == "":
			out = append(out, fmt.Sprintf("values: lock %q: released at %.3fs with the value %q still in it", id, at, cur.val))
		case seen && prev.has && prev.val == cur.val && prev.fence != f:
			out = append(out, fmt.Sprintf("values: lock %q: the term of fence %d (%s) began at %.3fs with the value %q of the term of fence %d",
				id, f, kid, at, cur.val, prev.fence))
		case seen && prev.has && prev.val == cur.val:
			// Not written by this change.
		case keeperOf[c.Link] != kid:
			out = append(out, fmt.Sprintf("values: lock %q: %s (keeper %q) wrote the value %q at %.3fs into the term of fence %d held by %q",
				id, c.Link, keeperOf[c.Link], cur.val, at, f, kid))
		default:
			if vf, ok := valueFence(cur.val); ok && vf != f {
				out = append(out, fmt.Sprintf("values: lock %q: %s wrote the value %q of its term of fence %d at %.3fs into the term of fence %d",
					id, c.Link, cur.val, vf, at, f))
			}
		}
	}
	return out
}

// valueFence is the fence an updated value names (updateValue).
func valueFence(v string) (uint64, bool) {
	_, rest, ok := strings.Cut(v, "@")
	if !ok {
		return 0, false
	}
	rest, _, _ = strings.Cut(rest, "#")
	f, err := strconv.ParseUint(rest, 10, 64)
	return f, err == nil
}
