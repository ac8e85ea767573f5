package cluster

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Kind says what an event reports.
type Kind string

// Kinds of event, and the fields each sets.
const (
	// Reported by an instance.
	EvStart     Kind = "start"     // connected: PID, Keeper, HTTP (where it serves /metrics and health checks)
	EvMigrated  Kind = "migrated"  // migrations.Up returned: Applied, Waited
	EvMigration Kind = "migration" // an application migration's Up ran (its side effect)
	EvReady     Kind = "ready"     // the scheduler started: firings after T are claimed
	EvLead      Kind = "lead"      // a leader term began: Fence
	EvWork      Kind = "work"      // the leader task tried a fenced write: Fence, Checked, Accepted, Msg
	EvUnlead    Kind = "unlead"    // the leader task's context ended: Fence, Lost, Msg (why)
	EvProbe     Kind = "probe"     // after a lost lease, a late renewal and release: Fence, Held, NotHeld, Msg
	EvRun       Kind = "run"       // a job run started: Job, Firing, Fence, Triggered; Msg if it failed
	EvClaimed   Kind = "claimed"   // it won the claim of a firing: Job, Firing, Triggered
	EvTakenOver Kind = "takenover" // it took over a firing another instance claimed: Job, Firing, Keeper (the claimant)
	EvSkipped   Kind = "skipped"   // a firing was not run here: Job, Firing, Msg (the reason)
	EvActing    Kind = "acting"    // it is about to act on itself, as its driver asked (a fault): Job, Firing, Msg (what)
	EvMetrics   Kind = "metrics"   // after the scheduler stopped: Runs, scraped from its own /metrics
	EvStopped   Kind = "stopped"   // shut down cleanly: Msg says why
	EvError     Kind = "error"     // the instance failed: Msg

	// Recorded by the Cluster.
	EvLog    Kind = "log"    // a line of its output that is not an event: Msg
	EvExited Kind = "exited" // the process ended: Msg is the exit error, if any

	// Added by a driver.
	EvKilled   Kind = "killed"   // it was sent SIGKILL: Leader if that was to make another lead; Job and Firing, the run it was in, if any
	EvStopping Kind = "stopping" // it was asked to stop: Leader as for EvKilled, Msg why
	EvPaused   Kind = "paused"   // it was sent SIGSTOP: Leader, Job and Firing as for EvKilled
	EvResumed  Kind = "resumed"  // it was sent SIGCONT
	// EvStartSeen: after it died, its job document still said that its run
	// of a firing had started (outcome running): Job, Firing, Keeper. A
	// firing so started and never run (no EvRun) is spent.
	EvStartSeen Kind = "startseen"
)

// Event is one thing an instance, or its driver, reports.
type Event struct {
	Kind     Kind      `json:"ev"`
	Instance string    `json:"instance"`
	T        time.Time `json:"t"`
	// Received is when the Cluster recorded the event, by its clock.
	Received time.Time `json:"-"`

	PID     int           `json:"pid,omitzero"`
	Keeper  string        `json:"keeper,omitzero"`
	HTTP    string        `json:"http,omitzero"`
	Fence   uint64        `json:"fence,omitzero"`
	Job     string        `json:"job,omitzero"`
	Firing  time.Time     `json:"firing,omitzero"` // the run's scheduled time
	Applied []int64       `json:"applied,omitzero"`
	Waited  time.Duration `json:"waited,omitzero"` // for another migrator
	// Checked is when the leader task last checked that it led, before
	// the write; Accepted, whether the resource took the write.
	Checked  time.Time `json:"checked,omitzero"`
	Accepted bool      `json:"accepted,omitzero"`
	// Lost: the leader task's context ended with lock.ErrLeaseLost.
	Lost bool `json:"lost,omitzero"`
	// Held is how many locks a late renewal still held; NotHeld, whether
	// the late release found nothing to release.
	Held    int  `json:"held,omitzero"`
	NotHeld bool `json:"notHeld,omitzero"`
	// Triggered: the run was asked for (a trigger), not scheduled; its
	// Firing is when it was asked.
	Triggered bool `json:"triggered,omitzero"`
	// Runs are the runs started per job, as the instance's /metrics
	// counted them.
	Runs   map[string]int `json:"runs,omitzero"`
	Leader bool           `json:"leader,omitzero"`
	Msg    string         `json:"msg,omitzero"`
}

// String is a compact line for test logs.
func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s", e.T.Local().Format("15:04:05.000"), e.Instance, e.Kind)
	if e.Fence != 0 {
		fmt.Fprintf(&b, " fence=%d", e.Fence)
	}
	if e.Job != "" {
		fmt.Fprintf(&b, " job=%s", Firing{e.Job, e.Firing})
	}
	if e.Kind == EvWork {
		fmt.Fprintf(&b, " accepted=%v", e.Accepted)
	}
	if e.Triggered {
		b.WriteString(" triggered")
	}
	if e.Kind == EvTakenOver && e.Keeper != "" {
		fmt.Fprintf(&b, " from=%s", e.Keeper)
	}
	if e.Msg != "" {
		fmt.Fprintf(&b, " msg=%q", e.Msg)
	}
	return b.String()
}

// IsKind matches the events of any of kinds.
func IsKind(kinds ...Kind) func(Event) bool {
	return func(e Event) bool {
		for _, k := range kinds {
			if e.Kind == k {
				return true
			}
		}
		return false
	}
}

// IsKindBy matches the events of kind that instance reported.
func IsKindBy(kind Kind, instance string) func(Event) bool {
	return func(e Event) bool { return e.Kind == kind && e.Instance == instance }
}

// Filter returns the events that match.
func Filter(evs []Event, match func(Event) bool) []Event {
	var out []Event
	for _, e := range evs {
		if match(e) {
			out = append(out, e)
		}
	}
	return out
}

// Encoder writes events as JSON lines: the instance's side of the stream
// that Start reads. It is safe for concurrent use.
type Encoder struct {
	mu sync.Mutex
	w  io.Writer
}

// NewEncoder returns an Encoder writing to w.
func NewEncoder(w io.Writer) *Encoder { return &Encoder{w: w} }

// Encode writes e as one line, in one Write, so that lines never interleave.
func (enc *Encoder) Encode(e Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	enc.mu.Lock()
	defer enc.mu.Unlock()
	_, err = enc.w.Write(append(b, '\n'))
	return err
}
