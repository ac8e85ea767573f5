package runner_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
)

func TestNewRejectsBadInput(t *testing.T) {
	t.Parallel()
	clk := clockwork.NewFakeClock()
	f := newFake(clk, 30*time.Second)
	tiny := newFake(clk, 0)
	short := newFake(clk, 200*time.Millisecond) // defaults leave a 67ms margin
	half := newFake(clk, 500*time.Millisecond)
	for _, tc := range []struct {
		name     string
		locker   runner.Locker
		lockID   string
		keeperID string
		opts     []runner.Option
		want     error
		mention  string // the error must name this
	}{
		{"nil locker", nil, "l", "k", nil, runner.ErrInvalidOption, "Locker"},
		{"empty lock id", f, "", "k", nil, lock.ErrInvalidArgument, "lockID"},
		{"empty keeper id", f, "l", "", nil, lock.ErrInvalidArgument, "keeperID"},
		{"nil option", f, "l", "k", []runner.Option{nil}, runner.ErrInvalidOption, "nil Option"},
		{"zero renew interval", f, "l", "k", []runner.Option{runner.WithRenewInterval(0)}, runner.ErrInvalidOption, "WithRenewInterval"},
		{"negative renew deadline", f, "l", "k", []runner.Option{runner.WithRenewDeadline(-time.Second)}, runner.ErrInvalidOption, "WithRenewDeadline"},
		{"zero retry period", f, "l", "k", []runner.Option{runner.WithRetryPeriod(0)}, runner.ErrInvalidOption, "WithRetryPeriod"},
		{"zero release timeout", f, "l", "k", []runner.Option{runner.WithReleaseTimeout(0)}, runner.ErrInvalidOption, "WithReleaseTimeout"},
		{"zero grace period", f, "l", "k", []runner.Option{runner.WithGracePeriod(0)}, runner.ErrInvalidOption, "WithGracePeriod"},
		{"negative stall timeout", f, "l", "k", []runner.Option{runner.WithStallTimeout(-1)}, runner.ErrInvalidOption, "WithStallTimeout"},
		{"nil clock", f, "l", "k", []runner.Option{runner.WithClock(nil)}, runner.ErrInvalidOption, "WithClock"},
		{"interval equals deadline", f, "l", "k", []runner.Option{
			runner.WithRenewInterval(5 * time.Second), runner.WithRenewDeadline(5 * time.Second)},
			runner.ErrInvalidOption, "WithRenewInterval"},
		{"interval above deadline", f, "l", "k", []runner.Option{
			runner.WithRenewInterval(25 * time.Second)}, runner.ErrInvalidOption, "WithRenewDeadline"},
		{"deadline equals TTL", f, "l", "k", []runner.Option{
			runner.WithRenewDeadline(30 * time.Second)}, runner.ErrInvalidOption, "TTL"},
		{"deadline above TTL", f, "l", "k", []runner.Option{
			runner.WithRenewInterval(time.Second), runner.WithRenewDeadline(time.Minute)}, runner.ErrInvalidOption, "TTL"},
		{"zero TTL", tiny, "l", "k", nil, runner.ErrInvalidOption, "TTL"},
		{"deadline 1ns short of TTL", f, "l", "k", []runner.Option{
			runner.WithRenewDeadline(30*time.Second - 1)}, runner.ErrInvalidOption, "MinSafetyMargin"},
		{"margin under a tenth of TTL", f, "l", "k", []runner.Option{
			runner.WithRenewDeadline(27*time.Second + time.Millisecond)}, runner.ErrInvalidOption, "WithRenewDeadline"},
		{"margin under MinSafetyMargin", half, "l", "k", []runner.Option{
			runner.WithRenewInterval(100 * time.Millisecond), runner.WithRenewDeadline(401 * time.Millisecond)},
			runner.ErrInvalidOption, "MinSafetyMargin"},
		{"TTL too short for the default margin", short, "l", "k", nil, runner.ErrInvalidOption, "WithRenewDeadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := runner.New(tc.locker, tc.lockID, tc.keeperID, tc.opts...)
			if r != nil || !errors.Is(err, tc.want) {
				t.Fatalf("New: %v, %v; want an error wrapping %v", r, err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("error %q does not name %q", err, tc.mention)
			}
		})
	}
}

func TestDefaultTimingsScaleWithTTL(t *testing.T) {
	t.Parallel()
	clk := clockwork.NewFakeClock()
	for _, tc := range []struct {
		ttl, ri, rd, rp time.Duration
	}{
		{lock.DefaultTTL, runner.DefaultRenewInterval, runner.DefaultRenewDeadline, runner.DefaultRetryPeriod},
		{3 * time.Second, time.Second, 2 * time.Second, 200 * time.Millisecond},
		{time.Minute, 20 * time.Second, 40 * time.Second, 4 * time.Second},
	} {
		r, err := runner.New(newFake(clk, tc.ttl), "l", "k")
		if err != nil {
			t.Fatalf("TTL %v: %v", tc.ttl, err)
		}
		ri, rd, rp := r.Timings()
		if ri != tc.ri || rd != tc.rd || rp != tc.rp {
			t.Fatalf("TTL %v: timings %v %v %v, want %v %v %v", tc.ttl, ri, rd, rp, tc.ri, tc.rd, tc.rp)
		}
	}
	// A set timing is kept; the others are still scaled.
	r, err := runner.New(newFake(clk, 3*time.Second), "l", "k", runner.WithRetryPeriod(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if ri, rd, rp := r.Timings(); ri != time.Second || rd != 2*time.Second || rp != time.Second {
		t.Fatalf("timings %v %v %v", ri, rd, rp)
	}
}

// The gap between renew deadline and TTL may be as small as the larger of
// MinSafetyMargin and a tenth of the TTL, and no smaller (see
// TestNewRejectsBadInput).
func TestSafetyMarginFloorIsAccepted(t *testing.T) {
	t.Parallel()
	clk := clockwork.NewFakeClock()
	for _, tc := range []struct {
		ttl  time.Duration
		opts []runner.Option
	}{
		{30 * time.Second, []runner.Option{runner.WithRenewDeadline(27 * time.Second)}},
		{500 * time.Millisecond, []runner.Option{
			runner.WithRenewInterval(100 * time.Millisecond), runner.WithRenewDeadline(500*time.Millisecond - runner.MinSafetyMargin)}},
		{3 * runner.MinSafetyMargin, nil}, // the shortest TTL the defaults fit
	} {
		if _, err := runner.New(newFake(clk, tc.ttl), "l", "k", tc.opts...); err != nil {
			t.Errorf("TTL %v: %v", tc.ttl, err)
		}
	}
}
