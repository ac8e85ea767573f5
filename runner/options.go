package runner

import (
	"bytes"
	"fmt"
	"time"

	"github.com/mongolock/mongolock/lock"
)

// Defaults used by New. The lease timings (renew interval, renew deadline,
// retry period, release timeout) and the grace period are the Session's:
// see lock.NewSession.
const (
	// DefaultStallTimeout disables stall detection.
	DefaultStallTimeout = time.Duration(0)
	// DefaultCampaignAgain makes Run campaign again after a term ends.
	DefaultCampaignAgain = true
)

// Option configures a LeaderAwareRunner.
type Option func(*config) error

type config struct {
	gracePeriod   time.Duration
	stallTimeout  time.Duration
	campaignAgain bool

	onStarted   func(fence uint64)
	onStopped   func()
	onNewLeader func(keeperID string)

	value []byte // WithValue: published with every term
}

func defaultConfig() config {
	return config{
		stallTimeout:  DefaultStallTimeout, // gracePeriod 0: the session's
		campaignAgain: DefaultCampaignAgain,
	}
}

// WithGracePeriod sets how long the runner waits for a task to return after
// cancelling its context. A task still running then is reported with
// ErrTaskDidNotStop and abandoned. While a task winds down because the
// caller's context ended, the session still renews the lease. Default: the
// session's grace period (lock.WithGracePeriod, default 10s).
func WithGracePeriod(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithGracePeriod: %v is not positive", ErrInvalidOption, d)
		}
		c.gracePeriod = d
		return nil
	}
}

// WithStallTimeout enables stall detection: a task that does not call
// Heartbeat on its context within d (counted from its start, then from its
// last call) is considered hung. The runner ends the term, cancels the
// task's context with cause ErrStalled (which matches lock.ErrLeaseLost),
// and releases the lock once the task returned. Zero disables it. Default:
// DefaultStallTimeout (disabled).
func WithStallTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: WithStallTimeout: %v is negative", ErrInvalidOption, d)
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

// OnStartedLeading sets a function called when a term begins, with its
// fencing token, before the task starts. Default: none.
func OnStartedLeading(f func(fence uint64)) Option {
	return func(c *config) error {
		c.onStarted = f
		return nil
	}
}

// OnStoppedLeading sets a function called exactly once when a term that
// started ends, however it ends. When the lease was lost it is called after
// the task's context was cancelled, possibly before the task returned.
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

// WithValue sets a value the runner publishes with every term it leads
// (lock.Lease.SetValue), before OnStartedLeading and the task: how to
// reach this instance, say its address. Followers read it with the
// leader (LeaderInfo, lock.Locker.Holder, lock.Locker.Watch). A term
// whose value cannot be written is given up (released) and the runner
// campaigns again. At most lock.MaxValueSize bytes; the session's store
// must keep values (lock.ValueStore). SetValue changes it. Default: none.
func WithValue(v []byte) Option {
	return func(c *config) error {
		if err := lock.CheckValue(v); err != nil {
			return fmt.Errorf("%w: WithValue: %w", ErrInvalidOption, err)
		}
		c.value = bytes.Clone(v)
		return nil
	}
}
