package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mongolock/mongolock/lock"
)

// TestLocksValue: locks list, show and --json show a holder's value,
// redacted as other text read from the database is; a binary one in hex.
func TestLocksValue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, g := on(t)
	l, err := lock.New(db, lock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ga, _, errA := acquireAs(ctx, l, "leader", "keeper-1")
	gb, _, errB := acquireAs(ctx, l, "binary", "keeper-2")
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if err := l.SetValue(ctx, "keeper-1", lock.Term{LockID: "leader", Fence: ga.Fence}, []byte("mongodb://app:hunter2@10.0.0.1:27017/")); err != nil {
		t.Fatal(err)
	}
	if err := l.SetValue(ctx, "keeper-2", lock.Term{LockID: "binary", Fence: gb.Fence}, []byte{0, 1, 0xfe}); err != nil {
		t.Fatal(err)
	}
	g = args(g, "--ttl", "1m")
	for _, c := range [][]string{{"locks", "list"}, {"locks", "list", "--json"}, {"locks", "show", "leader"}, {"locks", "show", "leader", "--json"}} {
		r := cli(t, args(g, c...)...)
		wantOK(t, r)
		if strings.Contains(r.stdout, "hunter2") || !strings.Contains(r.stdout, "mongodb://***@10.0.0.1:27017/") {
			t.Errorf("%q: the value is not shown redacted:\n%s", c, r.stdout)
		}
	}
	r := cli(t, args(g, "locks", "list", "--json")...)
	var list []lockJSON
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Lock != "binary" || list[0].Value != "0x0001fe" {
		t.Errorf("binary value in --json: %+v", list)
	}
	r = cli(t, args(g, "locks", "list")...)
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 3 || !strings.Contains(lines[0], "VALUE") || !strings.Contains(lines[1], "0x0001fe") {
		t.Errorf("list:\n%s", r.stdout)
	}
}
