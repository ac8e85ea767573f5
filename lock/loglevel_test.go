package lock_test

import (
	"bytes"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/mongolock/mongolock/lock"
)

// TestRunsLoggedAtInfo: both session loggers log a run's start and its
// successful end at info (a failed end at warning), so that a service
// logging at info shows what its jobs did; before, runs were at debug and
// an info log showed none.
func TestRunsLoggedAtInfo(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		e    lock.Event
		want string
	}{
		{lock.Event{Kind: lock.RunStarted, Job: "j", Scheduled: at, Attempt: 1}, "info"},
		{lock.Event{Kind: lock.RunEnded, Job: "j", Scheduled: at, Outcome: "succeeded", Took: time.Second}, "info"},
		{lock.Event{Kind: lock.RunEnded, Job: "j", Scheduled: at, Outcome: "failed", Err: errors.New("boom")}, "warn"},
	}
	for _, c := range cases {
		var sbuf, zbuf bytes.Buffer
		lock.SlogObserver(slog.New(slog.NewJSONHandler(&sbuf, nil))).Observe(c.e) // info and up
		lock.LogObserver(zerolog.New(&zbuf).Level(zerolog.InfoLevel)).Observe(c.e)
		sl, zl := lines(t, sbuf.Bytes()), lines(t, zbuf.Bytes())
		if len(sl) != 1 || len(zl) != 1 {
			t.Errorf("%v %s: slog logged %q, zerolog %q at info; want one line each", c.e.Kind, c.e.Outcome, sbuf.String(), zbuf.String())
			continue
		}
		if sl[0]["level"] != map[string]string{"info": "INFO", "warn": "WARN"}[c.want] || zl[0]["level"] != c.want {
			t.Errorf("%v %s: levels slog %v, zerolog %v; want %s", c.e.Kind, c.e.Outcome, sl[0]["level"], zl[0]["level"], c.want)
		}
	}
}
