package locktest_test

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
)

func TestConformance(t *testing.T) {
	locktest.RunConformance(t, locktest.Harness{
		NewStore: func(*testing.T) lock.Store {
			return locktest.New(locktest.WithClock(clockwork.NewFakeClock()), locktest.WithTTL(30*time.Second))
		},
	})
}
