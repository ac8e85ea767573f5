package lock

import (
	"fmt"
	"time"

	"github.com/rs/zerolog"
)

// Timing defaults of a Session. The renew interval, renew deadline and
// retry period are for a lease of DefaultTTL (30s); for another TTL an
// unset one is scaled in proportion (a 3s TTL gets 1s, 2s and 200ms), so
// the defaults always agree with each other and, for a TTL of at least
// 3 × MinSafetyMargin (300ms), with the TTL.
const (
	// DefaultRenewInterval is how long after the last successful renewal
	// (or the acquisition) the keep-alive renews: a third of the TTL.
	DefaultRenewInterval = 10 * time.Second
	// DefaultRenewDeadline is how long after sending the last successful
	// renewal a lease is trusted while renewals fail: two thirds of the
	// TTL, leaving a third as the safety margin.
	DefaultRenewDeadline = 20 * time.Second
	// DefaultRetryPeriod is how soon a failed renewal is retried, and the
	// longest pause of a waiting Lock: a fifteenth of the TTL.
	DefaultRetryPeriod = 2 * time.Second
	// DefaultReleaseTimeout bounds a release, and the release of
	// everything at Close, whatever the caller's context.
	DefaultReleaseTimeout = 5 * time.Second
	// DefaultGracePeriod is how long Do waits for its function to return
	// after cancelling its context.
	DefaultGracePeriod = 10 * time.Second
)

// MinSafetyMargin is the smallest gap NewSession accepts between the renew
// deadline and the TTL; the gap must also be at least a tenth of the TTL.
// It is what stands between the instant a holder stops trusting its lease
// and the instant anyone else may take it over: the work's time to notice
// its cancelled context, scheduling delays and clock drift come out of it.
const MinSafetyMargin = 100 * time.Millisecond

// minSafetyMargin is the gap between renew deadline and ttl required.
func minSafetyMargin(ttl time.Duration) time.Duration {
	return max(MinSafetyMargin, ttl/10)
}

// Timings are a Session's lease timings, defaults included.
type Timings struct {
	// TTL is the store's lease length.
	TTL time.Duration
	// RenewInterval: the keep-alive renews this long after the last
	// successful renewal.
	RenewInterval time.Duration
	// RenewDeadline: a lease is trusted this long after the sending of
	// its last successful renewal, and no longer.
	RenewDeadline time.Duration
	// RetryPeriod: failed renewals are retried this often; Lock polls at
	// most this far apart.
	RetryPeriod time.Duration
}

// SafetyMargin is TTL minus RenewDeadline: how long before anyone else can
// take a lock over its holder stops trusting the lease.
func (t Timings) SafetyMargin() time.Duration { return t.TTL - t.RenewDeadline }

type sessionConfig struct {
	keeperID       string
	timings        Timings
	releaseTimeout time.Duration
	gracePeriod    time.Duration
	observers      observers
	tracer         Tracer
}

// SessionOption configures a Session.
type SessionOption func(*sessionConfig) error

func positive(name string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%w: %s: %v is not positive", ErrInvalidOption, name, d)
	}
	return nil
}

// scaled returns a default meant for DefaultTTL, scaled to ttl.
func scaled(d, ttl time.Duration) time.Duration {
	return time.Duration(float64(d) * float64(ttl) / float64(DefaultTTL))
}

// DefaultTimings returns the timings a Session on a store with this TTL
// has when no timing option is given.
func DefaultTimings(ttl time.Duration) Timings {
	return Timings{
		TTL:           ttl,
		RenewInterval: scaled(DefaultRenewInterval, ttl),
		RenewDeadline: scaled(DefaultRenewDeadline, ttl),
		RetryPeriod:   scaled(DefaultRetryPeriod, ttl),
	}
}

// finish fills in the scaled defaults and checks that the timings agree.
func (c *sessionConfig) finish(ttl time.Duration) error {
	t := &c.timings
	t.TTL = ttl
	if ttl <= 0 {
		return fmt.Errorf("%w: store TTL %v is not positive", ErrInvalidOption, ttl)
	}
	def := DefaultTimings(ttl)
	if t.RenewInterval == 0 {
		t.RenewInterval = def.RenewInterval
	}
	if t.RenewDeadline == 0 {
		t.RenewDeadline = def.RenewDeadline
	}
	if t.RetryPeriod == 0 {
		t.RetryPeriod = def.RetryPeriod
	}
	switch {
	case t.RenewInterval <= 0 || t.RenewDeadline <= 0 || t.RetryPeriod <= 0:
		return fmt.Errorf("%w: store TTL %v is too short", ErrInvalidOption, ttl)
	case t.RenewInterval >= t.RenewDeadline:
		return fmt.Errorf("%w: WithRenewInterval (%v) must be shorter than WithRenewDeadline (%v)",
			ErrInvalidOption, t.RenewInterval, t.RenewDeadline)
	case t.RetryPeriod >= t.RenewDeadline-t.RenewInterval:
		return fmt.Errorf("%w: WithRetryPeriod (%v) must be shorter than WithRenewDeadline minus WithRenewInterval (%v): "+
			"a failed renewal must be retried before the lease stops being trusted",
			ErrInvalidOption, t.RetryPeriod, t.RenewDeadline-t.RenewInterval)
	case ttl-t.RenewDeadline < minSafetyMargin(ttl):
		return fmt.Errorf("%w: WithRenewDeadline (%v) must be shorter than the TTL (%v) "+
			"by at least %v, the larger of MinSafetyMargin (%v) and a tenth of the TTL",
			ErrInvalidOption, t.RenewDeadline, ttl, minSafetyMargin(ttl), MinSafetyMargin)
	}
	return nil
}

// WithKeeperID sets the keeper id the Session holds its locks as: the
// name Holder, logs and the command line show. Two Sessions with one
// keeper id still exclude each other (the package documentation), but
// cannot be told apart where keeper ids are shown, and a Session refused a
// lock by another with its id reports KeeperIDShared: give each process
// its own. Default: NewKeeperID().
func WithKeeperID(id string) SessionOption {
	return func(c *sessionConfig) error {
		if err := ValidateID("WithKeeperID", id); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		c.keeperID = id
		return nil
	}
}

// WithRenewInterval sets how long after the last successful renewal (or
// the acquisition) the keep-alive renews every lease. It must be shorter
// than the renew deadline. Default: DefaultRenewInterval (10s) scaled to
// the TTL, a third of it.
func WithRenewInterval(d time.Duration) SessionOption {
	return func(c *sessionConfig) error {
		if err := positive("WithRenewInterval", d); err != nil {
			return err
		}
		c.timings.RenewInterval = d
		return nil
	}
}

// WithRenewDeadline sets how long, from the sending of the last successful
// renewal (or the acquisition), a lease is trusted while renewals fail.
// When it passes, the lease ends with cause ErrLeaseLost. It must be
// shorter than the TTL by at least the larger of MinSafetyMargin (100ms)
// and a tenth of the TTL. Default: DefaultRenewDeadline (20s) scaled to
// the TTL, two thirds of it.
func WithRenewDeadline(d time.Duration) SessionOption {
	return func(c *sessionConfig) error {
		if err := positive("WithRenewDeadline", d); err != nil {
			return err
		}
		c.timings.RenewDeadline = d
		return nil
	}
}

// WithRetryPeriod sets how soon a failed renewal is retried, and the
// longest pause between a waiting Lock's attempts (each is jittered). It
// must be shorter than the renew deadline minus the renew interval, so a
// failed renewal is retried before the lease stops being trusted.
// Default: DefaultRetryPeriod (2s) scaled to the TTL, a fifteenth of it.
func WithRetryPeriod(d time.Duration) SessionOption {
	return func(c *sessionConfig) error {
		if err := positive("WithRetryPeriod", d); err != nil {
			return err
		}
		c.timings.RetryPeriod = d
		return nil
	}
}

// WithReleaseTimeout bounds each release, and the release of everything
// at Close. Default: DefaultReleaseTimeout (5s).
func WithReleaseTimeout(d time.Duration) SessionOption {
	return func(c *sessionConfig) error {
		if err := positive("WithReleaseTimeout", d); err != nil {
			return err
		}
		c.releaseTimeout = d
		return nil
	}
}

// WithGracePeriod sets how long Do waits for its function to return after
// cancelling its context; one still running then is abandoned and
// reported with ErrTaskDidNotStop. Default: DefaultGracePeriod (10s).
func WithGracePeriod(d time.Duration) SessionOption {
	return func(c *sessionConfig) error {
		if err := positive("WithGracePeriod", d); err != nil {
			return err
		}
		c.gracePeriod = d
		return nil
	}
}

// WithObserver adds an observer of the Session's events and of those of
// the runners, schedulers and migrators built on it. Several may be added.
// Default: none.
func WithObserver(o Observer) SessionOption {
	return func(c *sessionConfig) error {
		if o == nil {
			return fmt.Errorf("%w: WithObserver: nil observer", ErrInvalidOption)
		}
		c.observers = append(c.observers, o)
		return nil
	}
}

// WithTracer traces the Session's acquisitions, renewals and releases, and
// the terms and runs of the runners and schedulers built on it, with t (the
// tracing package gives one for OpenTelemetry). A Session has one tracer:
// the last given. Default: none, at no cost.
func WithTracer(t Tracer) SessionOption {
	return func(c *sessionConfig) error {
		if t == nil {
			return fmt.Errorf("%w: WithTracer: nil tracer", ErrInvalidOption)
		}
		c.tracer = t
		return nil
	}
}

// WithSessionLogger logs the Session's events, and those of everything
// built on it, to l (LogObserver). Default: no logging.
func WithSessionLogger(l zerolog.Logger) SessionOption {
	return func(c *sessionConfig) error {
		c.observers = append(c.observers, LogObserver(l))
		return nil
	}
}
