package scheduler

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
)

// TestClaimantIDs: the Schedulers of one Session have claimant ids of
// their own, a process started later with the same keeper id has others,
// and nothing random goes into them: a replay of the same start (a
// simulation's seed) makes the same ids.
func TestClaimantIDs(t *testing.T) {
	start := func(t *testing.T) []string {
		locks := locktest.New()
		session := func() *lock.Session {
			s, err := lock.NewSession(locks, lock.WithKeeperID("k"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
		claimant := func(s *lock.Session) string {
			sch, err := newScheduler(newFakeStore(locks.Clock()), s, defaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			return sch.ClaimantID()
		}
		one := session()
		ids := []string{claimant(one), claimant(one)}
		time.Sleep(time.Second) // the process restarted
		return append(ids, claimant(session()))
	}
	var first, again []string
	synctest.Test(t, func(t *testing.T) { first = start(t) })
	synctest.Test(t, func(t *testing.T) { again = start(t) })
	for i, id := range first {
		if !strings.HasPrefix(id, "k/") {
			t.Errorf("claimant id %q: want the keeper id and a slash first", id)
		}
		for _, other := range first[:i] {
			if id == other {
				t.Errorf("claimant ids %v: %q twice", first, id)
			}
		}
	}
	if strings.Join(first, " ") != strings.Join(again, " ") {
		t.Errorf("claimant ids %v, replayed %v: want the same", first, again)
	}
}
