//go:build !linux

package lock

import "time"

// sysBoot reads a clock that counts the time the host was suspended and
// that steps do not move: none is read here yet, so a suspend is seen
// only by the wall clock (elapsed.go).
func sysBoot() (time.Duration, bool) { return 0, false }
