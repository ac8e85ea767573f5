package runner_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/goleak"

	"github.com/mongolock/mongolock/internal/simdb"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
)

// TestLateCampaignDoesNotHoldTheLock (issue 20, finding 5): a campaign's
// acquisition waits in the server's queue longer than the campaign waits
// for it. It used to carry no server-side deadline, so it was applied
// when its turn came, after its runner had given up and stopped: a term
// nobody knew of, which kept every other instance from leading until its
// lease expired. Now its deadline goes with it (maxTimeMS), and the server
// refuses it.
func TestLateCampaignDoesNotHoldTheLock(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second // renew deadline 2s: the campaign's wait
		start := time.Now()
		srv := simdb.NewServer(simdb.MongoDB, 0)
		var queued atomic.Bool
		slow := func(cmd bson.D) simdb.Fate {
			if len(cmd) > 0 && cmd[0].Key == "findAndModify" && cmd[0].Value == lock.DefaultCollection &&
				lookup(cmd, "query") != nil && queued.CompareAndSwap(false, true) {
				if q, _ := lookup(cmd, "query").(bson.D); len(q) > 0 && q[0].Value == "leader" {
					return simdb.Fate{Queue: 5 * time.Second}
				}
				queued.Store(false)
			}
			return simdb.Fate{}
		}
		session := func(name string, plan simdb.Plan) (*lock.Session, func()) {
			client, err := srv.NewLink(name, plan).Connect(nil)
			if err != nil {
				t.Fatal(err)
			}
			locker, err := lock.New(client.Database("app"), lock.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			s, err := lock.NewSession(locker, lock.WithKeeperID(name))
			if err != nil {
				t.Fatal(err)
			}
			return s, func() { _ = s.Close(); _ = client.Disconnect(context.Background()) }
		}

		a, closeA := session("a", slow)
		ra, err := runner.New(a, "leader")
		if err != nil {
			t.Fatal(err)
		}
		ctxA, stopA := context.WithCancel(context.Background())
		doneA := make(chan error, 1)
		go func() { doneA <- ra.Run(ctxA, func(ctx context.Context) error { <-ctx.Done(); return nil }) }()
		time.Sleep(2500 * time.Millisecond) // the campaign gave up at 2s
		stopA()
		<-doneA
		closeA()

		time.Sleep(3500 * time.Millisecond) // past the queued write's turn, at 5s
		b, closeB := session("b", nil)
		defer closeB()
		rb, err := runner.New(b, "leader")
		if err != nil {
			t.Fatal(err)
		}
		led := make(chan time.Duration, 1)
		ctxB, stopB := context.WithCancel(context.Background())
		doneB := make(chan error, 1)
		go func() {
			doneB <- rb.Run(ctxB, func(ctx context.Context) error {
				led <- time.Since(start)
				<-ctx.Done()
				return nil
			})
		}()
		if at := <-led; at >= 7*time.Second {
			t.Errorf("b led at %v: the late campaign of a, applied at 5s, held the lock until its TTL", at)
		}
		stopB()
		<-doneB
	})
}

func lookup(d bson.D, key string) any {
	for _, e := range d {
		if e.Key == key {
			return e.Value
		}
	}
	return nil
}
