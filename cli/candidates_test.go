package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
)

// TestLocksCandidates: locks list names the runners waiting to lead with
// a priority.
func TestLocksCandidates(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, g := on(t)
	l, err := lock.New(db, lock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	s, err := lock.NewSession(l, lock.WithKeeperID("host-7"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The lock a waiting runner.WithPriority(42) holds.
	if tk, err := s.AcquireLocks(ctx, runner.CandidatePrefix("billing-leader")+"42/host-7"); err != nil || len(tk.Leases) != 1 {
		t.Fatalf("acquire the candidacy: %+v, %v", tk, err)
	}
	res := cli(t, args(g, "--ttl", "1m", "locks", "list")...)
	wantOK(t, res)
	if !strings.Contains(res.stdout, "candidate for billing-leader: host-7, priority 42, candidate since ") {
		t.Errorf("locks list does not name the candidate:\n%s", res.stdout)
	}
}
