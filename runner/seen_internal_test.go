package runner

import (
	"testing"
	"time"

	"github.com/mongolock/mongolock/lock"
)

// TestTermsSeen: the terms of other leaders a runner saw are kept one span
// per fence, stretched by later reads of the same term and never shrunk,
// the last maxSeen, oldest first; reads that show no term are ignored, and
// callers get a copy.
func TestTermsSeen(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	r := &LeaderAwareRunner{}
	see := func(h lock.Holder) {
		r.mu.Lock()
		r.noteSeenLocked(h)
		r.mu.Unlock()
	}
	see(lock.Holder{Fence: 7, AcquiredAt: at(0), RenewedAt: at(1)})
	see(lock.Holder{Fence: 7, AcquiredAt: at(0), RenewedAt: at(3)})
	see(lock.Holder{Fence: 7, AcquiredAt: at(0), RenewedAt: at(2)}) // an older read: no shrink
	see(lock.Holder{})                                              // free: nothing
	see(lock.Holder{Fence: 8, AcquiredAt: at(5), RenewedAt: at(4)}) // renewed before acquired: nonsense
	see(lock.Holder{Fence: 9, AcquiredAt: at(5), RenewedAt: at(6)})
	got := r.TermsSeen()
	want := []TermSpan{{7, at(0), at(3)}, {9, at(5), at(6)}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("TermsSeen() = %+v, want %+v", got, want)
	}
	got[0].To = at(100)
	if r.TermsSeen()[0].To != at(3) {
		t.Fatal("TermsSeen returned the runner's own slice")
	}
	for f := uint64(10); f < 10+maxSeen+4; f++ {
		see(lock.Holder{Fence: f, AcquiredAt: at(int(f)), RenewedAt: at(int(f) + 1)})
	}
	got = r.TermsSeen()
	if len(got) != maxSeen || got[0].Fence != 10+4 || got[maxSeen-1].Fence != 10+maxSeen+3 {
		t.Fatalf("after %d more terms: %d kept, fences %d..%d; want the last %d", maxSeen+4, len(got), got[0].Fence, got[len(got)-1].Fence, maxSeen)
	}
}
