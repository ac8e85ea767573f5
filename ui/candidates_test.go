package ui_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/ui"
)

// The locks page tells a waiting leader candidate's lock by its kind.
func TestLocksPageCandidates(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	l, err := lock.New(db)
	if err != nil {
		t.Fatal(err)
	}
	s, err := lock.NewSession(l, lock.WithKeeperID("host-7"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if tk, err := s.AcquireLocks(context.Background(), runner.CandidatePrefix("billing-leader")+"42/host-7", "other-lock"); err != nil || len(tk.Leases) != 2 {
		t.Fatalf("acquire: %+v, %v", tk, err)
	}
	h, err := ui.New(db)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	code, body := get(t, srv, "/locks?kind=candidate")
	if code != http.StatusOK || !strings.Contains(body, "billing-leader@candidate/42/host-7</a></td><td>candidate</td>") || strings.Contains(body, "other-lock") {
		t.Errorf("GET /locks?kind=candidate: %d\n%s", code, body)
	}
}
