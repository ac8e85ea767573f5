package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/runner"
)

// Candidacy is an instance's part among the leader election's candidates
// (runner.WithNeverLead, runner.WithPriority).
type Candidacy struct {
	NeverLead bool
	Priority  int
}

// drawCandidates draws the candidacies of a world's n instances, nil for
// a world without them (three in four), from a stream of the seed's own:
// the rest of the world is drawn as before candidates existed. The
// stream's constant is one under which the regression seeds found before
// candidates existed draw none, so they replay as they did
// (TestCandidatesSpareRegressions).
func drawCandidates(seed uint64, n int) []Candidacy {
	rng := rand.New(rand.NewPCG(seed, 0x63616e6469646184))
	if rng.IntN(4) != 0 {
		return nil
	}
	out := make([]Candidacy, n)
	for i := range out {
		if rng.IntN(4) == 0 {
			out[i].NeverLead = true
		} else {
			out[i].Priority = rng.IntN(3)
		}
	}
	return out
}

// preferenceGrace is the candidates' preference grace in a world.
func (w World) preferenceGrace() time.Duration { return 2 * w.TTL }

// windDown is how long a leader task takes to return once its context
// ends, in a world with candidates: a task finishing its work in hand, so
// that a lock released before its task returned shows (stepdown).
func (w World) windDown() time.Duration {
	if w.Candidates == nil {
		return 0
	}
	return w.TTL / 8
}

// candidateOptions are the runner options of the instance in slot.
func (w World) candidateOptions(slot int) []runner.Option {
	if w.Candidates == nil {
		return nil
	}
	c := w.Candidates[slot]
	if c.NeverLead {
		return []runner.Option{runner.WithNeverLead()}
	}
	return []runner.Option{runner.WithPriority(c.Priority), runner.WithPreferenceGrace(w.preferenceGrace())}
}

// LeaderTask is one call of the leader task, from its start to its
// return.
type LeaderTask struct {
	Instance string
	Fence    uint64
	Began    time.Duration
	Returned time.Duration // 0 while running, or if its instance died
}

// leaderTask wraps the leader task to record its call and, in a world with
// candidates, to wind down once its context ends.
func (in *instance) leaderTask(task func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		lt := &LeaderTask{Instance: in.life.Name}
		if l, ok := lock.LeaseFrom(ctx); ok {
			lt.Fence = l.Fence()
		}
		in.sim.hist.update(func() {
			lt.Began = in.sim.hist.now()
			in.sim.hist.leaders = append(in.sim.hist.leaders, lt)
		})
		err := task(ctx)
		if d := in.sim.world.windDown(); d > 0 {
			_ = lock.Sleep(context.Background(), in.clock, d)
		}
		if !in.isDead() { // a dead process records nothing
			in.sim.hist.update(func() { lt.Returned = in.sim.hist.now() })
		}
		return err
	}
}

// checkLeadership checks, by the server's changes, that
//   - no never-lead instance ever held the leader lock (leadership);
//   - no release of the leader lock was applied while the task of that
//     term still ran (stepdown): a leader stepping down, resigning or
//     stopping with a good lease lets it go only once its task returned.
//     A task is not running once its instance died, nor while it is
//     frozen.
func checkLeadership(s *Sim) []string {
	h := s.hist
	w := s.world
	var out []string
	never := map[string]string{} // keeper id: instance
	for _, l := range h.lives {
		if w.Candidates != nil && w.Candidates[l.Slot].NeverLead {
			never[l.Keeper] = l.Name
		}
	}
	life := map[string]*Life{}
	for _, l := range h.lives {
		life[l.Name] = l
	}
	for _, c := range h.changes {
		id, fence, ok := lockChange(c)
		if !ok || id != leaderLockID {
			continue
		}
		kid, held := lookupDoc(c.Doc, "kid").(string)
		if held {
			if name, ok := never[kid]; ok {
				out = append(out, fmt.Sprintf("leadership: never-lead %s (keeper %s) held the leader lock at %.3fs (fence %d)",
					name, kid, c.At.Seconds(), fence))
			}
			continue
		}
		for _, lt := range h.leaders {
			if lt.Fence != fence || lt.Began > c.At || lt.Returned != 0 && lt.Returned <= c.At {
				continue
			}
			l := life[lt.Instance]
			if l == nil || l.Died && c.At >= l.Down || frozenAt(l, c.At) {
				continue
			}
			out = append(out, fmt.Sprintf("stepdown: the leader lock (fence %d) was released at %.3fs while %s's task, begun at %.3fs, still ran",
				fence, c.At.Seconds(), lt.Instance, lt.Began.Seconds()))
		}
	}
	return slices.Compact(out)
}

// frozenAt reports whether l was stopped or suspended at t.
func frozenAt(l *Life, t time.Duration) bool {
	for _, f := range l.Frozen {
		if f[0] <= t && (f[1] == 0 || t <= f[1]) {
			return true
		}
	}
	return false
}
