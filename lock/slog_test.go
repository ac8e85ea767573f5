package lock_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"

	"github.com/mongolock/mongolock/lock"
)

// TestSlogObserver: the slog observer logs what the zerolog one logs, at
// the same levels and under the same keys.
func TestSlogObserver(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	events := []lock.Event{
		{Kind: lock.TermStarted, LockID: "leader", KeeperID: "me", Fence: 7, Remaining: 2 * time.Second},
		{Kind: lock.RunEnded, KeeperID: "me", Job: "j", Err: errors.New("failed"), Scheduled: at, Attempt: 2},
		{Kind: lock.Renewed, LockID: "x", KeeperID: "me", Took: time.Millisecond}, // debug: left out
	}
	var sbuf, zbuf bytes.Buffer
	so := lock.SlogObserver(slog.New(slog.NewJSONHandler(&sbuf, nil))) // Info and up
	zo := lock.LogObserver(zerolog.New(&zbuf).Level(zerolog.InfoLevel))
	for _, e := range events {
		so.Observe(e)
		zo.Observe(e)
	}
	slines, zlines := lines(t, sbuf.Bytes()), lines(t, zbuf.Bytes())
	if len(slines) != 2 || len(zlines) != 2 {
		t.Fatalf("slog logged %d lines, zerolog %d; want 2 each:\n%s\n%s", len(slines), len(zlines), sbuf.String(), zbuf.String())
	}
	for i := range slines {
		s, z := slines[i], zlines[i]
		if !strings.EqualFold(s["level"].(string), z["level"].(string)) || s["msg"] != z["message"] {
			t.Errorf("line %d: slog %v, zerolog %v", i, s, z)
		}
		for k := range z {
			if _, ok := s[k]; !ok && k != "message" {
				t.Errorf("line %d: slog lacks %q: %v", i, k, s)
			}
		}
	}
	if got := slines[1]; got["error"] != "failed" || got["job"] != "j" || got["attempt"] != 2.0 || got["firing"] != "2026-01-02T03:04:05Z" {
		t.Errorf("run ended: %v", got)
	}
}

func lines(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for l := range bytes.Lines(b) {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		out = append(out, m)
	}
	return out
}

// TestWithSessionSlog: a Session given a slog logger logs through it; nil
// is refused, naming the option.
func TestWithSessionSlog(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		s := newSession(t, newMemStore(time.Second), lock.WithKeeperID("me"),
			lock.WithSessionSlog(slog.New(slog.NewTextHandler(&buf, nil))))
		s.Emit(lock.Event{Kind: lock.TermStarted, LockID: "leader"})
		if got := buf.String(); !strings.Contains(got, `level=INFO msg="term started" lock=leader keeper=me`) {
			t.Errorf("logged %q", got)
		}
	})
	_, err := lock.NewSession(newMemStore(time.Second), lock.WithSessionSlog(nil))
	if !errors.Is(err, lock.ErrInvalidOption) || !strings.Contains(err.Error(), "WithSessionSlog") {
		t.Errorf("WithSessionSlog(nil): %v", err)
	}
	if lock.SlogObserver(nil) != nil {
		t.Error("SlogObserver(nil) is not nil")
	}
}
