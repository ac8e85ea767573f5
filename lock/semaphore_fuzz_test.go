package lock_test

import (
	"strconv"
	"testing"

	"github.com/mongolock/mongolock/lock"
)

// FuzzParseSlotID: ParseSlotID never panics, accepts only what SlotID
// writes (so an id names at most one slot), and gives back the name and
// slot SlotID was given.
func FuzzParseSlotID(f *testing.F) {
	for _, s := range []string{"pool#0", "pool#255", "pool#256", "a#b#1", "#1", "pool#01", "pool#-1", "pool#", "pool", "p#1#"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		name, k, ok := lock.ParseSlotID(id)
		if !ok {
			if name != "" || k != 0 {
				t.Fatalf("ParseSlotID(%q) refused it but returned %q, %d", id, name, k)
			}
			return
		}
		if name == "" || k < 0 || k >= lock.MaxSlots {
			t.Fatalf("ParseSlotID(%q) = %q, %d", id, name, k)
		}
		if back := lock.SlotID(name, k); back != id {
			t.Fatalf("ParseSlotID(%q) = %q, %d, which SlotID writes as %q", id, name, k, back)
		}
		n2, k2, ok2 := lock.ParseSlotID(lock.SlotID(id, k))
		if !ok2 || n2 != id || k2 != k {
			t.Fatalf("a semaphore named %q: its slot %d parses as %q, %d, %v", id, k, n2, k2, ok2)
		}
		if _, err := strconv.Atoi(id[len(name)+1:]); err != nil {
			t.Fatalf("ParseSlotID(%q): slot %q is no number", id, id[len(name)+1:])
		}
	})
}
