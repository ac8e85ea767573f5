//go:build linux

package lock

import (
	"time"

	"golang.org/x/sys/unix"
)

// sysBoot reads CLOCK_BOOTTIME: like CLOCK_MONOTONIC, which Go's monotonic
// readings come from, not moved by clock steps, but counting the time the
// host was suspended.
func sysBoot() (time.Duration, bool) {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
