// Package runner turns a lock (package lock) into leader election: it runs
// work only on the instance that holds one lock, and stops it as soon as the
// lease can no longer be trusted.
//
//	session, err := lock.NewSession(locker) // one per process; it renews the lease
//	if err != nil { ... }
//	defer session.Close()
//	r, err := runner.New(session, "billing-leader")
//	if err != nil { ... }
//	err = r.Run(ctx, func(ctx context.Context) error {
//		fence, _ := runner.FenceFrom(ctx) // pass it with every write
//		...                               // until ctx is cancelled
//		return nil
//	})
//
// Two shapes of work are served by a LeaderAwareRunner:
//
//   - Short, repeated tasks: call RunTaskOnLeader from a ticker on every
//     instance. It runs the task only on the leader, campaigning when this
//     instance does not lead. Leadership lasts between calls.
//   - One long-running leader task: Run campaigns until its context ends and
//     runs the task while it leads.
//
// # Finding the leader
//
// WithValue publishes a value with every term (the instance's address,
// say), written before the task starts; SetValue changes it while leading.
// LeaderInfo returns the leader as last observed, its value and its fence
// together, without a round trip: a follower's view is as of its last
// campaign. A program or tool that must react to each change follows the
// lock with lock.Locker.Watch.
//
// # Term log
//
// A runner's terms are events of its Session (lock.TermStarted and
// lock.TermEnded). TermLog, an observer of them, records each term in
// MongoDB (DefaultTermsCollection), at its start and at its end, for the
// dashboard (package ui) and for operators: LoadTerms reads them back, and
// the failover gap before each term. Its writes are not part of the
// election and never delay it.
//
// # Timing
//
// The runner holds its lock through a Mutex of a lock.Session, whose one
// keep-alive renews the lease; the timings (renew interval, renew deadline,
// retry period, release timeout) and the clock are the session's (see
// lock.NewSession). A renewal that fails does not cost leadership as long as
// one succeeds before the renew deadline. When the lease can no longer be
// trusted, a safety margin before any other keeper could take the lock over,
// the session ends it: the task's context is cancelled with cause
// lock.ErrLeaseLost, OnStoppedLeading is called, and once the task returned
// the lock is released (it may still be ours, just out of reach) and Run
// campaigns again.
//
// A follower campaigns every retry period (less a random fifth), so when a
// leader dies another instance starts within about TTL plus one retry
// period; when a leader stops gracefully it releases the lock, and another
// starts within one retry period.
//
// # What is promised, and what is not
//
// Terms do not overlap: a runner starts a term only while it holds a trusted
// lease, and never while a task of an earlier term still runs. Callbacks:
// OnStartedLeading is called once per term, with the term's fencing token,
// before the task starts; OnStoppedLeading exactly once per term that
// started, never for one that did not; OnNewLeader whenever the observed
// leader changes. Callbacks run synchronously in the goroutine of Run,
// RunTaskOnLeader or Resign, so they must return quickly and must not call
// those methods. IsLeader, Fence, Leader and LeaderInfo never touch the
// database.
//
// Run returns only after its task returned and the release was tried, and
// leaves no goroutine behind, with one exception: Go cannot stop a goroutine,
// so a task that ignores its cancelled context for a grace period is
// abandoned and reported (an error wrapping ErrTaskDidNotStop). Its lease
// is no longer renewed, so another instance takes over once it expires (a
// fence is what protects a resource from such a task), but its lock is not
// released while it runs, so nothing in this session takes it beside the
// task; the lock is released once it returns. This instance does not campaign again until then:
// RunTaskOnLeader returns an error wrapping ErrTaskDidNotStop without
// running anything, and Run waits for it before campaigning. A task
// therefore never runs twice at once on one runner.
//
// A task that panics ends its term (a lock.TermEnded event, Reason "task
// panicked at:" and the stack, Err wrapping ErrTaskPanicked), its lock is
// released so another instance takes over at once, and the panic is raised
// again in the goroutine that called Run or RunTaskOnLeader, with the
// task's value. That is what lock.Session.Do does, and for the same
// reason: the runner is the caller's own code running under a lock, so a
// panic is the caller's to recover or to crash on, as if the task had run
// in its goroutine; returning an error instead would let Run campaign
// again and run the bug again. (The scheduler recovers instead, because a
// job is not called by the code that registered it: a panic there is a
// failed run, recorded in the job's history.) A task that panics after it
// was abandoned has no caller left: its panic is dropped, as Session.Do
// drops it, and its lock released.
//
// Stopping Run (its context ends) is a normal stop: Run returns nil once
// its task returned (within the grace period) and the release was tried
// (within the session's release timeout, lock.WithReleaseTimeout, default
// 5s, also when the database is down).
//
// A failed release is retried by the session within its release timeout.
// If none succeeds the lock may still be ours: Resign, Run when it stops
// later, or closing the session tries again, again within the release
// timeout; otherwise the others wait for the lease to expire.
//
// Stall detection (WithStallTimeout) covers a task that hangs without
// ignoring anything: if it does not call Heartbeat often enough, the runner
// cancels it with cause ErrStalled and steps down, releasing the lock once
// the task returned, so a hung leader that heeds its context cannot hold the
// lock forever (one that ignores it too is abandoned, as above).
//
// Cancellation is cooperative and a lease is not a fence: a process that
// pauses (GC, swap, SIGSTOP) past its trust deadline may still act after
// another instance took over. Pass the fencing token (FenceFrom) to the
// resource you protect, and have it reject writes carrying a smaller one.
//
// # Candidates
//
// Every runner on a lock campaigns for it unless it is an observer
// (WithNeverLead): an observer never campaigns and never runs a task, even
// when it is alone, but reads who leads (Leader, OnNewLeader) every retry
// period under Run and at each RunTaskOnLeader call.
//
// A runner with a priority (WithPriority) is a candidate. From its first
// campaign it holds a candidacy lock, CandidatePrefix(lockID) followed by
// its priority and keeper id, which its session's one keep-alive renews
// with its other leases; it keeps it while it leads (a leader ignores its
// own), withdraws it when it resigns or Run returns, and a candidate that
// dies loses it with its lease. While it leads it
// lists the candidacies every retry period (one read), and steps down when
// one of a strictly higher priority has been seen waiting for the
// preference grace (WithPreferenceGrace, DefaultPreferenceGrace) and its
// own term has lasted as long. So:
//
//   - equal priorities never swap, and a lower one never displaces a
//     higher one;
//   - the grace is counted on the leader's clock from when it first saw
//     that candidacy (a candidate that comes and goes starts again), so a
//     candidate that flaps faster than the grace never takes over;
//   - each term lasts at least the grace before stepping down for
//     preference: at most one preference handover per grace, however the
//     candidates come and go;
//   - a follower that sees a higher candidate waiting skips its campaign
//     for up to two retry periods while the lock is free, so the preferred
//     one takes it rather than the next in line (and if it cannot, the
//     others lead after that).
//
// Only runners with WithPriority take part: one without it neither
// publishes a candidacy nor steps down for one. Stepping down is
// cooperative: the task's context is cancelled with a cause wrapping
// ErrSteppedDown that names the candidate, so the task stops at a point it
// chooses (Stepping down, below). The session's store must list locks by
// prefix (a *lock.Locker does). Version-aware preference, the newest build
// leading during a rolling deploy, is one use: give each instance its
// build number as priority (see Example_preferNewestBuild).
//
// # Stepping down
//
// A leader that steps down with a good lease releases it only after its
// task returned, so no other instance's task starts while it still runs:
//
//   - Run's context ends (a clean stop): the task's context is cancelled
//     (context.Canceled), the lease is renewed until the task returns, then
//     released.
//   - A preference handover: the same, with a cause wrapping ErrSteppedDown.
//   - Resign: a RunTaskOnLeader task then running is cancelled with a cause
//     wrapping ErrSteppedDown; Resign releases once it returned.
//
// In each case a task still running a grace period (WithGracePeriod) after
// it was told to stop is abandoned (ErrTaskDidNotStop, lock.TaskAbandoned):
// its lease is no longer renewed and is left to lapse, never released under
// it, and its lock is released once it returns. Another instance may then
// lead once the lease expired while the abandoned task still runs; the
// fencing token is what protects the resource from it. When the lease is
// lost (lock.ErrLeaseLost) there is nothing to wait for: the lock may
// already be another's, and the term ends at once.
//
// # Events
//
// The runner emits events through its session's observers
// (lock.WithObserver; lock.WithSessionSlog or lock.WithSessionLogger logs
// them), each exactly once per occurrence, with the lock id, the session's
// keeper id and the fence:
//
//   - lock.TermStarted when a term begins, before OnStartedLeading.
//     Remaining is how long the new lease is trusted for.
//   - lock.TermEnded when a term that started ends, before
//     OnStoppedLeading. Took is how long it led. Reason and Err say why:
//     "lease lost" (Err lock.ErrLeaseLost) or "session closed" (Err
//     lock.ErrSessionClosed); "task stalled" (Err ErrStalled); "task did not
//     stop" (Err ErrTaskDidNotStop: the task was abandoned after the
//     caller's context ended); "task panicked at:" and the stack (Err
//     wraps ErrTaskPanicked and the panic's value); under Run, "task
//     failed" (Err is the task's error), "task returned" or "context
//     ended"; "resigned" (Err nil, or wrapping ErrSteppedDown when a
//     running task was told to stop); "stepped down for a preferred
//     candidate" (Err wraps ErrSteppedDown and names it); and
//     "superseded by a new campaign" (Run ended a term RunTaskOnLeader left).
//     A term lost between RunTaskOnLeader calls is reported by the next call,
//     with Took up to when the lease stopped being trusted.
//   - lock.LeaderSeen when the observed leader changes, before OnNewLeader:
//     Leader is the new leader's keeper id, this keeper's own when it
//     starts leading.
//   - lock.TaskAbandoned when a task ignored its cancelled context for the
//     grace period (Err ErrTaskDidNotStop), whether or not its term had
//     already ended; its lock is released (lock.Released, same fence) once
//     it returns.
//
// The session adds its own events for the lock (acquired, refused, renewed,
// lost, released).
//
// With a tracer (lock.WithTracer; the tracing package traces with
// OpenTelemetry), each term is a span (lock.OpTerm) from its acquisition to
// its TermEnded. Under Run it is a child of Run's context and the task's
// context carries it; a term begun by RunTaskOnLeader outlives the call, so
// it begins a trace of its own, linked to the call, and each task is a span
// (lock.OpTask) of its call's trace, linked to the term.
package runner
