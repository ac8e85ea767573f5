package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mongolock/mongolock/lock"
)

// TestLocksSemaphoreSlots: a semaphore's slots are rows of locks list, as
// the locks they are, and a line after the table groups them; --json names
// each slot's semaphore and number.
func TestLocksSemaphoreSlots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, g := on(t)
	l, err := lock.New(db, lock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	s, err := lock.NewSession(l)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 2 {
		m, err := s.Semaphore("pool", 3)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok, err := m.AcquireLock(ctx); err != nil || !ok {
			t.Fatalf("acquire: %v %v", ok, err)
		}
	}
	if _, _, err := acquireAs(ctx, l, "reports", "keeper-1"); err != nil {
		t.Fatal(err)
	}
	g = args(g, "--ttl", "1m")
	r := cli(t, args(g, "locks", "list")...)
	wantOK(t, r)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 5 || strings.Count(r.stdout, "pool#") != 2 || !strings.HasPrefix(lines[4], `semaphore "pool": 2 slots held (#`) {
		t.Fatalf("list:\n%s", r.stdout)
	}
	// The line names each slot's holder and fence.
	if strings.Count(lines[4], " "+s.KeeperID()+" fence ") != 2 {
		t.Errorf("semaphore line %q: want each slot's holder %s and fence", lines[4], s.KeeperID())
	}

	r = cli(t, args(g, "locks", "list", "--json")...)
	wantOK(t, r)
	var list []lockJSON
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("list --json: %v\n%s", err, r.stdout)
	}
	slots := 0
	for _, j := range list {
		switch {
		case j.Lock == "reports" && j.Semaphore == "" && j.Slot == nil:
		case j.Semaphore == "pool" && j.Slot != nil && j.Lock == lock.SlotID("pool", *j.Slot):
			slots++
		default:
			t.Errorf("list --json: %+v", j)
		}
	}
	if slots != 2 {
		t.Errorf("list --json: %d slots, want 2:\n%s", slots, r.stdout)
	}
}
