package workflow

import (
	"slices"
	"testing"
	"time"
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
		got := pruneChildren(slices.Clone(children), endedRuns(wf, tc.n, steps))
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
