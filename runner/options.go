package runner

import (
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/mongolock/mongolock/lock"
)

// Defaults used by New. The three timings are for a lease of lock.DefaultTTL
// (30s); when the Locker's TTL differs, an unset timing is scaled in
// proportion (a 3s TTL gets 1s, 2s and 200ms), so the defaults always agree
// with each other and, for a TTL of at least 3 × MinSafetyMargin (300ms),
// with the TTL.
const (
	// DefaultRenewInterval is how long after the last successful renewal (or
	// the acquisition) the leader renews: a third of the TTL.
	DefaultRenewInterval = 10 * time.Second
	// DefaultRenewDeadline is how long after sending the last successful
	// renewal the leader keeps trusting its lease while renewals fail: two
	// thirds of the TTL, leaving a third for clock drift and slow replies.
	DefaultRenewDeadline = 20 * time.Second
	// DefaultRetryPeriod is how often a follower campaigns, and how soon a
	// failed renewal is retried: a fifteenth of the TTL.
	DefaultRetryPeriod = 2 * time.Second

	// DefaultReleaseTimeout bounds the release at the end of a term.
	DefaultReleaseTimeout = 5 * time.Second
	// DefaultGracePeriod is how long the runner waits for a task to return
	// after cancelling its context.
	DefaultGracePeriod = 10 * time.Second
	// DefaultStallTimeout disables stall detection.
	DefaultStallTimeout = time.Duration(0)
	// DefaultCampaignAgain makes Run campaign again after a term ends.
	DefaultCampaignAgain = true
)

// MinSafetyMargin is the smallest gap New accepts between the renew deadline
// and the Locker's TTL; the gap must also be at least a tenth of the TTL.
// It is what stands between the instant the leader stops trusting its lease
// and the instant another instance may take over: the task's time to notice
// its cancelled context, scheduling delays and clock drift all come out of
// it. With the default renew deadline (two thirds of the TTL) the runner
// therefore needs a TTL of at least 300ms.
const MinSafetyMargin = 100 * time.Millisecond

// safetyMarginDivisor: the gap is at least TTL/safetyMarginDivisor.
const safetyMarginDivisor = 10

// minSafetyMargin is the gap between renew deadline and ttl New requires.
func minSafetyMargin(ttl time.Duration) time.Duration {
	return max(MinSafetyMargin, ttl/safetyMarginDivisor)
}

// retryJitter spreads campaigns: each wait is drawn uniformly from
// [1-retryJitter, 1] × RetryPeriod, so a follower campaigns at least once per
// RetryPeriod and followers do not move in step.
const retryJitter = 0.2

// Option configures a LeaderAwareRunner.
type Option func(*config) error

type config struct {
	renewInterval  time.Duration // 0: scaled default
	renewDeadline  time.Duration // 0: scaled default
	retryPeriod    time.Duration // 0: scaled default
	releaseTimeout time.Duration
	gracePeriod    time.Duration
	stallTimeout   time.Duration
	campaignAgain  bool
	clock          clockwork.Clock
	log            zerolog.Logger

	onStarted   func(fence uint64)
	onStopped   func()
	onNewLeader func(keeperID string)
}

func defaultConfig() config {
	return config{
		releaseTimeout: DefaultReleaseTimeout,
		gracePeriod:    DefaultGracePeriod,
		stallTimeout:   DefaultStallTimeout,
		campaignAgain:  DefaultCampaignAgain,
		clock:          clockwork.NewRealClock(),
		log:            zerolog.Nop(),
	}
}

// scaled returns a default meant for lock.DefaultTTL, scaled to ttl.
func scaled(d, ttl time.Duration) time.Duration {
	return time.Duration(float64(d) * float64(ttl) / float64(lock.DefaultTTL))
}

// finish fills in the scaled defaults and checks that the timings agree.
func (c *config) finish(ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("%w: locker TTL %v must be > 0", ErrInvalidOption, ttl)
	}
	if c.renewInterval == 0 {
		c.renewInterval = scaled(DefaultRenewInterval, ttl)
	}
	if c.renewDeadline == 0 {
		c.renewDeadline = scaled(DefaultRenewDeadline, ttl)
	}
	if c.retryPeriod == 0 {
		c.retryPeriod = scaled(DefaultRetryPeriod, ttl)
	}
	switch {
	case c.renewInterval <= 0 || c.renewDeadline <= 0 || c.retryPeriod <= 0:
		// Only a TTL of a few nanoseconds scales a default to zero.
		return fmt.Errorf("%w: locker TTL %v is too short", ErrInvalidOption, ttl)
	case c.renewInterval >= c.renewDeadline:
		return fmt.Errorf("%w: WithRenewInterval (%v) must be shorter than WithRenewDeadline (%v)",
			ErrInvalidOption, c.renewInterval, c.renewDeadline)
	case ttl-c.renewDeadline < minSafetyMargin(ttl):
		return fmt.Errorf("%w: WithRenewDeadline (%v) must be shorter than the locker's TTL (%v) "+
			"by at least %v, the larger of MinSafetyMargin (%v) and a tenth of the TTL",
			ErrInvalidOption, c.renewDeadline, ttl, minSafetyMargin(ttl), MinSafetyMargin)
	}
	return nil
}

func positive(name string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%w: %s(%v): must be > 0", ErrInvalidOption, name, d)
	}
	return nil
}

// WithRenewInterval sets how long after the last successful renewal (or the
// acquisition) the leader renews its lease. It must be shorter than the renew
// deadline. Default: DefaultRenewInterval (10s) scaled to the Locker's TTL,
// a third of it.
func WithRenewInterval(d time.Duration) Option {
	return func(c *config) error {
		if err := positive("WithRenewInterval", d); err != nil {
			return err
		}
		c.renewInterval = d
		return nil
	}
}

// WithRenewDeadline sets how long, measured on the runner's clock from the
// sending of the last successful renewal (or the acquisition), the leader
// trusts its lease while renewals fail. When it passes, the task's context is
// cancelled with cause lock.ErrLeaseLost. It must be shorter than the
// Locker's TTL by at least the larger of MinSafetyMargin (100ms) and a tenth
// of the TTL; the gap is the margin for the task to stop, clock drift and
// scheduling delays. Default: DefaultRenewDeadline (20s) scaled to the
// Locker's TTL, two thirds of it.
func WithRenewDeadline(d time.Duration) Option {
	return func(c *config) error {
		if err := positive("WithRenewDeadline", d); err != nil {
			return err
		}
		c.renewDeadline = d
		return nil
	}
}

// WithRetryPeriod sets how often Run campaigns while another instance leads
// (each wait is jittered down by up to 20%), and how soon a failed renewal is
// retried. Failover after a leader dies takes at most about TTL plus this.
// Default: DefaultRetryPeriod (2s) scaled to the Locker's TTL, a fifteenth
// of it.
func WithRetryPeriod(d time.Duration) Option {
	return func(c *config) error {
		if err := positive("WithRetryPeriod", d); err != nil {
			return err
		}
		c.retryPeriod = d
		return nil
	}
}

// WithReleaseTimeout bounds the release of the lock at the end of a term.
// Default: DefaultReleaseTimeout (5s).
func WithReleaseTimeout(d time.Duration) Option {
	return func(c *config) error {
		if err := positive("WithReleaseTimeout", d); err != nil {
			return err
		}
		c.releaseTimeout = d
		return nil
	}
}

// WithGracePeriod sets how long the runner waits for a task to return after
// cancelling its context. A task still running then is reported with
// ErrTaskDidNotStop and abandoned. While a task winds down because the
// caller's context ended, the lease is still renewed. Default:
// DefaultGracePeriod (10s).
func WithGracePeriod(d time.Duration) Option {
	return func(c *config) error {
		if err := positive("WithGracePeriod", d); err != nil {
			return err
		}
		c.gracePeriod = d
		return nil
	}
}

// WithStallTimeout enables stall detection: a task that does not call
// Heartbeat on its context within d (counted from its start, then from its
// last call) is considered hung. The runner stops renewing, cancels the
// task's context with a cause matching ErrStalled and lock.ErrLeaseLost, and
// steps down. Zero disables it. Default: DefaultStallTimeout (disabled).
func WithStallTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: WithStallTimeout(%v): must be >= 0", ErrInvalidOption, d)
		}
		c.stallTimeout = d
		return nil
	}
}

// WithCampaignAgain sets what Run does after a term ends (the task returned,
// or the lease was lost): campaign again (true), or return (false).
// Default: DefaultCampaignAgain (true).
func WithCampaignAgain(again bool) Option {
	return func(c *config) error {
		c.campaignAgain = again
		return nil
	}
}

// WithClock sets the clock of every time read and timer, for tests. Lease
// deadlines reported by the Locker are compared with it, so it must be the
// clock the Locker uses too (lock.WithClock). Default: the system clock.
func WithClock(clk clockwork.Clock) Option {
	return func(c *config) error {
		if clk == nil {
			return fmt.Errorf("%w: WithClock(nil)", ErrInvalidOption)
		}
		c.clock = clk
		return nil
	}
}

// WithLogger sets the logger. Default: zerolog.Nop().
func WithLogger(l zerolog.Logger) Option {
	return func(c *config) error {
		c.log = l
		return nil
	}
}

// OnStartedLeading sets a function called when a term begins, with its
// fencing token, before the task starts. Default: none.
func OnStartedLeading(f func(fence uint64)) Option {
	return func(c *config) error {
		c.onStarted = f
		return nil
	}
}

// OnStoppedLeading sets a function called exactly once when a term that
// started ends, however it ends. When the lease was lost it is called right
// after the task's context is cancelled, possibly before the task returned.
// Default: none.
func OnStoppedLeading(f func()) Option {
	return func(c *config) error {
		c.onStopped = f
		return nil
	}
}

// OnNewLeader sets a function called when the runner observes a different
// leader than before, itself included. Followers learn the leader when a
// campaign fails, so a change is seen within a retry period of Run, or at the
// next RunTaskOnLeader. Default: none.
func OnNewLeader(f func(keeperID string)) Option {
	return func(c *config) error {
		c.onNewLeader = f
		return nil
	}
}
