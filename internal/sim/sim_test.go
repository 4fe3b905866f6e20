package sim

import (
	"flag"
	"os"
	"testing"
	"time"
)

var (
	seedFlag  = flag.Uint64("sim.seed", 0, "replay one seed, printing its trace")
	seedsFlag = flag.Int("sim.seeds", 0, "seeds to run (default: 500, 100 under -race; JETFLOW_SIM=long: 20000)")
	traceFlag = flag.Int("sim.trace", 60, "with -sim.seed: the last steps to print")
)

func seeds() int {
	switch {
	case *seedsFlag > 0:
		return *seedsFlag
	case os.Getenv("JETFLOW_SIM") == "long":
		return 20000
	case raceEnabled:
		return 100
	}
	return 500
}

// TestSimulation runs seeds 1..n with every fault and no bug: no invariant
// may break.
func TestSimulation(t *testing.T) {
	if *seedFlag != 0 {
		t.Skip("replaying one seed: see TestReplay")
	}
	n := seeds()
	t0 := time.Now()
	var runs, ended, steps int
	for s := 1; s <= n; s++ {
		r := Run(Config{Seed: uint64(s)})
		if r.Violation != "" {
			t.Fatal(r)
		}
		runs, ended, steps = runs+r.Runs, ended+r.Ended, steps+r.Steps
	}
	t.Logf("%d seeds, %d steps, %d runs accepted (%d ended) in %v", n, steps, runs, ended, time.Since(t0).Round(time.Millisecond))
}

// TestReplay replays -sim.seed=N exactly and prints its trace.
func TestReplay(t *testing.T) {
	if *seedFlag == 0 {
		t.Skip("no -sim.seed")
	}
	r := Run(Config{Seed: *seedFlag, Bugs: bugsFlag(), TraceLen: *traceFlag})
	t.Log(r)
	for _, l := range r.Trace {
		t.Log(l)
	}
	if r.Violation != "" {
		t.Fail()
	}
}
