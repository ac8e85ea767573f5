package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mongolock/mongolock/lock"
)

// TestLocksSharedKeeper: locks list says when two live Sessions hold locks
// with one keeper id (processes given one WithKeeperID).
func TestLocksSharedKeeper(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, g := on(t)
	l, err := lock.New(db, lock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		s, err := lock.NewSession(l, lock.WithKeeperID("billing"))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if tk, err := s.AcquireLocks(ctx, id); err != nil || len(tk.Leases) != 1 {
			t.Fatalf("acquire %s: %+v, %v", id, tk, err)
		}
	}
	r := cli(t, args(g, "--ttl", "1m", "locks", "list")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, `warning: keeper id "billing" is held by 2 sessions at once`) {
		t.Errorf("locks list says nothing of the shared keeper id:\n%s", r.stdout)
	}
}
