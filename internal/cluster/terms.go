package cluster

import (
	"fmt"
	"slices"
	"time"
)

// Span is a period during which one instance held one term.
type Span struct {
	Instance   string
	Fence      uint64
	Start, End time.Time
	Open       bool // no end was recorded: End is a bound
}

func (s Span) String() string {
	end := s.End.Local().Format("15:04:05.000")
	if s.Open {
		end += "(open)"
	}
	return fmt.Sprintf("%s fence=%d [%s, %s]", s.Instance, s.Fence, s.Start.Local().Format("15:04:05.000"), end)
}

type termKey struct {
	instance string
	fence    uint64
}

// LeaderTerms returns the leader terms: each from its EvLead to the EvUnlead
// of the same fence. A term with no EvUnlead ends when its process exited
// (EvExited), or is still open and ends at now.
func LeaderTerms(evs []Event, now time.Time) []Span {
	var out []Span
	open := map[termKey]int{}
	for _, e := range evs {
		switch e.Kind {
		case EvLead:
			open[termKey{e.Instance, e.Fence}] = len(out)
			out = append(out, Span{Instance: e.Instance, Fence: e.Fence, Start: e.T})
		case EvUnlead:
			k := termKey{e.Instance, e.Fence}
			if i, ok := open[k]; ok {
				out[i].End = e.T
				delete(open, k)
			}
		case EvExited:
			for k, i := range open {
				if k.instance == e.Instance {
					out[i].End = e.T
					delete(open, k)
				}
			}
		}
	}
	for _, i := range open {
		out[i].End, out[i].Open = now, true
	}
	return out
}

// WorkSpans returns, for each leader term, the period from its start to
// its last check that it still led before a write (EvWork): when the holder
// acted. A paused process's term lasts through the pause; what matters is
// that it does not act after it resumed.
func WorkSpans(evs []Event) []Span {
	var out []Span
	idx := map[termKey]int{}
	for _, e := range evs {
		switch e.Kind {
		case EvLead:
			idx[termKey{e.Instance, e.Fence}] = len(out)
			out = append(out, Span{Instance: e.Instance, Fence: e.Fence, Start: e.T, End: e.T})
		case EvWork:
			if i, ok := idx[termKey{e.Instance, e.Fence}]; ok && e.Checked.After(out[i].End) {
				out[i].End = e.Checked
			}
		}
	}
	return out
}

// Overlaps returns every pair of spans that overlap, as "a overlaps b".
func Overlaps(spans []Span) []string {
	s := sortedByStart(spans)
	var out []string
	for i := range s {
		for j := i + 1; j < len(s) && s[j].Start.Before(s[i].End); j++ {
			out = append(out, fmt.Sprintf("%v overlaps %v", s[i], s[j]))
		}
	}
	return out
}

// Gaps returns the periods between consecutive spans: leaderless, for
// leader terms.
func Gaps(spans []Span) []time.Duration {
	s := sortedByStart(spans)
	var out []time.Duration
	for i := 1; i < len(s); i++ {
		out = append(out, s[i].Start.Sub(s[i-1].End))
	}
	return out
}

func sortedByStart(spans []Span) []Span {
	s := slices.Clone(spans)
	slices.SortStableFunc(s, func(a, b Span) int { return a.Start.Compare(b.Start) })
	return s
}
