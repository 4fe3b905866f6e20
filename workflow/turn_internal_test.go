package workflow

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jetflow-dev/jetflow"
)

func TestTurnOf(t *testing.T) {
	t.Parallel()
	at := func(seg int, waiting bool) *cursor { return &cursor{Seg: seg, Waiting: waiting} }
	done := &cursor{Seg: 2, Done: true}
	for _, tc := range []struct {
		name string
		cur  *cursor
		n    int
		want segmentTurn
	}{
		{"first segment, no cursor", nil, 1, turnFirst},
		{"first segment again", at(1, false), 1, turnMine},
		{"first segment again, parked", at(1, true), 1, turnMine},
		{"first segment, a later one ran", at(2, false), 1, turnAhead},
		{"first segment, workflow ended", done, 1, turnAhead},
		{"later segment, no cursor", nil, 3, turnNoCursor},
		{"segment before parked", at(2, true), 3, turnMine},
		{"segment again", at(3, false), 3, turnMine},
		{"segment again, parked", at(3, true), 3, turnMine},
		{"segment before runs again", at(2, false), 3, turnRedelivered},
		{"a later segment ran", at(4, false), 3, turnAhead},
		{"workflow ended", done, 3, turnAhead},
		{"cursor far behind", at(1, true), 3, turnBehind},
	} {
		if got := turnOf(tc.cur, tc.n); got != tc.want {
			t.Errorf("%s: turnOf(%+v, %d) = %d, want %d", tc.name, tc.cur, tc.n, got, tc.want)
		}
	}
}

func TestCursorReached(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cur  *cursor
		want bool
	}{
		{nil, false},
		{&cursor{Seg: 1}, false},
		{&cursor{Seg: 1, Waiting: true}, false},
		{&cursor{Seg: 2}, false},
		{&cursor{Seg: 2, Waiting: true}, true},
		{&cursor{Seg: 3}, true},
		{&cursor{Seg: 4}, true},
		{&cursor{Seg: 1, Done: true}, true},
	} {
		if got := tc.cur.reached(3); got != tc.want {
			t.Errorf("reached(3) of %+v = %v, want %v", tc.cur, got, tc.want)
		}
	}
}

func TestCursorStates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		cur            *cursor
		running, waits bool
	}{
		{"segment 1 running", &cursor{Seg: 1}, true, false},
		{"segment 2 running", &cursor{Seg: 2}, true, false},
		{"segment 1 parked", &cursor{Seg: 1, Waiting: true}, false, true},
		{"ended", &cursor{Seg: 1, Done: true}, false, false},
		{"ended while waiting", &cursor{Seg: 2, Waiting: true, Done: true}, false, false},
	} {
		if got := tc.cur.running(); got != tc.running {
			t.Errorf("%s: running = %v, want %v", tc.name, got, tc.running)
		}
		if got := tc.cur.waits(); got != tc.waits {
			t.Errorf("%s: waits = %v, want %v", tc.name, got, tc.waits)
		}
	}
	var none *cursor
	if none.waits() {
		t.Error("no cursor waits")
	}
}

func TestRestartCopies(t *testing.T) {
	t.Parallel()
	steps := map[string]*Entry{
		"1":   {State: StepDone},
		"2":   {State: StepDone},
		"2.1": {State: StepDone},
		"3":   {State: StepFailed},
		"3.1": {State: StepDone},
		"4":   {State: StepDone},
		"10":  {State: StepStarted},
	}
	cut := restartCut(steps)
	if cut != "3" {
		t.Fatalf("restartCut = %q, want 3", cut)
	}
	for step, want := range map[string]bool{"1": true, "2": true, "2.1": true, "3": false, "3.1": false, "4": false, "10": false} {
		if got := copied(step, steps[step].State, cut); got != want {
			t.Errorf("copied(%s) = %v, want %v", step, got, want)
		}
	}
	all := map[string]*Entry{"1": {State: StepDone}, "2": {State: StepDone}}
	if cut := restartCut(all); cut != "" || !copied("2", StepDone, cut) {
		t.Errorf("all steps done: cut %q, step 2 copied %v", cut, copied("2", StepDone, cut))
	}
}

func TestForkCopy(t *testing.T) {
	t.Parallel()
	src := map[string]*Entry{
		"1":  {Step: "1", State: StepDone, Revision: 7, Segment: 2, Result: []byte(`"one"`)},
		"2":  {Step: "2", State: StepDone, Revision: 8, Segment: 2},
		"10": {Step: "10", State: StepDone, Revision: 9},
		"11": {Step: "11", State: StepFailed, Revision: 10},
		"12": {Step: "12", State: StepDone, Revision: 11},
	}
	for _, tc := range []struct {
		name string
		src  map[string]*Entry
		have map[string]*Entry
		want []string
	}{
		{"nothing written yet: the steps before the cut, in code order", src, nil, []string{"1", "2", "10"}},
		{"written in part by another copier", src, map[string]*Entry{"2": {}}, []string{"1", "10"}},
		{"complete", src, map[string]*Entry{"1": {}, "2": {}, "10": {}}, nil},
		{"every step succeeded", map[string]*Entry{"1": {Step: "1", State: StepDone}, "2": {Step: "2", State: StepDone}}, nil, []string{"1", "2"}},
		{"the first step failed", map[string]*Entry{"1": {Step: "1", State: StepFailed}, "2": {Step: "2", State: StepDone}}, nil, nil},
		{"no steps", map[string]*Entry{}, nil, nil},
	} {
		got := forkCopy(tc.src, tc.have)
		var steps []string
		for _, e := range got {
			steps = append(steps, e.Step)
			if e.Revision != 0 || e.Segment != 0 {
				t.Errorf("%s: copy of %s at revision %d, segment %d; want neither", tc.name, e.Step, e.Revision, e.Segment)
			}
			if e == tc.src[e.Step] {
				t.Errorf("%s: step %s is the source's entry, not a copy", tc.name, e.Step)
			}
		}
		if fmt.Sprint(steps) != fmt.Sprint(tc.want) {
			t.Errorf("%s: forkCopy = %v, want %v", tc.name, steps, tc.want)
		}
	}
	if src["1"].Revision != 7 || src["1"].Segment != 2 {
		t.Errorf("forkCopy changed the source's entry: %+v", src["1"])
	}
}

func TestFirstSegmentRan(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		state jetflow.State
		steps int
		want  bool
	}{
		{jetflow.Pending, 0, false},
		{jetflow.Canceled, 0, false},
		{jetflow.Canceled, 1, true},
		{jetflow.Pending, 2, true},
		{jetflow.InProgress, 0, true},
		{jetflow.Success, 0, true},
		{jetflow.Failed, 0, true},
	} {
		if got := firstSegmentRan(&jetflow.Run{State: tc.state}, tc.steps); got != tc.want {
			t.Errorf("%s with %d steps: firstSegmentRan = %v, want %v", tc.state, tc.steps, got, tc.want)
		}
	}
}

func TestNoRetry(t *testing.T) {
	t.Parallel()
	failed := errors.New("boom")
	for _, tc := range []struct {
		name     string
		err      error
		attempt  int
		maxTries int
		want     bool
	}{
		{"succeeded", nil, 1, 3, true},
		{"failed, attempts left", failed, 1, 3, false},
		{"failed, last attempt", failed, 3, 3, true},
		{"permanent", jetflow.Permanent(failed), 1, 3, true},
	} {
		if got := noRetry(tc.err, tc.attempt, tc.maxTries); got != tc.want {
			t.Errorf("%s: noRetry = %v, want %v", tc.name, got, tc.want)
		}
	}
}
