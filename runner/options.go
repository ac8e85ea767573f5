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
	// DefaultPreferenceGrace is how long a higher-priority candidate must
	// have been seen waiting, and the current term must have lasted,
	// before a leader steps down for it (WithPriority).
	DefaultPreferenceGrace = 30 * time.Second
)

// Option configures a LeaderAwareRunner.
type Option func(*config) error

type config struct {
	gracePeriod   time.Duration
	stallTimeout  time.Duration
	campaignAgain bool

	neverLead       bool
	hasPriority     bool
	priority        int
	preferenceGrace time.Duration

	onStarted   func(fence uint64)
	onStopped   func()
	onNewLeader func(keeperID string)

	value []byte // WithValue: published with every term
}

func defaultConfig() config {
	return config{
		stallTimeout:  DefaultStallTimeout, // gracePeriod 0: the session's
		campaignAgain: DefaultCampaignAgain,

		preferenceGrace: DefaultPreferenceGrace,
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
// must keep values (lock.ValueStore; New reports it otherwise). SetValue
// changes it. Default: none.
func WithValue(v []byte) Option {
	return func(c *config) error {
		if err := lock.CheckValue(v); err != nil {
			return fmt.Errorf("%w: WithValue: %w", ErrInvalidOption, err)
		}
		c.value = bytes.Clone(v)
		return nil
	}
}

// WithNeverLead makes the runner an observer: it takes part without ever
// leading. It never campaigns, never runs a task and never publishes a
// candidacy; Leader and OnNewLeader report the leader it reads, every
// retry period under Run and at each RunTaskOnLeader call (which returns
// false and nil). It cannot be combined with WithPriority. Default: off
// (the runner campaigns).
func WithNeverLead() Option {
	return func(c *config) error {
		c.neverLead = true
		return nil
	}
}

// WithPriority makes the runner a candidate with priority p: from its
// first campaign until it resigns or Run returns it publishes a candidacy
// (a lock of its session, renewed by the session's keep-alive, under the
// leadership's lock id followed by "@candidate/"), and while it leads it
// looks, every retry period, for a
// candidate of a strictly higher priority. When one has been seen waiting
// for the preference grace (WithPreferenceGrace), and the current term has
// lasted as long, the leader steps down: its task's context is cancelled
// with a cause wrapping ErrSteppedDown that names the candidate, the lease
// is released once the task returned, and a follower that sees a higher
// candidate waiting lets it campaign first (for two retry periods). Equal
// priorities never swap. Only runners with WithPriority take part: one
// without it neither publishes nor steps down. The session's store must be
// able to list locks by prefix (a *lock.Locker can); New reports it
// otherwise. Default: no priority.
func WithPriority(p int) Option {
	return func(c *config) error {
		c.hasPriority, c.priority = true, p
		return nil
	}
}

// WithPreferenceGrace sets how long a higher-priority candidate must have
// been seen waiting before the leader steps down for it, and how long a
// term lasts at least before it steps down for one: so at most one
// preference handover happens per grace, however often a preferred
// candidate comes and goes. Default: DefaultPreferenceGrace (30s).
func WithPreferenceGrace(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithPreferenceGrace: %v is not positive", ErrInvalidOption, d)
		}
		c.preferenceGrace = d
		return nil
	}
}
