package cli

import (
	"fmt"
	"io"
	"slices"

	"github.com/mongolock/mongolock/internal/redact"
	"github.com/mongolock/mongolock/lock"
)

// warnSharedKeepers tells w of keeper ids that more than one live Session
// holds locks as (lock.KeeperIDShared): they exclude each other, but
// nothing shown here tells them apart.
func warnSharedKeepers(w io.Writer, holders []lock.Holder) {
	tokens := map[string]map[string]bool{}
	for _, h := range holders {
		if h.Released || h.Expired || h.KeeperID == "" {
			continue
		}
		if tokens[h.KeeperID] == nil {
			tokens[h.KeeperID] = map[string]bool{}
		}
		tokens[h.KeeperID][h.Token] = true
	}
	var shared []string
	for k, toks := range tokens {
		if len(toks) > 1 {
			shared = append(shared, k)
		}
	}
	slices.Sort(shared)
	for _, k := range shared {
		fmt.Fprintf(w, "warning: keeper id %q is held by %d sessions at once (processes given one keeper id?): they exclude each other, but their locks show the same keeper\n", redact.URIs(k), len(tokens[k]))
	}
}
