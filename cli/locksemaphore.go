package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/mongolock/mongolock/lock"
)

// semaphoreSlots writes, after the locks table, a line per semaphore whose
// slots (lock.SlotID: "<name>#<k>") are among holders: how many are held
// and which, each with its holder, fence and value, and which lapsed. Its
// n is not known: each caller has its own, and the database keeps only
// the slots' locks. The slots are rows of the table already, as
// the locks they are; the line groups them. An ordinary lock whose id ends
// in "#" and a number is counted as a slot too: its id says it is one.
// holders are redacted already.
func semaphoreSlots(w io.Writer, holders []lock.Holder) {
	type slots struct {
		held   []lock.Holder
		lapsed []int
	}
	by := map[string]*slots{}
	var names []string
	for _, h := range holders {
		name, k, ok := lock.ParseSlotID(h.LockID)
		if !ok || h.Released {
			continue
		}
		s := by[name]
		if s == nil {
			s = &slots{}
			by[name] = s
			names = append(names, name)
		}
		if h.Expired {
			s.lapsed = append(s.lapsed, k)
		} else {
			s.held = append(s.held, h)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		s := by[name]
		line := fmt.Sprintf("semaphore %q: %d %s held", name, len(s.held), plural(len(s.held), "slot", "slots"))
		if len(s.held) > 0 {
			line += " (" + heldList(s.held) + ")"
		}
		if len(s.lapsed) > 0 {
			line += fmt.Sprintf(", %d lapsed (%s)", len(s.lapsed), slotList(s.lapsed))
		}
		fmt.Fprintln(w, line)
	}
}

// heldList is "#<k> <keeper> fence <f>[ value <v>]" for each held slot,
// by k.
func heldList(hs []lock.Holder) string {
	slices.SortFunc(hs, func(a, b lock.Holder) int {
		_, i, _ := lock.ParseSlotID(a.LockID)
		_, k, _ := lock.ParseSlotID(b.LockID)
		return i - k
	})
	out := make([]string, len(hs))
	for i, h := range hs {
		_, k, _ := lock.ParseSlotID(h.LockID)
		out[i] = fmt.Sprintf("#%d %s fence %d", k, orDash(h.KeeperID), h.Fence)
		if len(h.Value) > 0 {
			out[i] += fmt.Sprintf(" value %q", shortValue(h.Value))
		}
	}
	return strings.Join(out, ", ")
}

func slotList(ks []int) string {
	slices.Sort(ks)
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = fmt.Sprintf("#%d", k)
	}
	return strings.Join(out, " ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
