package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/mongolock/mongolock/lock"
)

// TestCheckSemaphore: the semaphore check counts the terms of its slots
// acting at once, ends included, and ignores other locks.
func TestCheckSemaphore(t *testing.T) {
	s := func(k int) string { return lock.SlotID(semName, k) }
	act := func(at time.Duration, in, id string, fence uint64) Act {
		return Act{At: at * time.Millisecond, Instance: in, LockID: id, Fence: fence}
	}
	for _, tc := range []struct {
		name string
		acts []Act
		want string // "" for none
		full int
	}{
		{"n at once", []Act{act(0, "a", s(0), 1), act(0, "b", s(1), 1), act(10, "a", s(0), 1), act(10, "b", s(1), 1),
			act(11, "c", s(0), 2)}, "", 1},
		{"one more, touching an end", []Act{act(0, "a", s(0), 1), act(0, "b", s(1), 1), act(10, "a", s(0), 1),
			act(10, "b", s(1), 1), act(10, "c", s(2), 1)}, `3 terms acted at 0.010s`, 1},
		{"other locks", []Act{act(0, "a", s(0), 1), act(0, "b", s(1), 1), act(0, "c", "critical", 1),
			act(0, "d", "other#0", 1)}, "", 1},
	} {
		v, judged, full := checkSemaphore(tc.acts)
		switch {
		case tc.want == "" && v != nil, tc.want != "" && (len(v) != 1 || !strings.HasPrefix(v[0], "semaphore: ") || !strings.Contains(v[0], tc.want)):
			t.Errorf("%s: %q, want %q", tc.name, v, tc.want)
		case full != tc.full || judged == 0:
			t.Errorf("%s: %d judged, %d full, want %d full", tc.name, judged, full, tc.full)
		}
	}
}
