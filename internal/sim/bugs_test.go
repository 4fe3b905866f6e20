package sim

import (
	"flag"
	"strings"
	"testing"
)

var bugFlag = flag.String("sim.bug", "", "with -sim.seed: the bug to put back (refused, stalefast, wallclock, blind, staleforget)")

// bugCases are the bugs put back, one switch each.
var bugCases = []struct {
	name string
	bugs Bugs
}{
	{"refused", Bugs{RefusedIsLanded: true}},
	{"stalefast", Bugs{StaleFastPath: true}},
	{"wallclock", Bugs{WallClockLiveness: true}},
	{"blind", Bugs{BlindOutcome: true}},
	{"staleforget", Bugs{StaleForget: true}},
}

func bugsFlag() Bugs {
	for _, c := range bugCases {
		if strings.EqualFold(c.name, *bugFlag) {
			return c.bugs
		}
	}
	return Bugs{}
}

// TestBugsAreFound puts back each fixed bug: the simulation finds a
// violation within maxBugSeeds seeds, and none on those seeds without it.
func TestBugsAreFound(t *testing.T) {
	if *seedFlag != 0 {
		t.Skip("replaying one seed")
	}
	const maxBugSeeds = 2000
	for _, c := range bugCases {
		t.Run(c.name, func(t *testing.T) {
			for s := uint64(1); s <= maxBugSeeds; s++ {
				r := Run(Config{Seed: s, Bugs: c.bugs})
				if r.Violation == "" {
					continue
				}
				t.Logf("bug %s found by seed %d: %s", c.name, s, r.Violation)
				if ok := Run(Config{Seed: s}); ok.Violation != "" {
					t.Fatalf("seed %d fails without the bug too: %s", s, ok)
				}
				return
			}
			t.Fatalf("bug %s not found in %d seeds", c.name, maxBugSeeds)
		})
	}
}

var ratesFlag = flag.Bool("sim.rates", false, "print how many of the seeds find each bug")

// TestBugRates (with -sim.rates) counts, per bug, the seeds of 1..n that
// find it: the figures of docs/design/simulation.md.
func TestBugRates(t *testing.T) {
	if !*ratesFlag {
		t.Skip("no -sim.rates")
	}
	n := seeds()
	for _, c := range bugCases {
		found, first := 0, uint64(0)
		for s := uint64(1); s <= uint64(n); s++ {
			if r := Run(Config{Seed: s, Bugs: c.bugs}); r.Violation != "" {
				found++
				if first == 0 {
					first = s
					t.Logf("%s: seed %d: %s", c.name, s, r.Violation)
				}
			}
		}
		t.Logf("%s: found by %d of %d seeds (first: %d)", c.name, found, n, first)
	}
}
