package sim

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

var (
	seedFlag   = flag.Uint64("sim.seed", 0, "run only this seed, with its whole trace")
	seedsFlag  = flag.Int("sim.seeds", 1000, "how many seeds to run, from -sim.first")
	firstFlag  = flag.Uint64("sim.first", 1, "the first seed to run")
	traceFlag  = flag.Bool("sim.trace", false, "print the trace of every seed run (with -sim.seed, every command sent and its fate too)")
	strictFlag = flag.Bool("sim.strict", false, "fail on every violation, the open liveness ones too (Strict)")
	openFlag   = flag.String("sim.open", "", "write each open seed's violations, one a line, to this file")
)

func TestMain(m *testing.M) {
	flag.Parse()
	Strict = *strictFlag
	if os.Getenv("GOGC") == "" {
		// A run allocates fast and keeps little: at the default GOGC,
		// collections took a fifth of its CPU time (at 400 the default
		// run's process peaks at about 230 MB).
		debug.SetGCPercent(gcPercent)
	}
	goleak.VerifyTestMain(m)
}

// gcPercent is the simulation's GOGC, unless the environment sets one.
const gcPercent = 400

// TestSim runs the seeds, in parallel, and fails with the story of each
// seed that broke a promise. A failing seed replays with -sim.seed=N.
func TestSim(t *testing.T) {
	if *seedFlag != 0 {
		res := runSeed(t, *seedFlag)
		if res.Failed() || *traceFlag || testing.Verbose() {
			t.Log("\n" + res.Report(0))
		}
		if res.Failed() {
			t.Fatalf("seed %d broke %d promises", *seedFlag, len(res.Violations))
		}
		return
	}
	n := *seedsFlag
	if testing.Short() {
		n = min(n, 100)
	}
	shards := runtime.GOMAXPROCS(0)
	var next atomic.Uint64
	next.Store(*firstFlag)
	last := *firstFlag + uint64(n)
	var mu sync.Mutex
	var failed []Result
	var cov Coverage
	open := map[string]int{} // open violations by kind
	var openSeeds []uint64
	var openLines []string
	ran := 0
	start := time.Now()
	for i := range shards {
		t.Run(fmt.Sprintf("shard%d", i), func(t *testing.T) {
			t.Parallel()
			for {
				seed := next.Add(1) - 1
				if seed >= last {
					return
				}
				res := runSeed(t, seed)
				mu.Lock()
				ran++
				cov.add(res.Coverage)
				if res.Failed() {
					failed = append(failed, res)
				}
				if o := res.Open(); len(o) > 0 {
					openSeeds = append(openSeeds, seed)
					for _, v := range o {
						kind, _, _ := strings.Cut(v, ":")
						open[kind]++
						line, _, _ := strings.Cut(v, "\n")
						openLines = append(openLines, fmt.Sprintf("%d %s", seed, line))
					}
				}
				mu.Unlock()
				if res.Failed() {
					t.Errorf("seed %d broke %d promises; replay: go test ./internal/sim -run 'TestSim$' -sim.seed=%d (whole trace: %s)\n%s",
						seed, len(res.Violations), seed, saveReport(res), res.Report(200))
				} else if *traceFlag {
					t.Log("\n" + res.Report(0))
				}
			}
		})
	}
	t.Cleanup(func() {
		t.Logf("%d seeds from %d in %v, %d failed", ran, *firstFlag, time.Since(start).Round(time.Millisecond), len(failed))
		t.Logf("%v", cov)
		if len(openSeeds) > 0 {
			slices.Sort(openSeeds)
			if *openFlag != "" {
				slices.Sort(openLines)
				if err := os.WriteFile(*openFlag, []byte(strings.Join(openLines, "\n")+"\n"), 0o644); err != nil {
					t.Errorf("-sim.open: %v", err)
				}
			}
			t.Logf("open (issue 27: reported, not failing; -sim.strict fails on them): %v in %d of %d seeds, e.g. %v",
				open, len(openSeeds), ran, openSeeds[:min(len(openSeeds), 12)])
		}
		// The loss check must see most of what it checks: a check that
		// finds everything out of scope passes everything.
		if ran >= minSeedsForShare && cov.share() < minJudgedShare {
			t.Errorf("the loss check judged %.1f %% of the firings, less than %.0f %%:\n%v", 100*cov.share(), 100*minJudgedShare, cov)
		}
	})
}

// The share of firings the loss check must judge over a run of at least
// minSeedsForShare seeds, as issue 27 asks. The world's draw gives about
// 91.3 % over the 1000 default seeds (kills, storms and faults of commands
// beyond θ's share for them, and the runs ahead of a firing in its job's
// order, keep the rest out of reach of the promise): the floor guards
// against the check going blind again. Smaller runs vary more, and are not
// held to it.
const (
	minJudgedShare   = 0.90
	minSeedsForShare = 1000
)

// saveReport writes res's whole story to a file in the temporary
// directory, and returns its name.
func saveReport(res Result) string {
	name := filepath.Join(os.TempDir(), fmt.Sprintf("mongolock-sim-%d.txt", res.World.Seed))
	if err := os.WriteFile(name, []byte(res.Report(0)), 0o644); err != nil {
		return "not saved: " + err.Error()
	}
	return name
}

// runSeed runs seed's world in a bubble of its own.
func runSeed(t *testing.T, seed uint64) Result { return runWorld(t, Draw(seed)) }

// runWorld runs w in a synctest bubble of its own.
func runWorld(t *testing.T, w World) Result {
	var res Result
	synctest.Test(t, func(t *testing.T) {
		res = run(w, *traceFlag && *seedFlag != 0)
	})
	return res
}
