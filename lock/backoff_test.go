package lock_test

import (
	"testing"
	"time"

	"github.com/mongolock/mongolock/lock"
)

// TestBackoffPauseFromTime: a pause's jitter comes from the time it begins
// and nothing else, so that a simulation replays it; pauses that begin at
// different times differ, each within [0.8, 1] of its nominal length.
func TestBackoffPauseFromTime(t *testing.T) {
	b := lock.Backoff{First: 100 * time.Millisecond, Max: time.Second}
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	seen := map[time.Duration]bool{}
	for i := range 100 {
		now := at.Add(time.Duration(i) * time.Microsecond)
		for attempt, nominal := range map[int]time.Duration{1: 100 * time.Millisecond, 3: 400 * time.Millisecond, 9: time.Second} {
			p := b.Pause(now, attempt)
			if p != b.Pause(now, attempt) {
				t.Fatalf("Pause(%v, %d): two lengths", now, attempt)
			}
			if p < nominal*8/10 || p > nominal {
				t.Errorf("Pause(%v, %d) = %v, want in [%v, %v]", now, attempt, p, nominal*8/10, nominal)
			}
			if attempt == 9 {
				seen[p] = true
			}
		}
	}
	if len(seen) < 90 {
		t.Errorf("100 capped pauses begun a microsecond apart: %d lengths, want them jittered", len(seen))
	}
}
