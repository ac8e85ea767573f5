package mongotest

import (
	"context"
	"fmt"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
)

// Upserts records the upserts a client sends (the statements of update
// commands and the findAndModify commands with upsert: true), so a test
// can assert their shape: FerretDB 2.x runs an upsert whose filter is its
// _id alone as an insert that, on a conflict, replaces the document there
// with its own, so that two racers both report an insert and the last
// one's document wins (docs/deployments.md). It is safe for concurrent
// use.
type Upserts struct {
	mu      sync.Mutex
	filters []upsertFilter
}

type upsertFilter struct {
	coll   string
	filter bson.Raw
}

// NewUpserts returns an empty Upserts; give its Monitor to a client.
func NewUpserts() *Upserts { return &Upserts{} }

// Monitor returns a command monitor that records into u.
func (u *Upserts) Monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: u.started}
}

func (u *Upserts) started(_ context.Context, e *event.CommandStartedEvent) {
	cmd := e.Command
	var found []upsertFilter
	switch e.CommandName {
	case "update":
		coll, _ := cmd.Lookup("update").StringValueOK()
		stmts, ok := cmd.Lookup("updates").ArrayOK()
		if !ok {
			return
		}
		vals, _ := stmts.Values()
		for _, v := range vals {
			st, ok := v.DocumentOK()
			if !ok {
				continue
			}
			if up, _ := st.Lookup("upsert").BooleanOK(); up {
				q, _ := st.Lookup("q").DocumentOK()
				found = append(found, upsertFilter{coll, bson.Raw(q)})
			}
		}
	case "findAndModify":
		if up, _ := cmd.Lookup("upsert").BooleanOK(); up {
			coll, _ := cmd.Lookup("findAndModify").StringValueOK()
			q, _ := cmd.Lookup("query").DocumentOK()
			found = append(found, upsertFilter{coll, bson.Raw(q)})
		}
	}
	if len(found) == 0 {
		return
	}
	u.mu.Lock()
	u.filters = append(u.filters, found...)
	u.mu.Unlock()
}

// Count returns how many upserts were sent to collection coll (any
// collection if coll is empty).
func (u *Upserts) Count(coll string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, f := range u.filters {
		if coll == "" || f.coll == coll {
			n++
		}
	}
	return n
}

// IDOnly describes each upsert sent whose filter has no condition but its
// _id (or none at all), naming its collection and filter.
func (u *Upserts) IDOnly() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for _, f := range u.filters {
		elems, _ := f.filter.Elements()
		if len(elems) == 0 || len(elems) == 1 && elems[0].Key() == "_id" {
			out = append(out, fmt.Sprintf("upsert into %q with filter %s", f.coll, f.filter))
		}
	}
	return out
}
