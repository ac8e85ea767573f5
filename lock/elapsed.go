package lock

import "time"

// A lease's trust is measured on the monotonic clock, which a clock step
// does not move. But the monotonic clock Go reads (CLOCK_MONOTONIC on
// Linux) stops while the host is suspended, and a hypervisor pausing a VM
// often stops it too, while the lease runs out on the server all the same;
// the wall clock, put right on resume, shows that time. So every "how long
// is left" takes the smaller of the two clocks' answers, and every "how
// much time has passed" the larger, when it must not be underestimated:
// a suspend ends the leases it outlasted, and a wall clock stepped forward
// ends leases early (never late). A clock without monotonic readings (a
// fake clock, a testing/synctest bubble) gives the same answer on both.

// left returns how long until deadline at now, by whichever clock says
// less.
func left(deadline, now time.Time) time.Duration {
	return min(deadline.Sub(now), deadline.Round(0).Sub(now.Round(0)))
}

// elapsedMax returns the time from then to now by whichever clock says
// more.
func elapsedMax(then, now time.Time) time.Duration {
	return max(now.Sub(then), now.Round(0).Sub(then.Round(0)))
}

// elapsedMin returns the time from then to now by whichever clock says
// less.
func elapsedMin(then, now time.Time) time.Duration {
	return min(now.Sub(then), now.Round(0).Sub(then.Round(0)))
}
