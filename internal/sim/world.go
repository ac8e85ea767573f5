package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/mongolock/mongolock/internal/simdb"
	"github.com/mongolock/mongolock/scheduler"
)

// World is one run of the simulation, drawn from its seed: the cluster,
// its workload and every fault, at true times (the bubble's, from the
// run's start).
type World struct {
	Seed      uint64
	Flavor    simdb.Flavor
	TTL       time.Duration
	Duration  time.Duration // how long the cluster runs before it stops
	Instances int
	Skews     []time.Duration // each instance's wall clock offset
	// Keepers: a restarted instance keeps its keeper id (a fixed name
	// such as a host name) rather than taking a new one.
	SameKeeper bool
	Jobs       []JobSpec
	// LeaderOnly: the schedulers run their jobs on the leader of the
	// runner's election only.
	LeaderOnly bool
	// TwoSchedulers: each Session carries two Schedulers on one jobs
	// collection, the jobs split between them.
	TwoSchedulers bool
	// Values: each leader publishes a value with its term and updates it
	// while it leads (runner.WithValue, SetValue), for the values check
	// (values.go). Not drawn: TestSimValues sets it, so that the default
	// seeds' worlds, and the fates of their commands, stay as they were.
	Values bool

	// Candidates are the instances' parts among the leader election's
	// candidates, by slot; nil: all alike (leadership.go).
	Candidates []Candidacy
	Faults     FaultRates
	// Storms are spans of true time in which the commands' faults are
	// StormFaults instead of Faults: networks fail in bursts.
	Storms      []Storm
	StormFaults FaultRates
	Events      []Event
}

// Storm is a span of true time from At, for D.
type Storm struct{ At, D time.Duration }

// JobSpec is a cron job every instance registers.
type JobSpec struct {
	Name    string
	Period  time.Duration // an "@every" spec
	Run     time.Duration // how long a run takes
	Fail    float64       // chance an attempt fails
	Retries int
	Overlap scheduler.Overlap
}

// Spec is the job's cron spec.
func (j JobSpec) Spec() string { return "@every " + j.Period.String() }

// FaultRates are the chances each command meets a fault.
type FaultRates struct {
	Drop, LoseReply, Late, Slow, Queue float64
}

// EventKind is a fault or an operator's action.
type EventKind int

// The events of a world.
const (
	Pause        EventKind = iota // the instance stops (SIGSTOP) for D
	Suspend                       // the instance's host suspends for D: its monotonic clock stops, its boot clock counts it
	Kill                          // the instance dies (SIGKILL)
	Restart                       // a dead or stopped instance starts again
	StopGraceful                  // the instance stops cleanly (a rolling deploy)
	StepClock                     // the instance's wall clock steps by D
	ServerStep                    // the server's clock steps by D
	Failover                      // an election of D; the new primary's clock is off by Step
	OpPause                       // the operator pauses Job until D from now (0: until resumed)
	OpResume
	OpTrigger
	OpRemove
)

var eventNames = [...]string{"pause", "suspend", "kill", "restart", "stop", "step clock", "server clock step",
	"failover", "operator pause", "operator resume", "operator trigger", "operator remove"}

func (k EventKind) String() string { return eventNames[k] }

// Event happens At (true time from the start).
type Event struct {
	At       time.Duration
	Kind     EventKind
	Instance int
	D        time.Duration
	Step     time.Duration
	Job      string
}

func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s", e.Kind)
	switch e.Kind {
	case Pause, Suspend, Kill, Restart, StopGraceful, StepClock:
		fmt.Fprintf(&b, " app%d", e.Instance+1)
	}
	switch e.Kind {
	case Pause, Suspend, StepClock, ServerStep:
		fmt.Fprintf(&b, " %v", e.D)
	case Failover:
		fmt.Fprintf(&b, " election %v, new primary's clock %+v", e.D, e.Step)
	case OpPause:
		fmt.Fprintf(&b, " %s", e.Job)
		if e.D > 0 {
			fmt.Fprintf(&b, " for %v", e.D)
		}
	case OpResume, OpTrigger, OpRemove:
		fmt.Fprintf(&b, " %s", e.Job)
	}
	return b.String()
}

// Draw makes the world of seed.
func Draw(seed uint64) World {
	rng := rand.New(rand.NewPCG(seed, 0x6d6f6e676f6c6f63))
	w := World{Seed: seed}
	if rng.IntN(4) == 0 {
		w.Flavor = simdb.FerretDB1
	}
	w.TTL = []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}[rng.IntN(3)]
	w.Duration = time.Duration(15+rng.IntN(25)) * time.Second
	w.Instances = 2 + rng.IntN(3)
	w.SameKeeper = rng.IntN(2) == 0
	maxSkew := []time.Duration{0, 50 * time.Millisecond, 400 * time.Millisecond, 2 * time.Second}[rng.IntN(4)]
	if rng.IntN(10) == 0 {
		maxSkew = 10 * time.Minute
	}
	for range w.Instances {
		w.Skews = append(w.Skews, randDur(rng, -maxSkew, maxSkew))
	}
	nJobs := 1 + rng.IntN(3)
	for i := range nJobs {
		j := JobSpec{Name: fmt.Sprintf("job%d", i+1), Period: time.Duration(1+rng.IntN(3)) * time.Second}
		j.Run = randDur(rng, 0, j.Period/2)
		if rng.IntN(6) == 0 {
			j.Run = randDur(rng, j.Period, 3*j.Period) // longer than the period
			j.Overlap = []scheduler.Overlap{scheduler.OverlapSkip, scheduler.OverlapWait, scheduler.OverlapCancel}[rng.IntN(3)]
		}
		if rng.IntN(4) == 0 {
			j.Fail = 0.3
			j.Retries = rng.IntN(3)
		}
		w.Jobs = append(w.Jobs, j)
	}
	w.LeaderOnly = rng.IntN(5) == 0
	w.TwoSchedulers = !w.LeaderOnly && nJobs > 1 && rng.IntN(5) == 0

	// Faults of commands: most runs have few, some many.
	scale := []float64{0, 0.002, 0.01, 0.04}[rng.IntN(4)]
	w.Faults = faultRates(scale)

	// Events, in the middle of the run, leaving its end quiet so that
	// every firing can settle before the checks.
	busy := w.Duration - 3*w.TTL - 2*time.Second
	nEvents := rng.IntN(6)
	dead := make([]bool, w.Instances)
	for range nEvents {
		e := Event{At: randDur(rng, 2*time.Second, busy), Instance: rng.IntN(w.Instances)}
		switch r := rng.IntN(100); {
		case r < 18:
			e.Kind, e.D = Pause, randDur(rng, w.TTL/4, 3*w.TTL)
		case r < 30:
			e.Kind, e.D = Suspend, randDur(rng, w.TTL/4, 3*w.TTL)
		case r < 48:
			e.Kind = Kill
			if !dead[e.Instance] && rng.IntN(2) == 0 {
				w.Events = append(w.Events, Event{At: e.At + randDur(rng, time.Second, 3*w.TTL), Kind: Restart, Instance: e.Instance})
			}
			dead[e.Instance] = true
		case r < 56:
			e.Kind = StopGraceful
			w.Events = append(w.Events, Event{At: e.At + randDur(rng, 0, 2*w.TTL), Kind: Restart, Instance: e.Instance})
		case r < 64:
			e.Kind, e.D = StepClock, randDur(rng, -maxSkew-time.Second, maxSkew+time.Second)
		case r < 70:
			// Within the safety margin: steps beyond it are outside what
			// leases promise (see the lock package's documentation).
			e.Kind, e.D = ServerStep, randDur(rng, -w.TTL/20, w.TTL/20)
		case r < 76:
			e.Kind, e.D, e.Step = Failover, randDur(rng, 0, 2*w.TTL), randDur(rng, -w.TTL/20, w.TTL/20)
		default:
			e.Job = w.Jobs[rng.IntN(len(w.Jobs))].Name
			switch rng.IntN(5) {
			case 0, 1:
				e.Kind = OpPause
				if rng.IntN(2) == 0 {
					e.D = randDur(rng, time.Second, 10*time.Second)
				} else {
					w.Events = append(w.Events, Event{At: e.At + randDur(rng, time.Second, 10*time.Second), Kind: OpResume, Job: e.Job})
				}
			case 2, 3:
				e.Kind = OpTrigger
			default:
				e.Kind = OpRemove
				w.Events = append(w.Events, Event{At: e.At + randDur(rng, time.Second, 5*time.Second), Kind: OpResume, Job: e.Job})
			}
		}
		w.Events = append(w.Events, e)
	}
	slices.SortStableFunc(w.Events, func(a, b Event) int { return int(a.At - b.At) })
	w.Candidates = drawCandidates(seed, w.Instances)
	if scale == heavyFaults {
		w.drawStorms()
	}
	return w
}

// heavyFaults is the fault scale whose worlds have storms.
const heavyFaults = 0.04

// drawStorms makes a world of heavy faults one of a few storms of them,
// heavier still, in light ones: from a source of its own, so that the
// rest of the world is drawn as before.
func (w *World) drawStorms() {
	rng := rand.New(rand.NewPCG(w.Seed, 0x73746f726d73))
	w.Faults = faultRates(0.01)
	w.StormFaults = faultRates(0.1)
	busy := w.Duration - 3*w.TTL - 2*time.Second
	for range 1 + rng.IntN(3) {
		w.Storms = append(w.Storms, Storm{At: randDur(rng, 2*time.Second, busy), D: randDur(rng, w.TTL, 4*w.TTL)})
	}
	slices.SortFunc(w.Storms, func(a, b Storm) int { return int(a.At - b.At) })
}

// faultRates are the faults of a world of scale.
func faultRates(scale float64) FaultRates {
	return FaultRates{Drop: scale, LoseReply: scale, Late: scale / 2, Slow: scale, Queue: scale / 2}
}

// faultsAt are the faults of commands sent at true time t.
func (w World) faultsAt(t time.Duration) FaultRates {
	for _, st := range w.Storms {
		if t >= st.At && t < st.At+st.D {
			return w.StormFaults
		}
	}
	return w.Faults
}

func randDur(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// String describes the world in a few lines, for a failing seed's report.
func (w World) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %s, %d instances (skews %v), TTL %v, %v", w.Seed, w.Flavor, w.Instances, w.Skews, w.TTL, w.Duration)
	if w.LeaderOnly {
		b.WriteString(", leader-only")
	}
	if w.TwoSchedulers {
		b.WriteString(", two schedulers per session")
	}
	if w.SameKeeper {
		b.WriteString(", restarts keep their keeper id")
	}
	if w.Candidates != nil {
		fmt.Fprintf(&b, ", leader candidates %+v (grace %v)", w.Candidates, w.preferenceGrace())
	}
	fmt.Fprintf(&b, "\n  faults per command: %+v", w.Faults)
	for _, st := range w.Storms {
		fmt.Fprintf(&b, "\n  a storm at %v for %v: faults per command %+v", st.At, st.D, w.StormFaults)
	}
	for _, j := range w.Jobs {
		fmt.Fprintf(&b, "\n  %s %q: runs %v", j.Name, j.Spec(), j.Run)
		if j.Fail > 0 {
			fmt.Fprintf(&b, ", fails %.0f%% (retries %d)", j.Fail*100, j.Retries)
		}
		if j.Run > j.Period {
			fmt.Fprintf(&b, ", overlap %v", j.Overlap)
		}
	}
	for _, e := range w.Events {
		fmt.Fprintf(&b, "\n  at %v: %v", e.At, e)
	}
	return b.String()
}
