// Package runner turns a lease (package lock) into leader election: it runs
// work only on the instance that holds one lock, and stops it as soon as the
// lease can no longer be trusted.
//
// Two shapes of work are served by a LeaderAwareRunner:
//
//   - Short, repeated tasks: call RunTaskOnLeader from a ticker on every
//     instance. It runs the task only on the leader, campaigning when this
//     instance does not lead and renewing when the renew interval has passed.
//   - One long-running leader task: Run campaigns until its context ends and
//     runs the task while it leads, renewing in the background.
//
// # Timing
//
// A lease lasts the Locker's TTL after its last acquire or renew, by the
// server's clock. The leader renews every renew interval and retries a
// failed renewal every retry period; a renewal that fails does not cost
// leadership as long as one succeeds before the renew deadline. The lease is
// trusted until the earlier of the Locker's own deadline and the renew
// deadline measured on the runner's monotonic clock from the sending of the
// last successful renewal (or the acquisition). Both pass before the server
// could let another keeper take over. At that instant the task's context is
// cancelled with cause lock.ErrLeaseLost, OnStoppedLeading is called, and
// once the task returned the lock is released (it may still be ours, just
// out of reach) and the runner campaigns again.
//
// The gap between the renew deadline and the TTL is the safety margin: New
// requires it to be at least the larger of MinSafetyMargin and a tenth of
// the TTL.
//
// A follower campaigns every retry period, so when a leader dies another
// instance starts within about TTL plus one retry period; when a leader stops
// gracefully it releases the lock, and another starts within one retry
// period.
//
// # What is promised, and what is not
//
// Callbacks: OnStartedLeading is called once per term, with the term's
// fencing token, before the task starts; OnStoppedLeading exactly once per
// term that started, never for one that did not; OnNewLeader whenever the
// observed leader changes. Callbacks run synchronously in the goroutine of
// Run, RunTaskOnLeader or Resign, so they must return quickly and must not
// call those methods. IsLeader, Fence and Leader never touch the database.
//
// Run returns only after its task returned and the release was tried, and
// leaves no goroutine behind, with one exception: Go cannot stop a goroutine,
// so a task that ignores its cancelled context for a grace period is
// abandoned and reported (logged, and an error wrapping ErrTaskDidNotStop).
// Its lease is neither renewed nor released, so it expires and another
// instance may take over while it still runs. This instance does not
// campaign again until the abandoned task has returned: RunTaskOnLeader
// returns an error wrapping ErrTaskDidNotStop without running anything, and
// Run waits for it before campaigning. A task therefore never runs twice at
// once on one runner.
//
// A failed release is retried every retry period within the release timeout
// (WithReleaseTimeout). If none succeeds the lock may still be ours: Resign,
// or Run when it stops later, tries again; otherwise the others wait for the
// lease to expire.
//
// Stall detection (WithStallTimeout) covers a task that hangs without
// ignoring anything: if it does not call Heartbeat often enough, the runner
// stops renewing and steps down, so a hung leader cannot hold the lock
// forever.
//
// Cancellation is cooperative and a lease is not a fence: a process that
// pauses (GC, swap, SIGSTOP) past its trust deadline may still act after
// another instance took over. Pass the fencing token (FenceFrom) to the
// resource you protect, and have it reject writes carrying a smaller one.
//
// The runner reads time from one clock (WithClock); the Locker's lease
// deadlines are compared with it, so both must use the same clock.
package runner
