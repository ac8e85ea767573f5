package ui_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/ui"
)

// The locks page tells a semaphore's slots by their kind, and groups them
// by semaphore: its name, the slots held, each with its holder, fence and
// value.
func TestLocksPageSemaphores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := mongotest.NewDatabase(t)
	l, err := lock.New(db)
	if err != nil {
		t.Fatal(err)
	}
	for _, kid := range []string{"host-1", "host-2"} {
		s, err := lock.NewSession(l, lock.WithKeeperID(kid))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		m, err := s.Semaphore("exports", 3)
		if err != nil {
			t.Fatal(err)
		}
		lease, ok, err := m.AcquireLock(ctx)
		if err != nil || !ok {
			t.Fatalf("%s: acquire: %v %v", kid, ok, err)
		}
		if err := lease.SetValue(ctx, []byte("addr-of-"+kid)); err != nil {
			t.Fatal(err)
		}
	}
	s, err := lock.NewSession(l, lock.WithKeeperID("host-3"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if m, err := s.Mutex("other-lock"); err != nil {
		t.Fatal(err)
	} else if _, held, err := m.AcquireLock(ctx); err != nil || !held {
		t.Fatalf("acquire other-lock: %v %v", held, err)
	}
	h, err := ui.New(db)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	code, body := get(t, srv, "/locks")
	if code != http.StatusOK {
		t.Fatalf("GET /locks: %d\n%s", code, body)
	}
	for _, want := range []string{
		`<td>slot</td>`,
		`Semaphores`,
		`<th scope="row">exports</th><td class="num">2</td>`,
		`host-1`, `addr-of-host-1`, `host-2`, `addr-of-host-2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /locks: no %q\n%s", want, body)
		}
	}
	code, body = get(t, srv, "/locks?kind=slot")
	if code != http.StatusOK || strings.Count(body, `<td>slot</td>`) != 2 || strings.Contains(body, "other-lock") {
		t.Errorf("GET /locks?kind=slot: %d\n%s", code, body)
	}
}
