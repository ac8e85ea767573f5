package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mongolock/mongolock/internal/cluster"
)

// The demo's instances report what they do as events (cluster.Event): JSON
// lines on stdout for the demo (demo-instance --events), readable lines
// otherwise (docker-compose). The demo itself adds events of its own (kills,
// stops) to the same log, from which the summary is computed.

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
	name string
	enc  *cluster.Encoder // nil: readable lines on w

	mu sync.Mutex
	w  io.Writer
}

func newEmitter(w io.Writer, json bool, name string) *emitter {
	em := &emitter{name: name, w: w}
	if json {
		em.enc = cluster.NewEncoder(w)
	}
	return em
}

func (e *emitter) emit(ev cluster.Event) {
	ev.T, ev.Instance = time.Now(), e.name
	if e.enc != nil {
		_ = e.enc.Encode(ev) // a failed write has nowhere to be reported
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	fmt.Fprintln(e.w, eventLine(ev, ""))
}

// demoLate is how late a run must start for its line to say so.
const demoLate = 500 * time.Millisecond

// clockFormat is how the demo prints instants: local time, milliseconds.
const clockFormat = "15:04:05.000"

// eventLine is the readable line for ev; extra is appended.
func eventLine(ev cluster.Event, extra string) string {
	line := fmt.Sprintf("%s  %-8s %s", ev.T.Local().Format(clockFormat), ev.Instance, describe(ev))
	if extra != "" {
		line += "  " + extra
	}
	return line
}

// describe says what ev means, in words.
func describe(ev cluster.Event) string {
	switch ev.Kind {
	case cluster.EvStart:
		if ev.HTTP != "" {
			return fmt.Sprintf("started (pid %d, keeper %s, metrics and health on http://%s)", ev.PID, ev.Keeper, ev.HTTP)
		}
		return fmt.Sprintf("started (pid %d, keeper %s)", ev.PID, ev.Keeper)
	case cluster.EvMetrics:
		var runs []string
		for _, j := range slices.Sorted(maps.Keys(ev.Runs)) {
			runs = append(runs, fmt.Sprintf("%s %d", j, ev.Runs[j]))
		}
		return "its /metrics counted runs: " + strings.Join(runs, ", ")
	case cluster.EvMigrated:
		if len(ev.Applied) == 0 {
			return fmt.Sprintf("migrations: nothing to apply (waited %s for another instance)", fmtDur(ev.Waited))
		}
		v := make([]string, len(ev.Applied))
		for i, a := range ev.Applied {
			v[i] = fmt.Sprint(a)
		}
		return "migrations: applied " + strings.Join(v, ", ")
	case cluster.EvReady:
		return "scheduler started; campaigning for " + demoLeaderLock
	case cluster.EvLead:
		return fmt.Sprintf("LEADS now (fence %d): runs the leader task", ev.Fence)
	case cluster.EvUnlead:
		return "stopped leading: " + ev.Msg
	case cluster.EvRun:
		line := fmt.Sprintf("runs %-11s firing %s", ev.Job, ev.Firing.Local().Format("15:04:05"))
		if late := ev.T.Sub(ev.Firing); late >= demoLate {
			line += fmt.Sprintf(", %.1f s late", late.Seconds())
		}
		return line
	case cluster.EvTakenOver:
		// A demo instance's keeper id begins with its name.
		from, _, _ := strings.Cut(ev.Keeper, "/")
		return fmt.Sprintf("takes over %s firing %s from %s, gone before starting it", ev.Job, ev.Firing.Local().Format("15:04:05"), from)
	case cluster.EvSkipped:
		return fmt.Sprintf("does not run %s firing %s here: %s", ev.Job, ev.Firing.Local().Format("15:04:05"), ev.Msg)
	case cluster.EvStartSeen:
		return fmt.Sprintf("died with its run of %s firing %s recorded as started (running)", ev.Job, ev.Firing.Local().Format("15:04:05"))
	case cluster.EvStopped:
		return "stopped cleanly"
	case cluster.EvError:
		return "error: " + ev.Msg
	case cluster.EvLog:
		return "log: " + ev.Msg
	case cluster.EvKilled:
		if ev.Leader {
			return "killed with SIGKILL (it was the leader)"
		}
		return "killed with SIGKILL"
	case cluster.EvStopping:
		if ev.Leader {
			return "asked to stop (it is the leader: it will hand over)"
		}
		return "asked to stop"
	case cluster.EvExited:
		if ev.Msg != "" {
			return "exited: " + ev.Msg
		}
		return "exited"
	}
	return string(ev.Kind)
}
