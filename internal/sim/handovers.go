package sim

import (
	"fmt"
	"time"
)

// checkHandovers checks, by the server's changes, that a preferred
// candidate cannot make leadership flap (handovers): a term of the leader
// lock that its holder released while nothing was wrong with it lasted at
// least the preference grace, so a healthy leader hands over at most once
// a grace however often a preferred candidate comes and goes (the
// instances' restarts and stops are the comings and goings). Nothing is
// wrong with a term, by the simulation's ground truth, when from a TTL
// before its grant to its release its holder was up and not stopping,
// never frozen, met no event (pause, suspend, clock step; the server's
// clock step or failover), and none of its link's commands met a fault;
// an early release of any other term is out of scope.
func checkHandovers(s *Sim) []string {
	h, w := s.hist, s.world
	if w.Candidates == nil {
		return nil
	}
	grace := w.preferenceGrace()
	life := map[string]*Life{}
	for _, l := range h.lives {
		life[l.Name] = l
	}
	type grant struct {
		at   time.Duration
		link string
	}
	grants := map[uint64]grant{}
	var out []string
	for _, c := range h.changes {
		id, fence, ok := lockChange(c)
		if !ok || id != leaderLockID {
			continue
		}
		if _, held := lookupDoc(c.Doc, "kid").(string); held {
			if _, seen := grants[fence]; !seen {
				grants[fence] = grant{at: c.At, link: c.Link}
			}
			continue
		}
		g, ok := grants[fence]
		if !ok || c.At-g.at >= grace || g.link != c.Link {
			continue
		}
		l := life[c.Link]
		if l == nil || !s.healthy(l, g.at-w.TTL, c.At) {
			continue
		}
		out = append(out, fmt.Sprintf("handovers: %s released the leader lock (fence %d) at %.3fs, %.3fs into its term, within the preference grace %v, with nothing wrong with it",
			l.Name, fence, c.At.Seconds(), (c.At-g.at).Seconds(), grace))
	}
	return out
}

// healthy reports whether nothing was wrong with l from from to to (see
// checkHandovers).
func (s *Sim) healthy(l *Life, from, to time.Duration) bool {
	if l.Down != 0 && l.Down <= to {
		return false
	}
	for _, f := range l.Frozen {
		if f[0] <= to && (f[1] == 0 || f[1] >= from) {
			return false
		}
	}
	for _, e := range s.world.Events {
		if e.At > to || e.At < from-s.world.TTL {
			continue
		}
		switch e.Kind {
		case ServerStep, Failover:
			return false
		case Pause, Suspend, Kill, Restart, StopGraceful, StepClock:
			if e.Instance == l.Slot {
				return false
			}
		}
	}
	for _, c := range s.hist.sends[l.Name] {
		if c.At >= from && c.At <= to && c.faulty() {
			return false
		}
	}
	return true
}
