package lock_test

import (
	"context"
	"testing"
	"time"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/simdb"
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

// The simulated server of the simulation (internal/simdb) passes the same
// suite, as MongoDB and as FerretDB 1.24, so that the simulation cannot
// drift from what the Locker does on a real server.
func TestConformanceSimulated(t *testing.T) {
	for _, flavor := range []simdb.Flavor{simdb.MongoDB, simdb.FerretDB1} {
		t.Run(flavor.String(), func(t *testing.T) {
			locktest.RunConformance(t, locktest.Harness{
				NewStore: func(t *testing.T) lock.Store {
					client, err := simdb.NewServer(flavor, 0).NewLink(t.Name(), nil).Connect(nil)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
					l, err := lock.New(client.Database("app"), lock.WithTTL(300*time.Millisecond))
					if err != nil {
						t.Fatal(err)
					}
					return l
				},
			})
		})
	}
}
