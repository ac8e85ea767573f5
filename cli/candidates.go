package cli

import (
	"fmt"
	"io"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
)

// printCandidates says, after locks list's table, which runners are
// candidates with a priority (runner.WithPriority; the leader among them),
// by leadership: their candidacy locks are rows of the table too. holders
// are redacted.
func printCandidates(w io.Writer, holders []lock.Holder) {
	for _, h := range holders {
		c, ok := runner.ParseCandidate(h)
		if !ok || h.Released || h.Expired {
			continue
		}
		fmt.Fprintf(w, "candidate for %s: %s, priority %d, candidate since %s\n",
			c.LockID, c.KeeperID, c.Priority, fmtTime(c.Since))
	}
}
