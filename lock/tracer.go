package lock

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Tracer traces the operations of a Session and of what is built on it:
// acquisitions, renewals and releases, the runner's terms and the
// scheduler's runs (WithTracer). The tracing package implements it with
// OpenTelemetry; this package imports none.
type Tracer interface {
	// Start begins a span for op, a child of the span ctx carries if any,
	// and returns a context derived from ctx that carries the new span (the
	// operation's round trips, and the work of a run or term, pass it on, so
	// an instrumented driver's command spans and the work's own spans
	// become its children) and the Span to end. It is called synchronously,
	// so it must be quick and must not call back into the Session; it may be
	// called from several goroutines at once.
	Start(ctx context.Context, op Op) (context.Context, Span)
}

// Span is an operation being traced. Its methods are called from one
// goroutine at a time.
type Span interface {
	// Event reports an event of the operation, as the Session's observers
	// get it: for an acquisition, renewal or release one per lock, for a
	// run the firing's events from RunStarted on, for a term TermStarted
	// and TermEnded.
	Event(Event)
	// End ends the span, once. err is why the operation failed; nil if it
	// did not. A refused acquisition did not fail, nor did a firing skipped
	// because its lock was held elsewhere, its claim was taken over or the
	// scheduler stopped.
	End(err error)
}

// OpKind says what operation an Op is.
type OpKind int

// Operations of a Session.
const (
	// OpAcquire: one acquisition of one or more locks (Mutex.AcquireLock,
	// each attempt of Mutex.Lock, AcquireLocks). Attempt counts Lock's
	// attempts.
	OpAcquire OpKind = iota + 1
	// OpRenew: a renewal of leases, by the keep-alive (all the leases of
	// the Session, in a span of its own; Attempt counts failed renewals in
	// a row, plus one) or by Lease.Renew.
	OpRenew
	// OpRelease: a release of one or more locks (ReleaseLock,
	// ReleaseLocks, Close, and the deletion of a lock a failed call may
	// have left the Session's). Fence is set when one lock is released.
	OpRelease
)

// Operations of the runner package.
const (
	// OpTerm: a leader term, from its acquisition to its end, with Fence.
	// Under LeaderAwareRunner.Run it is a child of Run's context and the
	// task's context carries it; a term begun by RunTaskOnLeader outlives
	// the call that began it, so it begins a trace of its own, linked to
	// that call.
	OpTerm OpKind = iota + 100
	// OpTask: a task run by RunTaskOnLeader, a child of the call's context,
	// linked to its term.
	OpTask
)

// Operations of the scheduler package.
const (
	// OpRun: a firing this instance claimed, from the claim won to its
	// last event (RunEnded, or FiringSkipped when it did not run), with
	// Job and Scheduled. The job's context carries it. It begins a trace of
	// its own: firings run under their job's lock, not under a leader's
	// term, so it has no link.
	OpRun OpKind = iota + 200
)

var opNames = map[OpKind]string{
	OpAcquire: "acquire", OpRenew: "renew", OpRelease: "release",
	OpTerm: "term", OpTask: "task", OpRun: "run",
}

func (k OpKind) String() string {
	if s, ok := opNames[k]; ok {
		return s
	}
	return fmt.Sprintf("op %d", int(k))
}

// Op is an operation to trace, as known when it begins; what is learned
// later (the fence of an acquisition, the outcome) comes in the events the
// Span gets. Fields that do not apply to its Kind are zero.
type Op struct {
	Kind OpKind
	// KeeperID is the Session's keeper id (Session.Trace fills it in).
	KeeperID string
	LockIDs  []string
	// Fence is the term's fencing token, when known as the operation
	// begins (a term, a release of one lock).
	Fence uint64
	// Attempt counts the tries, from 1; 0 when not counted.
	Attempt int
	// Job and Scheduled name a firing.
	Job       string
	Scheduled time.Time
	// Links are contexts carrying spans this operation is linked to but
	// is not a child of: a task run by RunTaskOnLeader links to its term. A
	// scheduler run would link to the leader term that started it, if a
	// leader-only mode of the scheduler started runs from a term; none does
	// yet.
	Links []context.Context
}

// noSpan is the Span of an untraced operation.
type noSpan struct{}

func (noSpan) Event(Event) {}
func (noSpan) End(error)   {}

// Traced reports whether the Session has a tracer (WithTracer), so that
// callers build no Op for nobody.
func (s *Session) Traced() bool { return s.cfg.tracer != nil }

// Trace begins a span for op with the Session's tracer, naming the
// Session's keeper if op names none. With no tracer it returns ctx and a
// Span that does nothing, at no cost. It is for the packages built on
// Sessions; check Traced before building an Op.
func (s *Session) Trace(ctx context.Context, op Op) (context.Context, Span) {
	t := s.cfg.tracer
	if t == nil {
		return ctx, noSpan{}
	}
	if op.KeeperID == "" {
		op.KeeperID = s.cfg.keeperID
	}
	tctx, sp := t.Start(ctx, op)
	if tctx == nil || sp == nil { // a broken Tracer must not break locking
		return ctx, noSpan{}
	}
	return tctx, sp
}

// trace is Trace for the Session's own operations: it builds the Op only
// when there is a tracer, with a copy of ids (so that ids does not escape).
func (s *Session) trace(ctx context.Context, kind OpKind, attempt int, fence uint64, ids []string) (context.Context, Span) {
	if s.cfg.tracer == nil {
		return ctx, noSpan{}
	}
	return s.Trace(ctx, Op{Kind: kind, LockIDs: slices.Clone(ids), Attempt: attempt, Fence: fence})
}
