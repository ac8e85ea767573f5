package ui

import (
	"fmt"
	"sync"

	"github.com/mongolock/mongolock/lock"
)

// badLog is the dashboard's one report of the documents its reads skip
// (lock.BadDocument), of any collection: a warning in its log, once per
// document and field, since every refresh reads them again.
type badLog struct {
	mu   sync.Mutex
	seen map[string]bool
}

// maxBadSeen bounds the documents badLog remembers; past it, it forgets
// them all and warns again.
const maxBadSeen = 10000

// reportBad logs each of bad that it has not logged yet.
func (h *Handler) reportBad(bad ...lock.BadDocument) {
	for _, b := range bad {
		key := b.Collection + "\x00" + fmt.Sprint(b.ID) + "\x00" + b.Field
		h.bad.mu.Lock()
		if h.bad.seen == nil || len(h.bad.seen) >= maxBadSeen {
			h.bad.seen = make(map[string]bool)
		}
		seen := h.bad.seen[key]
		h.bad.seen[key] = true
		h.bad.mu.Unlock()
		if !seen {
			h.cfg.log.Warn().Str("collection", b.Collection).Str("id", h.cfg.redact(fmt.Sprint(b.ID))).Str("field", b.Field).
				Str("problem", h.cfg.redact(b.Problem)).Msg("skipped a bad document")
		}
	}
}
