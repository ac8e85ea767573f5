package mongotest

import (
	"strings"
	"sync"
	"testing"
)

// outage keeps server outages away from other tests. Every helper that hands
// out a client takes a read lock for its test (once per test tree) until the
// test's cleanup; Exclusive takes the write lock.
var outage struct {
	rw sync.RWMutex

	mu      sync.Mutex
	owner   string          // name of the test holding rw exclusively
	readers map[string]bool // names of tests holding (or waiting for) rw.RLock
}

// within reports whether test name is holder or one of its subtests.
func within(name, holder string) bool {
	return name == holder || strings.HasPrefix(name, holder+"/")
}

// heldBy returns the name of the test in tb's tree that already holds a lock,
// and whether it holds it exclusively.
func heldBy(name string) (holder string, exclusive bool) {
	if outage.owner != "" && within(name, outage.owner) {
		return outage.owner, true
	}
	for r := range outage.readers {
		if within(name, r) {
			return r, false
		}
	}
	return "", false
}

// share lets tb use the server alongside other tests until tb's cleanup. A
// test tree takes the read lock once: read-locking again while an outage test
// waits for the write lock would deadlock.
func share(tb testing.TB) {
	name := tb.Name()
	outage.mu.Lock()
	if holder, _ := heldBy(name); holder != "" {
		outage.mu.Unlock()
		return
	}
	if outage.readers == nil {
		outage.readers = make(map[string]bool)
	}
	outage.readers[name] = true
	outage.mu.Unlock()

	outage.rw.RLock()
	tb.Cleanup(func() {
		outage.mu.Lock()
		delete(outage.readers, name)
		outage.mu.Unlock()
		outage.rw.RUnlock()
	})
}

// Exclusive waits until no other test uses the server and keeps them all out
// until tb's cleanup. StopServer calls it; a test that stops the server must
// call it (or StopServer) before any other mongotest helper, and must not call
// t.Parallel.
func Exclusive(tb testing.TB) {
	tb.Helper()
	name := tb.Name()
	outage.mu.Lock()
	holder, exclusive := heldBy(name)
	outage.mu.Unlock()
	switch {
	case exclusive:
		return
	case holder != "":
		tb.Fatalf("mongotest: %s must call Exclusive (or StopServer) before any other mongotest helper", holder)
	}

	outage.rw.Lock()
	outage.mu.Lock()
	outage.owner = name
	outage.mu.Unlock()
	tb.Cleanup(func() {
		outage.mu.Lock()
		outage.owner = ""
		outage.mu.Unlock()
		outage.rw.Unlock()
	})
}
