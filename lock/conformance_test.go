package lock_test

import (
	"testing"
	"time"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
)

// The Locker keeps the contract locktest's in-memory Store is checked
// against: the same suite, in real time, with a short TTL. Not parallel
// with the package's other tests, whose load on the server would stretch
// round trips towards the TTL.
func TestConformance(t *testing.T) {
	locktest.RunConformance(t, locktest.Harness{
		NewStore: func(t *testing.T) lock.Store {
			l, err := lock.New(mongotest.NewDatabase(t), lock.WithTTL(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
	})
}
