package sim

import (
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/mongolock/mongolock/internal/planted"
)

// valueSeeds is how many seeds TestSimValues runs (10 with -short), and
// the most TestValuePlantedBugsCaught tries for each bug.
const valueSeeds = 40

// runValuesSeed runs seed's world with values on (World.Values).
func runValuesSeed(t *testing.T, seed uint64) Result {
	var res Result
	synctest.Test(t, func(t *testing.T) {
		w := Draw(seed)
		w.Values = true
		res = Run(w)
	})
	return res
}

// runValuesSeeds runs seeds in parallel with values on, and returns their
// results in order.
func runValuesSeeds(t *testing.T, seeds []uint64) []Result {
	out := make([]Result, len(seeds))
	t.Run("seeds", func(t *testing.T) {
		for i, seed := range seeds {
			t.Run(fmt.Sprint(seed), func(t *testing.T) {
				t.Parallel()
				out[i] = runValuesSeed(t, seed)
			})
		}
	})
	return out
}

// TestSimValues runs seeds in worlds whose leaders publish a value with
// every term and update it while they lead, and fails on every promise
// the default run holds (Gating), the values check (a value only written
// by its term's holder, checkValues) included.
func TestSimValues(t *testing.T) {
	n := valueSeeds
	if testing.Short() {
		n = 10
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	for i, res := range runValuesSeeds(t, seeds) {
		if res.Failed() {
			t.Errorf("seed %d with values broke %d promises; whole trace: %s\n%s",
				seeds[i], len(res.Violations), saveReport(res), res.Report(100))
		}
	}
}

// TestValuePlantedBugsCaught plants each bug of values in turn and runs
// seeds with values on (its hint first: catchHints) until one breaks the
// values check where two runs of the same seed without the bug do not: the
// check proves it can fail.
func TestValuePlantedBugsCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("plants each bug and runs seeds until it is caught: not in -short")
	}
	const prefix = "values:"
	for _, bug := range planted.ValueBugs {
		seed, tried, ok := catchWith(t, bug, prefix, valueSeeds, runValuesSeeds)
		if !ok {
			t.Errorf("planted bug %q: not caught (%s) by seeds 1 to %d with values", bug, prefix, valueSeeds)
			continue
		}
		t.Logf("planted bug %q: caught by seed %d (%s), %d seeds tried", bug, seed, prefix, tried)
	}
}
