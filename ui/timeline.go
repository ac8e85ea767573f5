package ui

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mongolock/mongolock/scheduler"
)

// Geometry of the timeline, in SVG user units.
const (
	tlWidth     = 960
	tlLeft      = 150 // lane labels go left of it
	tlRight     = 20
	tlTop       = 28
	tlLaneH     = 26
	tlBottom    = 30
	maxExpected = 2000 // firings computed from the spec to find those with no record
)

// timeline is the picture of a job's firings: one lane per instance that
// ran some, one for firings not run and one for operators' actions; one
// mark per firing, shaped and coloured by its class, at its firing time,
// with a tail to its start when it started late.
type timeline struct {
	Width, Height int
	Lanes         []tlLane
	Marks         []tlMark
	Ticks         []tlTick
	PlotLeft      int
	PlotRight     int
	AxisY         int
	Summary       string
	Counts        []tlCount
	Empty         bool
}

type tlLane struct {
	Label, Title string
	Y            int
}

type tlMark struct {
	Class       class
	D           string // the shape, an SVG path
	X, Y, TailX float64
	Title       string
	Href        string
}

type tlTick struct {
	X      float64
	Label  string
	Anchor string // text-anchor: the first and last labels stay inside
}

type tlCount struct {
	Class  class
	Symbol string
	Label  string
	Means  string
	N      int
}

// shape is the SVG path of class c's mark centred on (x, y).
func shape(c class, x, y float64) string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	X, Y := f(x), f(y)
	switch c {
	case classRan, classMisfired, classRunning:
		return "M" + f(x-5) + "," + Y + "a5,5 0 1,0 10,0a5,5 0 1,0 -10,0Z"
	case classLate:
		return "M" + f(x-2) + "," + f(y-5) + "h2a5,5 0 0,1 0,10h-2Z"
	case classRetried:
		return "M" + X + "," + f(y-6) + "L" + f(x+6) + "," + Y + "L" + X + "," + f(y+6) + "L" + f(x-6) + "," + Y + "Z"
	case classFailed:
		return "M" + f(x-5) + "," + f(y-5) + "L" + f(x+5) + "," + f(y+5) + "M" + f(x+5) + "," + f(y-5) + "L" + f(x-5) + "," + f(y+5)
	case classSkipped:
		return "M" + f(x-6) + "," + f(y-5) + "L" + f(x+6) + "," + f(y-5) + "L" + X + "," + f(y+5) + "Z"
	case classSpent:
		return "M" + f(x-5) + "," + f(y-5) + "h10v10h-10Z"
	}
	return "M" + X + "," + f(y+6) + "V" + f(y-6) + "L" + f(x+8) + "," + f(y-3) + "L" + X + "," + f(y) // an action: a flag
}

// classAction is the mark of an operator's action.
const classAction class = "action"

// buildTimeline draws runs (newest first), the firings of rec's spec
// between them that have no record, and the actions on the job.
func (h *Handler) buildTimeline(rec scheduler.Record, runs []runView, acts []actionRecord, link func(scheduler.Run) string) timeline {
	tl := timeline{Width: tlWidth, PlotLeft: tlLeft, PlotRight: tlWidth - tlRight}
	if len(runs) == 0 && len(acts) == 0 {
		tl.Empty, tl.Height = true, tlTop+tlLaneH+tlBottom
		return tl
	}
	// The span: every firing, every late start, every action.
	var lo, hi time.Time
	see := func(t time.Time) {
		if t.IsZero() {
			return
		}
		if lo.IsZero() || t.Before(lo) {
			lo = t
		}
		if hi.IsZero() || t.After(hi) {
			hi = t
		}
	}
	for _, r := range runs {
		see(r.Scheduled)
		if r.Class == classLate {
			see(r.Start)
		}
	}
	for _, a := range acts {
		see(a.At)
	}
	// Firings of the spec between the oldest and the newest record that
	// have no record: started on an instance that died mid-run (a run is
	// written to the history when it ends), or whose record was lost.
	gaps := h.unrecorded(rec, runs)
	if lo.Equal(hi) {
		lo, hi = lo.Add(-time.Second), hi.Add(time.Second)
	}
	span := hi.Sub(lo)
	lo, hi = lo.Add(-span/50), hi.Add(span/50)
	span = hi.Sub(lo)
	plot := float64(tl.PlotRight - tl.PlotLeft)
	xOf := func(t time.Time) float64 {
		return float64(tl.PlotLeft) + plot*float64(t.Sub(lo))/float64(span)
	}

	// Lanes: actions, then instances in order of their first run, then
	// firings not run.
	laneOf := map[string]int{}
	addLane := func(key, label, title string) int {
		if i, ok := laneOf[key]; ok {
			return i
		}
		laneOf[key] = len(tl.Lanes)
		tl.Lanes = append(tl.Lanes, tlLane{Label: label, Title: title, Y: tlTop + len(tl.Lanes)*tlLaneH + tlLaneH/2})
		return laneOf[key]
	}
	if len(acts) > 0 {
		addLane("\x00actions", "operators", "actions taken from the dashboard")
	}
	byStart := slices.Clone(runs)
	slices.Reverse(byStart) // oldest first
	for _, r := range byStart {
		if r.Keeper != "" && !r.Start.IsZero() {
			addLane(r.Keeper, shortKeeper(r.Keeper), r.Keeper)
		}
	}
	counts := map[class]int{}
	for _, r := range runs {
		lane := ""
		if r.Keeper != "" && !r.Start.IsZero() {
			lane = r.Keeper
		} else {
			lane = "\x00not run"
		}
		i := addLane(lane, "not run", "firings that did not run")
		y := float64(tl.Lanes[i].Y)
		x := xOf(r.Scheduled)
		m := tlMark{Class: r.Class, X: x, Y: y, TailX: x, D: shape(r.Class, x, y), Href: link(r.Run),
			Title: fmt.Sprintf("%s: %s", fmtTime(r.Scheduled), r.Label)}
		if r.Keeper != "" {
			m.Title += " on " + r.Keeper
		}
		if r.Class == classLate {
			m.TailX = xOf(r.Start)
			m.Title += fmt.Sprintf(", started %s after its firing", fmtDur(r.Late))
		}
		counts[r.Class]++
		tl.Marks = append(tl.Marks, m)
	}
	for _, g := range gaps {
		i := addLane("\x00not run", "not run", "firings that did not run")
		y := float64(tl.Lanes[i].Y)
		x := xOf(g)
		counts[classSpent]++
		tl.Marks = append(tl.Marks, tlMark{Class: classSpent, X: x, Y: y, TailX: x, D: shape(classSpent, x, y),
			Title: fmtTime(g) + ": no record: spent (started on an instance that stopped mid-run) or its record was lost"})
	}
	for _, a := range acts {
		i := laneOf["\x00actions"]
		y := float64(tl.Lanes[i].Y)
		x := xOf(a.At)
		tl.Marks = append(tl.Marks, tlMark{Class: classAction, X: x, Y: y, TailX: x, D: shape(classAction, x, y),
			Title: fmt.Sprintf("%s: %s by %s", fmtTime(a.At), a.Kind, a.By)})
	}
	tl.AxisY = tlTop + len(tl.Lanes)*tlLaneH + 4
	tl.Height = tl.AxisY + tlBottom
	tl.Ticks = axisTicks(lo, hi, xOf)
	var parts []string
	for _, k := range classes {
		n := counts[k.Class]
		tl.Counts = append(tl.Counts, tlCount{Class: k.Class, Symbol: k.Symbol, Label: k.Label, Means: k.Means, N: n})
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, k.Label))
		}
	}
	tl.Summary = fmt.Sprintf("Firings from %s to %s (UTC, oldest on the left): %s.", fmtTime(lo), fmtTime(hi), strings.Join(parts, ", "))
	return tl
}

// tickSteps are the steps the timeline's axis may take, each a round
// number of its unit.
var tickSteps = []time.Duration{
	100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour,
	24 * time.Hour, 2 * 24 * time.Hour, 7 * 24 * time.Hour, 14 * 24 * time.Hour, 28 * 24 * time.Hour,
}

// axisTicks labels the axis from lo to hi at round times (UTC): the
// smallest step of tickSteps that makes at most 6 ticks, each labelled as
// precisely as the step needs, the date added where the span crosses one.
func axisTicks(lo, hi time.Time, xOf func(time.Time) float64) []tlTick {
	span := hi.Sub(lo)
	step := tickSteps[len(tickSteps)-1]
	for _, s := range tickSteps {
		if span/s <= 5 {
			step = s
			break
		}
	}
	for span/step > 5 { // beyond the longest step: a multiple of it
		step *= 2
	}
	lo, hi = lo.UTC(), hi.UTC()
	layout := "15:04:05"
	switch {
	case step < time.Second:
		layout = "15:04:05.0"
	case step >= 24*time.Hour:
		layout = "2006-01-02"
	case step >= time.Minute && !sameDay(lo, hi):
		layout = "01-02 15:04"
	case step >= time.Minute:
		layout = "15:04"
	case !sameDay(lo, hi):
		layout = "01-02 15:04:05"
	}
	// Truncate works from the zero time, which is a Monday at midnight UTC:
	// days and hours fall on midnight and the hour; weeks on Mondays.
	t := lo.Truncate(step)
	if t.Before(lo) {
		t = t.Add(step)
	}
	var ticks []tlTick
	for ; !t.After(hi); t = t.Add(step) {
		ticks = append(ticks, tlTick{X: xOf(t), Label: t.Format(layout), Anchor: "middle"})
	}
	// The first and last labels stay inside the picture.
	if n := len(ticks); n > 0 {
		if ticks[0].X-float64(tlLeft) < 30 {
			ticks[0].Anchor = "start"
		}
		if float64(tlWidth-tlRight)-ticks[n-1].X < 30 {
			ticks[n-1].Anchor = "end"
		}
	}
	return ticks
}

func sameDay(a, b time.Time) bool {
	ay, am, ad := a.Date()
	by, bm, bd := b.Date()
	return ay == by && am == bm && ad == bd
}

// unrecorded returns the firings of rec's spec strictly between the oldest
// and the newest firing of runs that no record covers (at most
// maxExpected are computed).
func (h *Handler) unrecorded(rec scheduler.Record, runs []runView) []time.Time {
	if len(runs) < 2 || rec.Spec == "" {
		return nil
	}
	covered := make(map[int64]bool, len(runs))
	var ranges [][2]time.Time
	oldest, newest := runs[len(runs)-1].Scheduled, runs[0].Scheduled
	for _, r := range runs {
		covered[r.Scheduled.UnixNano()] = true
		if r.Count > 1 && !r.Through.IsZero() {
			ranges = append(ranges, [2]time.Time{r.Scheduled, r.Through})
		}
		if r.Scheduled.Before(oldest) {
			oldest = r.Scheduled
		}
		if r.Scheduled.After(newest) {
			newest = r.Scheduled
		}
	}
	var out []time.Time
	t := oldest
	for range maxExpected {
		next, err := scheduler.NextFiring(rec.Spec, t, h.cfg.location)
		if err != nil || next.IsZero() || !next.Before(newest) {
			break
		}
		t = next
		if covered[next.UnixNano()] || slices.ContainsFunc(ranges, func(r [2]time.Time) bool { return !next.Before(r[0]) && !next.After(r[1]) }) {
			continue
		}
		out = append(out, next)
	}
	return out
}

// shortKeeper is the part of a keeper id before its first '/' (the
// instance's name, as the demo and the CLI make them), or the id.
func shortKeeper(k string) string {
	if name, _, ok := strings.Cut(k, "/"); ok && name != "" {
		return name
	}
	if len(k) > 18 {
		return k[:18] + "…"
	}
	return k
}
