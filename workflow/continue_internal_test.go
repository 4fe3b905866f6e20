package workflow

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
)

// A segment's claim keeps the record's children that may still run: the
// first segment (what makes the record a workflow), runs of steps that
// wait, and drops the segment before and the runs and timers of ended
// steps.
func TestPruneChildren(t *testing.T) {
	wf := "w1"
	until := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := map[string]*Entry{
		"1": {Step: "1", Kind: KindCall, State: StepDone, Waits: &Waits{Run: "call-1"}},
		"2": {Step: "2", Kind: KindSleep, State: StepDone, Waits: &Waits{Until: until}},
		"3": {Step: "3", Kind: KindCall, State: StepWaiting, Waits: &Waits{Run: "call-3"}},
		"4": {Step: "4", Kind: KindEvent, State: StepWaiting, Waits: &Waits{Event: "go", Until: until}},
		"5": {Step: "5", Kind: KindStep, State: StepFailed},
	}
	children := []string{SegmentID(wf, 1), "call-1", runID(wf, "timer", "2"), SegmentID(wf, 4), "call-3", runID(wf, "timer", "4"), "other"}
	for _, tc := range []struct {
		n    int
		want []string
	}{
		{n: 5, want: []string{SegmentID(wf, 1), "call-3", runID(wf, "timer", "4"), "other"}},
		// Segment 1, the one before segment 2, is never dropped.
		{n: 2, want: []string{SegmentID(wf, 1), SegmentID(wf, 4), "call-3", runID(wf, "timer", "4"), "other"}},
	} {
		got := engine.StartRecord(&jetflow.Run{Children: slices.Clone(children)}, "", time.Now(), endedRuns(wf, tc.n, steps)).Children
		if !slices.Equal(got, tc.want) {
			t.Errorf("segment %d: %v, want %v", tc.n, got, tc.want)
		}
	}
}

// A continued workflow's steps: only the current run's, and for Restart
// with a first run's ids.
func TestGenerationSteps(t *testing.T) {
	mk := func(ids ...string) map[string]*Entry {
		m := map[string]*Entry{}
		for _, id := range ids {
			m[id] = &Entry{Step: id}
		}
		return m
	}
	keys := func(m map[string]*Entry) []string {
		var out []string
		for k, e := range m {
			if e.Step != k {
				t.Errorf("step %s keyed %s", e.Step, k)
			}
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	all := []string{"1", "2.1", "g2.1", "g2.2.1", "g3.1"}
	for _, tc := range []struct {
		gen  int
		want []string
	}{
		{1, []string{"1", "2.1"}},
		{2, []string{"g2.1", "g2.2.1"}},
		{3, []string{"g3.1"}},
		{4, nil},
	} {
		if got := keys(generation(mk(all...), tc.gen)); !slices.Equal(got, tc.want) {
			t.Errorf("run %d: %v, want %v", tc.gen, got, tc.want)
		}
	}
	snap := &snapshot{steps: mk(all...), cur: &cursor{Seg: 4, Gen: 2}}
	if got := keys(currentRun(snap)); !slices.Equal(got, []string{"1", "2.1"}) {
		t.Errorf("run 2 for Restart: %v", got)
	}
}

// How a segment ends, from every combination that matters.
func TestDecideEnd(t *testing.T) {
	returned := func(err error) branchOutcome { return branchOutcome{returned: true, err: err} }
	suspended := branchOutcome{}
	for _, tc := range []struct {
		name           string
		stopped, fatal bool
		main           branchOutcome
		unreached      bool
		want           segmentEnd
	}{
		{"stopped wins over a fatal error", true, true, returned(nil), false, endRetry},
		{"stopped while suspended", true, false, suspended, false, endRetry},
		{"fatal while another branch waits", false, true, suspended, false, endFail},
		{"returned before a journaled step", false, false, returned(nil), true, endFail},
		{"suspended: unreached steps are later ones", false, false, suspended, true, endPark},
		{"continue as new", false, false, returned(&ContinueAsNewError{}), false, endContinue},
		{"continue as new, wrapped", false, false, returned(fmt.Errorf("x: %w", &ContinueAsNewError{})), false, endContinue},
		{"returned an error", false, false, returned(errors.New("no")), false, endFail},
		{"returned", false, false, returned(nil), false, endSucceed},
		{"every branch waits", false, false, suspended, false, endPark},
	} {
		if got := decideEnd(tc.stopped, tc.fatal, tc.main, tc.unreached); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// The cursor's transitions keep its revision (the compare-and-swap's
// base), its run and input, and change only what they name.
func TestCursorTransitions(t *testing.T) {
	parked := &cursor{Seg: 3, Waiting: true, Waits: []string{"x"}, Gen: 2, Input: []byte(`1`), rev: 9}
	got := parked.taken(4)
	if got.state() != cursorRunning || got.Seg != 4 || got.Waits != nil || got.Gen != 2 || string(got.Input) != "1" || got.rev != 9 {
		t.Errorf("taken: %+v", got)
	}
	if parked.Seg != 3 || parked.state() != cursorParked {
		t.Errorf("taken changed its receiver: %+v", parked)
	}
	p := got.parked([]string{"event go"})
	if p.state() != cursorParked || p.Seg != 4 || len(p.Waits) != 1 || !p.waits() || !p.parkedAt(4) {
		t.Errorf("parked: %+v", p)
	}
	c := got.continued([]byte(`{"n":2}`))
	if c.state() != cursorParked || c.Gen != 3 || string(c.Input) != `{"n":2}` || c.Seg != 4 || !c.waits() {
		t.Errorf("continued: %+v", c)
	}
	if first := (&cursor{Seg: 1}).continued(nil); first.Gen != 2 {
		t.Errorf("continued from run 1 (Gen 0): run %d", first.Gen)
	}
	if done := (&cursor{Seg: 2, Waiting: true, Done: true}); done.state() != cursorDone || done.waits() || done.parkedAt(2) {
		t.Errorf("done: %+v", done)
	}
}
