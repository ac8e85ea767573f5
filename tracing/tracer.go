package tracing

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/mongolock/mongolock/lock"
)

// ScopeName is the instrumentation scope of the spans: the name the Tracer
// asks its TracerProvider for.
const ScopeName = "github.com/mongolock/mongolock/tracing"

// Attribute keys of the spans; see the package documentation.
const (
	KeyLockID    = attribute.Key("mongolock.lock.id")
	KeyLockIDs   = attribute.Key("mongolock.lock.ids")
	KeyLockCount = attribute.Key("mongolock.lock.count")
	KeyKeeperID  = attribute.Key("mongolock.keeper.id")
	KeyFence     = attribute.Key("mongolock.fence")
	KeyAttempt   = attribute.Key("mongolock.attempt")
	KeyJob       = attribute.Key("mongolock.job")
	KeyScheduled = attribute.Key("mongolock.firing.scheduled")
	KeyLateness  = attribute.Key("mongolock.firing.lateness")
	KeyOutcome   = attribute.Key("mongolock.outcome")
	KeyReason    = attribute.Key("mongolock.reason")
	KeyError     = attribute.Key("mongolock.error")
	KeyRetries   = attribute.Key("mongolock.retries")
	KeyDelay     = attribute.Key("mongolock.retry.delay")
	KeyClaimant  = attribute.Key("mongolock.firing.claimant")
)

// MaxLockIDs bounds the ids listed in mongolock.lock.ids; mongolock.lock.count
// gives the number of locks.
const MaxLockIDs = 100

// Outcomes (mongolock.outcome) besides those of scheduler runs
// ("succeeded", "failed") and lock events.
const (
	// OutcomeMixed: the locks of one operation ended differently; the
	// span's events say how.
	OutcomeMixed = "mixed"
	// OutcomeUnknown: a run that reported no end (its job called
	// runtime.Goexit).
	OutcomeUnknown = "unknown"
)

// Tracer traces mongolock's operations as OpenTelemetry spans. Give it to
// a Session with lock.WithTracer. It is safe for concurrent use.
type Tracer struct {
	tracer trace.Tracer
	filter func(lock.Op) bool
}

var _ lock.Tracer = (*Tracer)(nil)

// Option configures a Tracer.
type Option func(*Tracer) error

// WithFilter traces only the operations keep returns true for; the others
// get no span, and their round trips stay children of the caller's span.
// For example, to leave out the keep-alive's renewals (a trace of their own
// every renew interval):
//
//	tracing.WithFilter(func(op lock.Op) bool { return op.Kind != lock.OpRenew })
//
// Default: every operation.
func WithFilter(keep func(lock.Op) bool) Option {
	return func(t *Tracer) error {
		if keep == nil {
			return errors.New("tracing: WithFilter: nil function")
		}
		t.filter = keep
		return nil
	}
}

// New returns a Tracer that starts its spans with tp's tracer for
// ScopeName. It uses only tp: pass otel.GetTracerProvider() to use the
// global one.
func New(tp trace.TracerProvider, opts ...Option) (*Tracer, error) {
	if tp == nil {
		return nil, errors.New("tracing: New: nil TracerProvider")
	}
	t := &Tracer{tracer: tp.Tracer(ScopeName)}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("tracing: New: nil Option")
		}
		if err := o(t); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// SpanName is the name of the spans of operations of kind k:
// "mongolock." followed by k ("mongolock.acquire").
func SpanName(k lock.OpKind) string { return "mongolock." + k.String() }

// Start begins the span of op (lock.Tracer).
func (t *Tracer) Start(ctx context.Context, op lock.Op) (context.Context, lock.Span) {
	if t.filter != nil && !t.filter(op) {
		return ctx, noSpan{}
	}
	attrs := make([]attribute.KeyValue, 0, 8)
	if op.KeeperID != "" {
		attrs = append(attrs, KeyKeeperID.String(op.KeeperID))
	}
	switch n := len(op.LockIDs); {
	case n == 1:
		attrs = append(attrs, KeyLockID.String(op.LockIDs[0]))
	case n > 1:
		attrs = append(attrs, KeyLockIDs.StringSlice(op.LockIDs[:min(n, MaxLockIDs)]), KeyLockCount.Int(n))
	}
	if op.Fence != 0 {
		attrs = append(attrs, fence(op.Fence))
	}
	if op.Attempt > 0 {
		attrs = append(attrs, KeyAttempt.Int(op.Attempt))
	}
	if op.Job != "" {
		attrs = append(attrs, KeyJob.String(op.Job))
	}
	if !op.Scheduled.IsZero() {
		attrs = append(attrs, KeyScheduled.String(op.Scheduled.UTC().Format(time.RFC3339Nano)))
	}
	var links []trace.Link
	for _, l := range op.Links {
		if l == nil {
			continue
		}
		if sc := trace.SpanContextFromContext(l); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	ctx, sp := t.tracer.Start(ctx, SpanName(op.Kind),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...), trace.WithLinks(links...))
	return ctx, &span{sp: sp, kind: op.Kind, many: len(op.LockIDs) > 1}
}

// fence is the mongolock.fence attribute. OpenTelemetry has no unsigned
// integers; tokens stay below 2^63 (epoch seconds << 32).
func fence(f uint64) attribute.KeyValue { return KeyFence.Int64(int64(f)) }

// span is the lock.Span of a traced operation. Its methods are called from
// one goroutine at a time.
type span struct {
	sp      trace.Span
	kind    lock.OpKind
	many    bool // the operation is on several locks
	outcome string
	reason  string
	fence   uint64
	attempt int
	retries int // RunRetrying events
}

// Event records e: on an operation on several locks, an event of the span
// for each lock that did not end as it should (refused, failed, lost); on
// the others, the outcome, reason, fence and attempt the span ends with,
// and as events of the span RunStarted, RunRetrying, FiringTakenOver and
// the control events (JobPaused...).
func (s *span) Event(e lock.Event) {
	out := outcomeOf(e)
	if s.many {
		switch {
		case out == "":
		case s.outcome == "":
			s.outcome = out
		case s.outcome != out:
			s.outcome = OutcomeMixed
		}
		if out != "" && !succeeded(out) {
			s.sp.AddEvent(out, trace.WithTimestamp(e.At), trace.WithAttributes(eventAttrs(e)...))
		}
		return
	}
	switch e.Kind {
	case lock.RunStarted:
		s.sp.AddEvent("run started", trace.WithTimestamp(e.At),
			trace.WithAttributes(KeyLateness.Float64(e.Lateness.Seconds())))
	case lock.RunRetrying:
		// Not the span's attempt, which counts the tries taking the lock.
		s.retries++
		a := []attribute.KeyValue{KeyAttempt.Int(e.Attempt), KeyDelay.Float64(e.Took.Seconds())}
		if e.Err != nil {
			a = append(a, KeyError.String(e.Err.Error()))
		}
		s.sp.AddEvent(e.Kind.String(), trace.WithTimestamp(e.At), trace.WithAttributes(a...))
		return
	case lock.FiringTakenOver:
		s.sp.AddEvent(e.Kind.String(), trace.WithTimestamp(e.At), trace.WithAttributes(KeyClaimant.String(e.Leader)))
	case lock.JobPaused, lock.JobResumed, lock.JobTriggered, lock.JobRemoved:
		var a []attribute.KeyValue
		if e.Reason != "" {
			a = append(a, KeyReason.String(e.Reason))
		}
		s.sp.AddEvent(e.Kind.String(), trace.WithTimestamp(e.At), trace.WithAttributes(a...))
		return
	}
	if out != "" {
		s.outcome = out
		s.reason = e.Reason
	}
	if e.Fence != 0 {
		s.fence = e.Fence
	}
	if e.Attempt > 0 {
		s.attempt = e.Attempt
	}
}

// eventAttrs are the attributes of an event of the span of an operation
// on several locks.
func eventAttrs(e lock.Event) []attribute.KeyValue {
	a := []attribute.KeyValue{KeyLockID.String(e.LockID)}
	if e.Fence != 0 {
		a = append(a, fence(e.Fence))
	}
	if e.Reason != "" {
		a = append(a, KeyReason.String(e.Reason))
	}
	if e.Err != nil {
		a = append(a, KeyError.String(e.Err.Error()))
	}
	return a
}

// End ends the span with its outcome, and status Error if err is set.
func (s *span) End(err error) {
	out := s.outcome
	if out == "" {
		out = defaultOutcome(s.kind, err)
	}
	attrs := []attribute.KeyValue{KeyOutcome.String(out)}
	if s.reason != "" {
		attrs = append(attrs, KeyReason.String(s.reason))
	}
	if s.fence != 0 {
		attrs = append(attrs, fence(s.fence))
	}
	if s.attempt > 0 {
		attrs = append(attrs, KeyAttempt.Int(s.attempt))
	}
	if s.retries > 0 {
		attrs = append(attrs, KeyRetries.Int(s.retries))
	}
	s.sp.SetAttributes(attrs...)
	if err != nil {
		s.sp.RecordError(err)
		s.sp.SetStatus(codes.Error, err.Error())
	}
	s.sp.End()
}

// outcomeOf is the outcome an event reports, "" for events that do not
// end anything (RunStarted, TermStarted).
func outcomeOf(e lock.Event) string {
	switch e.Kind {
	case lock.Acquired:
		return "acquired"
	case lock.Refused:
		return "refused"
	case lock.AcquireFailed, lock.RenewFailed:
		return "failed"
	case lock.Renewed:
		return "renewed"
	case lock.LeaseLost:
		return "lost"
	case lock.Released:
		if e.Err != nil {
			return "failed"
		}
		return "released"
	case lock.RunEnded:
		return e.Outcome
	case lock.FiringSkipped:
		return "skipped"
	case lock.FiringLost:
		return "claimed elsewhere"
	case lock.TermEnded:
		switch {
		case e.Err == nil, errors.Is(e.Err, lock.ErrSessionClosed):
			return "ended"
		case errors.Is(e.Err, lock.ErrLeaseLost):
			return "lost"
		}
		return "failed"
	}
	return ""
}

// succeeded reports whether out is what an operation on several locks
// wants for each.
func succeeded(out string) bool {
	return out == "acquired" || out == "renewed" || out == "released"
}

// defaultOutcome is the outcome of a span that got no event that ends
// anything: a release with no event (a lock a failed call may have left),
// a runner task, a run whose job ended its goroutine (runtime.Goexit).
func defaultOutcome(k lock.OpKind, err error) string {
	switch {
	case err != nil:
		return "failed"
	case k == lock.OpRelease:
		return "released"
	case k == lock.OpRun:
		return OutcomeUnknown
	}
	return "succeeded"
}

// noSpan is the Span of an operation the filter leaves out.
type noSpan struct{}

func (noSpan) Event(lock.Event) {}
func (noSpan) End(error)        {}
