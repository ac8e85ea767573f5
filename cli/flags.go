package cli

import (
	"time"

	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/scheduler"
)

// The checks of flag values the library would refuse, made before
// connecting so that the error names the flag, not the library's option
// (--ttl, not WithLockTTL). The rules are the library's: its limits and
// its collection name check.

// minSessionTTL is the shortest lease TTL a lock.Session runs with: its
// default renew deadline (two thirds of the TTL) must leave a safety
// margin of at least lock.MinSafetyMargin.
const minSessionTTL = 3 * lock.MinSafetyMargin

// checkTTL refuses a --ttl shorter than least or longer than lock.MaxTTL:
// least is lock.MinTTL for a Locker, minSessionTTL for the commands that
// take locks through a Session (migrate, the demo).
func checkTTL(ttl, least time.Duration) error {
	if ttl < least || ttl > lock.MaxTTL {
		return usagef("--ttl %v: want a lease TTL from %v to %v", ttl, least, lock.MaxTTL)
	}
	return nil
}

// checkCollection refuses a collection name MongoDB or the library would.
func checkCollection(flag, name string) error {
	if !mongoutil.ValidCollectionName(name) {
		return usagef("--%s %q: not a valid collection name", flag, name)
	}
	return nil
}

// checkRetention refuses a --history-retention the scheduler would.
func checkRetention(d time.Duration) error {
	if !scheduler.ValidHistoryRetention(d) {
		return usagef("--history-retention %v: want 0 (no history) or at least %v", d, scheduler.MinHistoryRetention)
	}
	return nil
}

// checkGlobals checks the global flags of a command that connects.
func (a *app) checkGlobals() error {
	switch {
	case a.g.db == "":
		return usagef("--db is empty")
	case a.g.timeout <= 0:
		return usagef("--timeout must be positive")
	}
	if err := checkCollection("collection", a.g.collection); err != nil {
		return err
	}
	return checkTTL(a.g.ttl, lock.MinTTL)
}
