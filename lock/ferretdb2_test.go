package lock_test

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/internal/wirefault"
	"github.com/mongolock/mongolock/lock"
)

// Tests of what FerretDB 2.x (PostgreSQL with DocumentDB) does to many
// locks at once: a bulk write takes its rows' locks in the order of its
// writes, so two batches taking the same locks in opposite orders can
// deadlock, and PostgreSQL then rolls one back.

// upsertIDs returns the _id of each upsert of an update command, in the
// order sent, and whether cmd is one: the write of AcquireLocks.
func upsertIDs(cmd bson.D) ([]string, bool) {
	if len(cmd) == 0 || cmd[0].Key != "update" {
		return nil, false
	}
	var ids []string
	for _, e := range cmd {
		if e.Key != "updates" {
			continue
		}
		stmts, _ := e.Value.(bson.A)
		for _, s := range stmts {
			stmt, _ := s.(bson.D)
			var upsert bool
			var q bson.D
			for _, f := range stmt {
				switch f.Key {
				case "upsert":
					upsert, _ = f.Value.(bool)
				case "q":
					q, _ = f.Value.(bson.D)
				}
			}
			if !upsert {
				return nil, false
			}
			for _, f := range q {
				if f.Key == "_id" {
					id, _ := f.Value.(string)
					ids = append(ids, id)
				}
			}
		}
	}
	return ids, len(ids) > 0
}

// acquireWrites records the ids of every AcquireLocks write that reaches
// it.
type acquireWrites struct {
	mu     sync.Mutex
	writes [][]string
}

func (w *acquireWrites) Request(cmd bson.D) (out, reply bson.D) {
	if ids, ok := upsertIDs(cmd); ok {
		w.mu.Lock()
		w.writes = append(w.writes, ids)
		w.mu.Unlock()
	}
	return nil, nil
}

func (w *acquireWrites) Reply(cmd, reply bson.D) bson.D { return nil }

func (w *acquireWrites) sent() [][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.writes)
}

func grantedIDs(a lock.Acquisition) []string {
	var ids []string
	for _, g := range a.Granted {
		ids = append(ids, g.LockID)
	}
	return ids
}

// TestAcquireLocksWritesInIDOrder: every batch writes its locks in one
// order, that of their ids, so two batches never hold a lock the other
// waits for; the grants still come in the order asked.
func TestAcquireLocksWritesInIDOrder(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 30*time.Second)
	var rec acquireWrites
	l := rewritten(t, newDB(t), []wirefault.Rule{&rec})
	a, err := l.AcquireLocks(ctx, "k", "c", "a", "b", "a")
	if err != nil {
		t.Fatal(err)
	}
	if got := grantedIDs(a); !slices.Equal(got, []string{"c", "a", "b"}) || len(a.Refused) != 0 {
		t.Errorf("granted %v, refused %v; want c, a, b in the order asked", got, a.Refused)
	}
	if got := rec.sent(); len(got) != 1 || !slices.Equal(got[0], []string{"a", "b", "c"}) {
		t.Errorf("writes %v, want one of a, b, c in that order", got)
	}
}

// TestAcquireLocksRetriesDeadlocks: a write PostgreSQL rolled back to
// break a deadlock (FerretDB 2.x) is sent again, after a pause, a bounded
// number of times; what it did write before is kept.
func TestAcquireLocksRetriesDeadlocks(t *testing.T) {
	t.Parallel()
	// Each subtest's own deadline, from when it runs: parallel subtests
	// wait for the package's other parallel tests (under -race a clean-clone
	// run's subtests started after a parent's 30 s had passed).
	isAcquire := func(cmd bson.D) bool { _, ok := upsertIDs(cmd); return ok }

	t.Run("the whole write", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t, 30*time.Second)
		var deadlocks atomic.Int32
		var rec acquireWrites
		l := rewritten(t, newDB(t), []wirefault.Rule{
			wirefault.Deadlock("update", func(cmd bson.D) bool { return isAcquire(cmd) && deadlocks.Add(1) <= 2 }),
			&rec,
		})
		a, err := l.AcquireLocks(ctx, "k", "c", "a", "b")
		if err != nil {
			t.Fatal(err)
		}
		if got := grantedIDs(a); !slices.Equal(got, []string{"c", "a", "b"}) {
			t.Errorf("granted %v, want c, a, b", got)
		}
		if n := deadlocks.Load(); n != 3 || len(rec.sent()) != 1 {
			t.Errorf("%d writes sent, %d reached the server; want two deadlocks, then the write", n, len(rec.sent()))
		}
	})

	t.Run("some of its writes", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t, 30*time.Second)
		// The first write's first statement is rolled back, as FerretDB
		// 2.x reports a deadlock of one write of an unordered bulk; the
		// others go on.
		var first atomic.Bool
		first.Store(true)
		var rec acquireWrites
		partial := wirefault.RuleFuncs{
			OnRequest: func(cmd bson.D) (out, reply bson.D) {
				if !isAcquire(cmd) || !first.Load() {
					return nil, nil
				}
				out = slices.Clone(cmd)
				for i, e := range out {
					if e.Key == "updates" {
						out[i].Value = e.Value.(bson.A)[1:]
					}
				}
				return out, nil
			},
			OnReply: func(cmd, reply bson.D) bson.D {
				if !isAcquire(cmd) || !first.CompareAndSwap(true, false) {
					return nil
				}
				out := bson.D{}
				for _, e := range reply {
					switch e.Key {
					case "upserted":
						var ups bson.A
						for _, u := range e.Value.(bson.A) {
							u := slices.Clone(u.(bson.D))
							for j := range u {
								if u[j].Key == "index" {
									u[j].Value = u[j].Value.(int32) + 1
								}
							}
							ups = append(ups, u)
						}
						e.Value = ups
					case "writeErrors":
						t.Errorf("the server refused a write: %v", e.Value)
					}
					out = append(out, e)
				}
				return append(out, bson.E{Key: "writeErrors", Value: bson.A{bson.D{
					{Key: "index", Value: int32(0)},
					{Key: "code", Value: int32(mongoutil.CodeDeadlockDetected)},
					{Key: "errmsg", Value: "deadlock detected"},
				}}})
			},
		}
		l := rewritten(t, newDB(t), []wirefault.Rule{&rec, partial})
		a, err := l.AcquireLocks(ctx, "k", "c", "a", "b")
		if err != nil {
			t.Fatal(err)
		}
		if got := grantedIDs(a); !slices.Equal(got, []string{"c", "a", "b"}) {
			t.Errorf("granted %v, want c, a, b", got)
		}
		// The second write sends only the lock the first rolled back.
		if got := rec.sent(); len(got) != 2 || !slices.Equal(got[1], []string{"a"}) {
			t.Errorf("writes %v, want a second one of a alone", got)
		}
	})

	t.Run("for ever", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t, 30*time.Second)
		var deadlocks atomic.Int32
		l := rewritten(t, newDB(t), []wirefault.Rule{
			wirefault.Deadlock("update", func(cmd bson.D) bool { return isAcquire(cmd) && deadlocks.Add(1) > 0 }),
		})
		a, err := l.AcquireLocks(ctx, "k", "c", "a", "b")
		var ce mongo.CommandError
		if !mongoutil.IsDeadlock(err) || !errors.As(err, &ce) || len(a.Granted) != 0 {
			t.Fatalf("acquire: %+v, %v; want the deadlock, and nothing granted", a, err)
		}
		if n := deadlocks.Load(); n < 2 || n > 10 {
			t.Errorf("%d writes sent, want a few", n)
		}
	})
}
