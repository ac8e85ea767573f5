package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// The demo's instances report what they do as events: JSON lines on stdout
// for the demo (demo-instance --events), readable lines otherwise
// (docker-compose). The demo itself adds events of its own (kills, stops,
// exits) to the same log, from which the summary is computed.

// Event kinds.
const (
	// Sent by an instance.
	evStart    = "start"    // connected: PID, Keeper, HTTP
	evMigrated = "migrated" // Up returned: Applied, Waited
	evReady    = "ready"    // the scheduler started: firings after T are claimed
	evLead     = "lead"     // a leader term began: Fence
	evUnlead   = "unlead"   // the leader task ended: Msg says why
	evRun      = "run"      // a job run started: Job, Firing, Fence
	evMetrics  = "metrics"  // after the scheduler stopped: Runs, scraped from its own /metrics
	evStopped  = "stopped"  // shut down cleanly
	evError    = "error"    // Msg
	evLog      = "log"      // a log line the instance wrote on stderr: Msg

	// Added by the demo.
	evKilled   = "killed"   // the demo sent SIGKILL; Leader if it led
	evStopping = "stopping" // the demo asked it to stop (closed its stdin); Leader if it led
	evExited   = "exited"   // the process ended: Msg is the exit error, if any
)

// demoEvent is one event. T is the wall clock of whoever wrote it; the demo and
// its instances share a machine, hence a clock.
type demoEvent struct {
	T        time.Time `json:"t"`
	Instance string    `json:"instance"`
	Ev       string    `json:"ev"`
	PID      int       `json:"pid,omitempty"`
	Keeper   string    `json:"keeper,omitempty"`
	Job      string    `json:"job,omitempty"`
	Firing   time.Time `json:"firing,omitzero"`
	Fence    uint64    `json:"fence,omitempty"`
	Applied  []int64   `json:"applied,omitempty"`
	WaitedMS int64     `json:"waitedMs,omitempty"`
	Msg      string    `json:"msg,omitempty"`
	Leader   bool      `json:"leader,omitempty"`
	// HTTP is the address an instance serves /metrics and health checks on.
	HTTP string `json:"http,omitempty"`
	// Runs are runs started per job, as its /metrics counted them.
	Runs map[string]int `json:"runs,omitempty"`
}

// demoJob is one of the instances' cron jobs. Both specs fire at the
// multiples of every since the Unix epoch (the scheduler aligns @every so;
// */2 seconds are the even seconds), which is how the summary enumerates the
// firings that were due.
type demoJob struct {
	name, spec string
	every      time.Duration
}

func demoJobs() []demoJob {
	return []demoJob{
		{name: "tick", spec: "@every 1s", every: time.Second},
		{name: "even-second", spec: "*/2 * * * * *", every: 2 * time.Second},
	}
}

// demoLeaderLock is the lock the instances' LeaderAwareRunner campaigns for.
const demoLeaderLock = "demo/leader"

// emitter writes an instance's events, JSON or readable, one line each.
type emitter struct {
	mu   sync.Mutex
	w    io.Writer
	json bool
	name string
}

func (e *emitter) emit(ev demoEvent) {
	ev.T, ev.Instance = time.Now(), e.name
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.json {
		b, _ := json.Marshal(ev) // nothing in demoEvent can fail to marshal
		_, _ = e.w.Write(append(b, '\n'))
		return
	}
	fmt.Fprintln(e.w, eventLine(ev, ""))
}

// clockFormat is how the demo prints instants: local time, milliseconds.
const clockFormat = "15:04:05.000"

// eventLine is the readable line for ev; extra is appended.
func eventLine(ev demoEvent, extra string) string {
	line := fmt.Sprintf("%s  %-8s %s", ev.T.Local().Format(clockFormat), ev.Instance, describe(ev))
	if extra != "" {
		line += "  " + extra
	}
	return line
}

// describe says what ev means, in words.
func describe(ev demoEvent) string {
	switch ev.Ev {
	case evStart:
		if ev.HTTP != "" {
			return fmt.Sprintf("started (pid %d, keeper %s, metrics and health on http://%s)", ev.PID, ev.Keeper, ev.HTTP)
		}
		return fmt.Sprintf("started (pid %d, keeper %s)", ev.PID, ev.Keeper)
	case evMetrics:
		var runs []string
		for _, j := range slices.Sorted(maps.Keys(ev.Runs)) {
			runs = append(runs, fmt.Sprintf("%s %d", j, ev.Runs[j]))
		}
		return "its /metrics counted runs: " + strings.Join(runs, ", ")
	case evMigrated:
		if len(ev.Applied) == 0 {
			return fmt.Sprintf("migrations: nothing to apply (waited %s for another instance)", fmtDur(time.Duration(ev.WaitedMS)*time.Millisecond))
		}
		v := make([]string, len(ev.Applied))
		for i, a := range ev.Applied {
			v[i] = fmt.Sprint(a)
		}
		return "migrations: applied " + strings.Join(v, ", ")
	case evReady:
		return "scheduler started; campaigning for " + demoLeaderLock
	case evLead:
		return fmt.Sprintf("LEADS now (fence %d): runs the leader task", ev.Fence)
	case evUnlead:
		return "stopped leading: " + ev.Msg
	case evRun:
		return fmt.Sprintf("runs %-11s firing %s", ev.Job, ev.Firing.Local().Format("15:04:05"))
	case evStopped:
		return "stopped cleanly"
	case evError:
		return "error: " + ev.Msg
	case evLog:
		return "log: " + ev.Msg
	case evKilled:
		if ev.Leader {
			return "killed with SIGKILL (it was the leader)"
		}
		return "killed with SIGKILL"
	case evStopping:
		if ev.Leader {
			return "asked to stop (it is the leader: it will hand over)"
		}
		return "asked to stop"
	case evExited:
		if ev.Msg != "" {
			return "exited: " + ev.Msg
		}
		return "exited"
	}
	return ev.Ev
}
