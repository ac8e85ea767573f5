// Package sim is a deterministic simulation of whole mongolock clusters:
// several instances (Sessions with Do and a semaphore, leader elections,
// Schedulers, migrators) and an operator, on a simulated MongoDB (internal/simdb),
// under testing/synctest, with every fault chosen by a seed: commands
// lost, their replies lost, applied late or slow; instances paused,
// suspended, killed, restarted, their clocks skewed and stepped; the
// server's clock stepped and its primary failed over. After each run the
// whole history is checked against the promises (check), by the
// simulation's own ground truth only, never by the library's events; the
// run counts how many firings the loss check judged (Coverage), and
// TestPlantedBugsCaught shows that each bug planted with internal/planted
// is caught. A run fails on the at-most-once core (Result.Gating) and
// reports the scheduler's liveness violations as open (Result.Open) until
// issue 27's classes are fixed; -sim.strict fails on every violation. Run
// it with `go test ./internal/sim -run Sim` (-sim.seed=N replays one seed,
// -sim.seeds=N runs N). TestSimValues runs worlds whose leaders publish
// lease values (World.Values), checked by values.go: a value only
// written by its term's holder; TestValuePlantedBugsCaught plants the
// bugs of values (planted.ValueBugs).
package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/simdb"
	"github.com/mongolock/mongolock/scheduler"
)

// offBeat is added to the run's round durations (its end, the schedulers'
// operation timeout) so that they do not end on the instant of a firing,
// at a whole second: goroutines woken at one instant run in any order, and
// which of a timeout and a firing comes first would be the Go scheduler's
// choice.
const offBeat = 1234567 * time.Nanosecond

// epoch is the true time the simulated clocks start at, near today so
// that traces read naturally (a bubble's clock starts in 2000).
var epoch = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

// Sim is one run.
type Sim struct {
	world World
	base  time.Duration // clocks read true time + base (+ skew)
	srv   *simdb.Server
	hist  *History
	op    *operator

	mu        sync.Mutex
	instances []*instance // by slot: the current incarnation
	gone      []*instance // earlier incarnations
	errs      []string

	// logCommands: every command sent, with its fate, goes to the trace.
	logCommands bool
}

// Result is what a run found.
type Result struct {
	World      World
	Violations []string
	Trace      []string
	// Coverage is what the loss check judged.
	Coverage Coverage
}

// Failed reports whether the run broke a promise the default run holds
// the library to (Gating); with strict, any promise.
func (r Result) Failed() bool { return len(r.Gating()) > 0 }

// Strict makes every violation gate, the scheduler's liveness promises
// (lost, over-run, triggers, records, a migration never applied)
// included; it is off by default while issue 27's open classes are
// fixed (-sim.strict sets it).
var Strict = false

// safety are the kinds of violation that break the at-most-once core
// (Gating): two holders at once (more than n of an n-slot semaphore), a
// smaller fence, a value written outside its holder's term, a never-lead
// candidate leading, a leader's lock released under its task, a healthy
// leader stepping down within the preference grace, a firing
// run twice (and
// a migration applied again after it was recorded applied: isSafety); and
// the simulation's own failures.
var safety = []string{"exclusion:", "fences:", "once:", "semaphore:", "sim:", "values:", "leadership:", "stepdown:", "handovers:"}

// Gating returns the violations the default run fails on: the safety
// ones, or all with Strict. The others are Open: found, counted and
// reported, not yet failing.
func (r Result) Gating() []string {
	if Strict {
		return r.Violations
	}
	var out []string
	for _, v := range r.Violations {
		if isSafety(v) {
			out = append(out, v)
		}
	}
	return out
}

// Open returns the violations that do not gate (Gating).
func (r Result) Open() []string {
	if Strict {
		return nil
	}
	var out []string
	for _, v := range r.Violations {
		if !isSafety(v) {
			out = append(out, v)
		}
	}
	return out
}

func isSafety(v string) bool {
	// A migration run after it was recorded applied, or applied twice
	// with each application recorded applied by its instance, gates; one
	// never applied is open (liveness).
	if strings.HasPrefix(v, "migrations: ") {
		return !strings.Contains(v, "never applied")
	}
	for _, p := range safety {
		if strings.HasPrefix(v, p) {
			return true
		}
	}
	return false
}

// Report is the failing run's story: the world, the violations, and the
// trace.
func (r Result) Report(traceLines int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v\n", r.World)
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "VIOLATION: %s\n", v)
	}
	trace := r.Trace
	if traceLines > 0 && len(trace) > traceLines {
		fmt.Fprintf(&b, "... (%d earlier trace lines)\n", len(trace)-traceLines)
		trace = trace[len(trace)-traceLines:]
	}
	for _, l := range trace {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// Run runs world to its end, in the calling goroutine's synctest bubble,
// and checks it.
func Run(w World) Result { return run(w, false) }

// run is Run, with every command sent and its fate in the trace if
// logCommands.
func run(w World, logCommands bool) Result {
	s := &Sim{world: w, hist: &History{start: time.Now()}, logCommands: logCommands}
	for _, j := range w.Jobs {
		s.hist.jobs = append(s.hist.jobs, j.Name)
	}
	s.base = epoch.Sub(time.Now())
	s.srv = simdb.NewServer(w.Flavor, s.base)
	s.srv.Observe(s.hist.applied)
	s.op = newOperator(s)

	for i := range w.Instances {
		s.instances = append(s.instances, s.startInstance(i, keeperID(w.Seed, i, 0), 0))
	}
	incarnations := make([]int, w.Instances)
	for _, e := range w.Events {
		if d := time.Duration(e.At) - s.hist.now(); d > 0 {
			time.Sleep(d)
		}
		s.hist.logf("EVENT %v", e)
		switch e.Kind {
		case Pause, Suspend:
			in := s.instances[e.Instance]
			if in.isDead() || in.frozen() {
				continue
			}
			in.freeze(e.Kind == Suspend)
			go func() {
				time.Sleep(e.D)
				if !in.isDead() {
					s.hist.logf("%s resumes", in.life.Name)
					in.thaw()
				}
			}()
		case Kill:
			in := s.instances[e.Instance]
			if !in.isDead() && !in.isStopped() {
				in.kill()
			}
		case StopGraceful:
			in := s.instances[e.Instance]
			if !in.isDead() && !in.isStopped() && !in.frozen() {
				go in.stop()
			}
		case Restart:
			old := s.instances[e.Instance]
			if !old.isDead() && !old.isStopped() {
				continue
			}
			old.waitStopped()
			incarnations[e.Instance]++
			keeper := keeperID(w.Seed, e.Instance, incarnations[e.Instance])
			if w.SameKeeper {
				keeper = keeperID(w.Seed, e.Instance, 0)
			}
			s.mu.Lock()
			s.gone = append(s.gone, old)
			s.mu.Unlock()
			s.instances[e.Instance] = s.startInstance(e.Instance, keeper, incarnations[e.Instance])
		case StepClock:
			in := s.instances[e.Instance]
			in.clock.Step(e.D)
			s.hist.update(func() {
				in.life.Offsets = append(in.life.Offsets, OffsetAt{At: s.hist.now(), Offset: in.clock.Offset() - s.base})
			})
		case ServerStep:
			s.srv.StepClock(e.D)
		case Failover:
			s.srv.SetElecting(true)
			go func() {
				time.Sleep(e.D)
				s.srv.StepClock(e.Step)
				s.srv.SetElecting(false)
				s.hist.logf("new primary elected")
			}()
		default:
			s.op.do(e)
		}
	}
	// Firings due until w.Duration are judged: the cluster runs on, with
	// no more events, for their misfire threshold.
	if d := w.Duration + w.misfireThreshold() + offBeat - s.hist.now(); d > 0 {
		time.Sleep(d)
	}
	s.hist.logf("END: stopping every instance")
	end := s.hist.now()
	// Before the stops: a dead instance's goroutines take as long to end
	// as the order they run in makes them.
	s.op.close()
	var wg sync.WaitGroup
	for _, in := range append(s.instances, s.gone...) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if in.frozen() && !in.isDead() {
				in.thaw()
			}
			in.stop()
		}()
	}
	wg.Wait()
	res := Result{World: w}
	for _, e := range s.errs {
		res.Violations = append(res.Violations, "sim: "+e)
	}
	violations, cov := check(s, end)
	res.Violations, res.Coverage = append(res.Violations, violations...), cov
	res.Trace = s.hist.lines()
	return res
}

// logSent writes a command sent and its fate to the trace.
func (s *Sim) logSent(c simdb.Sent) {
	f := c.Fate
	s.hist.logf("%s sends %016x %s: send %v queue %v reply %v drop %v lose reply %v",
		c.Link, digest(c.Command), docString(shown(c.Command).(bson.D)), f.Send, f.Queue, f.Reply, f.Drop, f.LoseReply)
}

func keeperID(seed uint64, slot, incarnation int) string {
	return fmt.Sprintf("k%d-%d-%d", seed%1000, slot+1, incarnation)
}

func (s *Sim) fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.hist.logf("FATAL %s", msg)
	s.mu.Lock()
	s.errs = append(s.errs, msg)
	s.mu.Unlock()
}

// plan is a link's fate for each command. It is drawn from the command's
// content (less what is random or per-session: digest) and at how many
// instants before the link sent that content, with the link's seed, so that
// concurrent commands of one instance get the same fates whichever is sent
// first. Commands of one content sent at one instant (two goroutines
// reading the server's clock at once) get one fate: which of them is sent
// first is the Go scheduler's choice, and a fate each would make the run
// depend on it.
func (s *Sim) plan(linkSeed uint64) simdb.Plan {
	ttl := s.world.TTL
	type sent struct {
		instants uint64 // before the last
		last     time.Time
	}
	var mu sync.Mutex
	seen := map[uint64]sent{}
	return func(cmd bson.D) simdb.Fate {
		h := digest(cmd)
		now := time.Now()
		mu.Lock()
		u, ok := seen[h]
		if ok && !u.last.Equal(now) {
			u.instants++
		}
		u.last = now
		seen[h] = u
		mu.Unlock()
		f := s.world.faultsAt(s.hist.now())
		rng := rand.New(rand.NewPCG(linkSeed^h, u.instants))
		lat := func() time.Duration { return randDur(rng, 100*time.Microsecond, 2*time.Millisecond) }
		fate := simdb.Fate{Send: lat(), Reply: lat()}
		r := rng.Float64()
		switch {
		case r < f.Drop:
			fate.Drop = true
		case r < f.Drop+f.LoseReply:
			fate.LoseReply = true
		case r < f.Drop+f.LoseReply+f.Late:
			fate.Send = randDur(rng, ttl/2, 4*ttl) // after the client gave up, and after its next command
		case r < f.Drop+f.LoseReply+f.Late+f.Slow:
			fate.Reply = randDur(rng, ttl/4, 2*ttl)
		case r < f.Drop+f.LoseReply+f.Late+f.Slow+f.Queue:
			fate.Queue = randDur(rng, ttl/4, 3*ttl)
		}
		return fate
	}
}

// digest hashes cmd without what differs from run to run of one seed
// (ignored), and without the order of arrays (a batch's requests come in
// the order their goroutines ran): FNV-1a over each value, a document's
// keys and its values' hashes, an array's hashes sorted. Its values
// decide the commands' fates, so they stay what they were
// (TestDigestUnchanged).
func digest(cmd bson.D) uint64 { return digestValue(cmd) }

func digestValue(v any) uint64 {
	h := fnv64(fnvOffset)
	switch x := v.(type) {
	case bson.D:
		for _, e := range x {
			if ignored(e) {
				continue
			}
			h.str(e.Key)
			h.put(digestValue(e.Value))
		}
	case bson.A:
		var small [16]uint64
		sums := small[:0]
		for _, e := range x {
			sums = append(sums, digestValue(e))
		}
		slices.Sort(sums)
		for _, n := range sums {
			h.put(n)
		}
	case bson.ObjectID, bson.Binary:
	case string:
		h.str(x)
	case int32:
		h.put(uint64(x))
	case int64:
		h.put(uint64(x))
	case bool:
		if x {
			h.put(1)
		}
	case bson.DateTime:
		h.put(uint64(x))
	case float64:
		h.put(math.Float64bits(x))
	default:
		w := new(fnv64) // h itself would escape, for every value
		*w = h
		fmt.Fprint(w, v)
		h = *w
	}
	return uint64(h)
}

// fnv64 is hash/fnv's FNV-1a, 64 bits, without its allocation.
type fnv64 uint64

const (
	fnvOffset fnv64 = 14695981039346656037
	fnvPrime  fnv64 = 1099511628211
)

func (h *fnv64) Write(b []byte) (int, error) {
	for _, c := range b {
		*h = (*h ^ fnv64(c)) * fnvPrime
	}
	return len(b), nil
}

func (h *fnv64) str(s string) {
	for i := 0; i < len(s); i++ {
		*h = (*h ^ fnv64(s[i])) * fnvPrime
	}
}

// put hashes n's 8 bytes, little-endian.
func (h *fnv64) put(n uint64) {
	for range 8 {
		*h = (*h ^ fnv64(n&0xff)) * fnvPrime
		n >>= 8
	}
}

// ignored reports whether digest leaves e out: what is random or
// per-session (the driver's session, a renewal's nonce rn, a claim's token
// cid, a Session's token tok), or depends on the wall clock (maxTimeMS).
// Values of the types that carry random tokens (bson.ObjectID, bson.Binary)
// are left out wherever they are.
func ignored(e bson.E) bool {
	switch e.Key {
	case "lsid", "txnNumber", "$clusterTime", "maxTimeMS", "$db", "rn", "cid", "tok":
		return true
	}
	return false
}

// shown is cmd as digest sees it, for traces: less what digest leaves out,
// and with arrays in one order (digest ignores theirs: a batch's requests
// come in the order their goroutines ran).
func shown(v any) any {
	switch x := v.(type) {
	case bson.D:
		out := make(bson.D, 0, len(x))
		for _, e := range x {
			if !ignored(e) {
				out = append(out, bson.E{Key: e.Key, Value: shown(e.Value)})
			}
		}
		return out
	case bson.A:
		out := make(bson.A, len(x))
		for i, e := range x {
			out[i] = shown(e)
		}
		slices.SortStableFunc(out, func(a, b any) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
		return out
	case bson.ObjectID:
		return "ObjectID"
	case bson.Binary:
		return "Binary"
	}
	return v
}

func (in *instance) frozen() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	select {
	case <-in.running:
		return false
	default:
		return true
	}
}

func (in *instance) isStopped() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.stopped
}

// operator pauses, resumes, triggers and removes jobs, from a client of
// its own.
type operator struct {
	s    *Sim
	link *simdb.Link
	cli  interface{ Disconnect(context.Context) error }
	do   func(Event)
}

func newOperator(s *Sim) *operator {
	o := &operator{s: s, link: s.srv.NewLink("operator", nil)}
	if s.logCommands {
		o.link.OnSend(s.logSent)
	}
	client, err := o.link.Connect(nil)
	if err != nil {
		s.fatalf("operator: connect: %v", err)
		o.do = func(Event) {}
		return o
	}
	o.cli = client
	jobs := client.Database(dbName).Collection(scheduler.DefaultJobsCollection)
	o.do = func(e Event) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		begin := s.hist.now()
		var err error
		switch e.Kind {
		case OpPause:
			p := scheduler.Pause{Note: "sim"}
			if e.D > 0 {
				p.Until = s.srv.Now().Add(e.D)
			}
			err = scheduler.PauseJob(ctx, jobs, e.Job, p)
		case OpResume:
			err = scheduler.ResumeJob(ctx, jobs, e.Job)
		case OpTrigger:
			_, err = scheduler.TriggerJob(ctx, jobs, e.Job)
		case OpRemove:
			err = scheduler.RemoveJob(ctx, jobs, e.Job)
		}
		s.hist.update(func() {
			s.hist.ops = append(s.hist.ops, OpAction{Begin: begin, At: s.hist.now(), Kind: e.Kind, Job: e.Job, D: e.D, Err: err})
		})
		if err != nil {
			s.hist.logf("operator: %v: %v", e, err)
		}
	}
	return o
}

func (o *operator) close() {
	if o.cli != nil {
		_ = o.cli.Disconnect(context.Background())
	}
}
