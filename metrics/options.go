package metrics

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
)

// DefaultNamespace prefixes every metric name (WithNamespace).
const DefaultNamespace = "mongolock"

// DefaultLatencyBuckets are the buckets, in seconds, of the round-trip
// histograms (acquire and renew): from a millisecond to ten seconds.
var DefaultLatencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// DefaultDurationBuckets are the buckets, in seconds, of the histograms of
// longer spans (job runs and start lateness, failover gaps, migration lock
// waits): from ten milliseconds to an hour.
var DefaultDurationBuckets = []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// ErrInvalidOption is returned by New for an option given a bad argument.
var ErrInvalidOption = errors.New("metrics: invalid option")

type config struct {
	namespace string
	latency   []float64
	duration  []float64
}

// Option configures New.
type Option func(*config) error

var validNamespace = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// WithNamespace sets the prefix of every metric name: "ns_lock_...".
// Alert rules and dashboards in deploy/ assume the default,
// DefaultNamespace ("mongolock").
func WithNamespace(ns string) Option {
	return func(c *config) error {
		if !validNamespace.MatchString(ns) {
			return fmt.Errorf("%w: WithNamespace: %q is not a valid metric name prefix", ErrInvalidOption, ns)
		}
		c.namespace = ns
		return nil
	}
}

// WithLatencyBuckets sets the buckets, in seconds, of the acquire and
// renew round-trip histograms. Default: DefaultLatencyBuckets.
func WithLatencyBuckets(b ...float64) Option {
	return func(c *config) error {
		if err := checkBuckets("WithLatencyBuckets", b); err != nil {
			return err
		}
		c.latency = slices.Clone(b)
		return nil
	}
}

// WithDurationBuckets sets the buckets, in seconds, of the job run
// duration, start lateness, failover gap and migration lock wait
// histograms. Default: DefaultDurationBuckets.
func WithDurationBuckets(b ...float64) Option {
	return func(c *config) error {
		if err := checkBuckets("WithDurationBuckets", b); err != nil {
			return err
		}
		c.duration = slices.Clone(b)
		return nil
	}
}

func checkBuckets(opt string, b []float64) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: %s: no buckets", ErrInvalidOption, opt)
	}
	for i, v := range b {
		if math.IsNaN(v) {
			return fmt.Errorf("%w: %s: NaN bucket", ErrInvalidOption, opt)
		}
		if i > 0 && !(v > b[i-1]) {
			return fmt.Errorf("%w: %s: buckets not strictly increasing at %v", ErrInvalidOption, opt, v)
		}
	}
	return nil
}
