package scheduler

import (
	"fmt"
	"time"

	"github.com/mongolock/mongolock/internal/planted"
	"github.com/mongolock/mongolock/lock"
)

// The promise, in one sentence (see the package documentation):
//
//	Every firing runs at most once; a firing that can start within the
//	job's misfire threshold of its time runs (late if need be, in order);
//	one that cannot is a misfire, and the job's misfire policy decides.
//
// Lateness is judged by the server's clock, when a claim of the firing is
// made, resumed or taken over (plan), and again when its turn to run comes
// in the claim's work (misfiredSince). This file holds the policy's types
// and the one function that decides each firing's fate (decide).

const (
	// DefaultMisfireWindow is the default policy's window: a misfire older
	// than this never runs.
	DefaultMisfireWindow = 24 * time.Hour
	// MaxMisfireRuns bounds MisfirePolicy.Max.
	MaxMisfireRuns = 1000
	// MaxRecorded bounds how many records of firings not run one plan
	// writes, one per firing: the newest. The older ones' count is told in
	// the oldest record's reason and its event.
	MaxRecorded = 100
)

// DefaultMisfirePolicy runs the latest misfire of a claim, if at most
// DefaultMisfireWindow old (Quartz's "fire once now").
var DefaultMisfirePolicy = MisfireRunLatest(DefaultMisfireWindow)

// MisfirePolicy is what a job does with its misfires: firings that could
// not start within the misfire threshold of their time (no instance was
// up, or none could reach the database, for longer than the threshold).
// Firings that can start within the threshold always run, whatever the
// policy.
type MisfirePolicy struct {
	// Max is how many misfires one claim runs: the newest Max of those it
	// covers, oldest first. 0 runs none.
	Max int
	// Window: a misfire older than this, when its claim is planned, is
	// never run.
	Window time.Duration
}

// MisfireSkip runs no misfire: each is recorded as not run
// (ReasonMisfired).
func MisfireSkip() MisfirePolicy { return MisfirePolicy{Window: DefaultMisfireWindow} }

// MisfireRunLatest runs the latest misfire of each claim, if at most window
// old, and records the others as not run.
func MisfireRunLatest(window time.Duration) MisfirePolicy {
	return MisfirePolicy{Max: 1, Window: window}
}

// MisfireRunAll runs the misfires of each claim that are at most window
// old, oldest first, up to max of them (the newest), and records the
// others as not run.
func MisfireRunAll(window time.Duration, max int) MisfirePolicy {
	return MisfirePolicy{Max: max, Window: window}
}

func (p MisfirePolicy) check(opt string) error {
	switch {
	case p.Window < time.Second:
		return fmt.Errorf("%w: %s: window %v is shorter than 1s", ErrInvalidOption, opt, p.Window)
	case p.Max < 0 || p.Max > MaxMisfireRuns:
		return fmt.Errorf("%w: %s: max %d is not from 0 to %d", ErrInvalidOption, opt, p.Max, MaxMisfireRuns)
	}
	return nil
}

// MisfireThresholdFor is the default misfire threshold of a Scheduler
// whose Session has timings t, polling every poll with op timeout op: the
// longest a firing can wait while an instance is up and reaches the
// database. A claimant that dies right after its claim keeps its presence
// lease for up to a TTL; another instance notices the pending claim within
// two polls and takes it over at the first poll after the lease lapsed
// (a third); each of the two writes a late firing needs, its claim (or the
// takeover) and its start, may be lost once, an op timeout each. With the
// default timings (TTL 30s, poll 10s, op timeout 10s) it is 80s.
func MisfireThresholdFor(t lock.Timings, poll, op time.Duration) time.Duration {
	return t.TTL + 3*poll + 2*op
}

// minMisfireThreshold is the shortest threshold New accepts: the takeover
// of a dead claimant alone takes up to a TTL and two polls.
func minMisfireThreshold(t lock.Timings, poll time.Duration) time.Duration {
	return t.TTL + 2*poll
}

// WithMisfireThreshold sets how late a firing may start and still count as
// on time (by the server's clock): later, it is a misfire, and its job's
// misfire policy decides. New refuses one shorter than a TTL and two poll
// intervals, the time a dead claimant's claim takes to be taken over.
// Default: MisfireThresholdFor the Session's timings, poll interval and op
// timeout (80s with the defaults).
func WithMisfireThreshold(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithMisfireThreshold: %v is not positive", ErrInvalidOption, d)
		}
		c.threshold = d
		return nil
	}
}

// WithMisfirePolicy sets the misfire policy of jobs that set none
// (JobMisfirePolicy). Default: DefaultMisfirePolicy.
func WithMisfirePolicy(p MisfirePolicy) Option {
	return func(c *config) error {
		if err := p.check("WithMisfirePolicy"); err != nil {
			return err
		}
		c.misfire = p
		return nil
	}
}

// JobMisfirePolicy sets the job's misfire policy. Default: the
// Scheduler's (WithMisfirePolicy).
func JobMisfirePolicy(p MisfirePolicy) JobOption {
	return func(jc *jobConfig) error {
		if err := p.check("JobMisfirePolicy"); err != nil {
			return err
		}
		jc.misfire = &p
		return nil
	}
}

// MisfireThreshold returns how late a firing may start and still count as
// on time: WithMisfireThreshold's, or the default for the Session's
// timings.
func (s *Scheduler) MisfireThreshold() time.Duration { return s.threshold }

// misfirePolicy is j's misfire policy.
func (s *Scheduler) misfirePolicy(j *job) MisfirePolicy {
	p := s.cfg.misfire
	if j.cfg.misfire != nil {
		p = *j.cfg.misfire
	}
	if planted.On(planted.RunMisfire) {
		p.Max = MaxMisfireRuns // planted: every misfire runs, not the latest only
	}
	return p
}

// misfiredSince reports whether the first of steps, a firing a claim's
// plan ran, is a misfire now, at the server's time now: a backlog worked
// in order fell past the threshold behind the runs before it. It then runs
// only as the policy runs the claim's misfires: if fewer than policy.Max
// of the steps after it, which would run, are misfires too, and it is at
// most policy.Window late. So a backlog that falls behind (commands slow
// or lost, runs longer than the period) drops what it cannot start in
// time, as a claim would have had it come then, rather than run every
// firing late and push the later ones past the threshold too.
func (s *Scheduler) misfiredSince(j *job, steps []step, now time.Time) bool {
	late := now.Sub(steps[0].at)
	if late <= s.threshold {
		return false
	}
	p := s.misfirePolicy(j)
	newer := 0
	for _, st := range steps[1:] {
		if st.reason == "" && now.Sub(st.at) > s.threshold {
			newer++
		}
	}
	return newer >= p.Max || late > p.Window
}

// fates is what decide is given: the firings of one claim's work, oldest
// first (the claimed one last), judged at now (the server's clock).
type fates struct {
	firings   []time.Time
	now       time.Time
	threshold time.Duration
	policy    MisfirePolicy
	control   controlDoc
	// runGoing reports whether the job's previous run on schedule was
	// still going at a firing: the overlap policy skips it.
	runGoing func(time.Time) bool
}

// decide returns why each firing of in does not run, "" for those that
// run, and whether the work must wait (held): the job is paused now, and
// a firing that fell before the pause would run. In order, a firing
//   - is not run if the job was paused or removed at it (ReasonPaused,
//     ReasonRemoved);
//   - is not run if one of the job's previous runs was still going at it
//     (ReasonRunGoing), unless it is the claimed firing: the overlap
//     policy, whose lock wait decides that one. A misfire skipped so, or
//     by the pause or the removal, counts among the newest policy.Max: an
//     older one does not run in its stead;
//   - runs if it is at most the threshold late;
//   - is a misfire otherwise: the newest policy.Max misfires at most
//     policy.Window late run, the others do not (ReasonMisfired).
//
// Lateness only falls from the oldest firing to the newest, so the
// misfires are the oldest firings of the work.
func decide(in fates) (reasons []string, held bool) {
	reasons = make([]string, len(in.firings))
	pausedNow := !in.control.Removed && in.control.pausedAt(in.now) && !in.control.PausedAt.IsZero()
	runs := 0 // misfires run so far, newest first
	for i := len(in.firings) - 1; i >= 0; i-- {
		f := in.firings[i]
		late := in.now.Sub(f)
		reason := in.control.suspendedAt(f, in.now)
		owed := pausedNow && reason == ReasonPaused && f.Before(in.control.PausedAt)
		if owed {
			reason = ""
		}
		// A misfire the policy would run, but that the pause, the removal
		// or the overlap rule skips, counts among the newest policy.Max:
		// an older one does not run in its stead.
		skippedMisfire := func() {
			if late > in.threshold && runs < in.policy.Max && late <= in.policy.Window {
				runs++
			}
		}
		switch {
		case reason != "":
			skippedMisfire()
		case i < len(in.firings)-1 && in.runGoing != nil && in.runGoing(f):
			reason = ReasonRunGoing
			skippedMisfire()
		case late <= in.threshold:
		case runs < in.policy.Max && late <= in.policy.Window:
			runs++
		default:
			reason = ReasonMisfired
		}
		held = held || owed && reason == ""
		reasons[i] = reason
	}
	return reasons, held
}
