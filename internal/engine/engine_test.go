package engine_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
)

var states = []jetflow.State{engine.None, jetflow.Pending, jetflow.InProgress, jetflow.Success, jetflow.Failed, jetflow.Canceled}

// The state machine, whole: every (step, from, to) is either in this table
// (allowed) or refused with ErrTransition.
func TestStateMachine(t *testing.T) {
	const n, p, ip, ok, f, c = engine.None, jetflow.Pending, jetflow.InProgress, jetflow.Success, jetflow.Failed, jetflow.Canceled
	allowed := map[engine.Step][][2]jetflow.State{
		engine.Schedule:   {{n, p}},
		engine.Open:       {{n, ip}},
		engine.Claim:      {{n, ip}, {p, ip}, {ip, ip}},
		engine.Beat:       {{ip, ip}},
		engine.Succeed:    {{n, ok}, {p, ok}, {ip, ok}},
		engine.Retry:      {{n, p}, {p, p}, {ip, p}},
		engine.Fail:       {{n, f}, {p, f}, {ip, f}},
		engine.Lost:       {{ip, f}},
		engine.Cancel:     {{n, c}, {p, c}, {ip, c}},
		engine.Release:    {{p, p}},
		engine.Orphan:     {{p, c}},
		engine.DeadLetter: {{n, f}},
	}
	if len(engine.Steps()) != len(allowed) {
		t.Fatalf("steps %v, table has %d", engine.Steps(), len(allowed))
	}
	for _, step := range engine.Steps() {
		for _, from := range states {
			for _, to := range states {
				want := false
				for _, pair := range allowed[step] {
					if pair == [2]jetflow.State{from, to} {
						want = true
					}
				}
				name := fmt.Sprintf("%s %q->%q", step, from, to)
				err := engine.Check(step, from, to)
				switch {
				case want && err != nil:
					t.Errorf("%s refused: %v", name, err)
				case !want && !errors.Is(err, engine.ErrTransition):
					t.Errorf("%s: %v, want ErrTransition", name, err)
				}
			}
		}
	}
	// No step leaves a terminal state.
	for _, step := range engine.Steps() {
		for _, from := range []jetflow.State{ok, f, c} {
			for _, to := range states {
				if engine.Check(step, from, to) == nil {
					t.Errorf("%s leaves terminal %s", step, from)
				}
			}
		}
	}
}

func TestChildIDRoundTrip(t *testing.T) {
	long := "p" + string(make([]byte, 0)) + fmt.Sprintf("%0200d", 7)[:195]
	for _, parent := range []string{"order-42", long} {
		for attempt := 1; attempt <= 3; attempt++ {
			for n := range 5 {
				id := engine.ChildID(parent, attempt, n)
				if err := jetflow.ValidateRunID(id); err != nil {
					t.Fatalf("ChildID(%q, %d, %d) = %q: %v", parent, attempt, n, id, err)
				}
				got, ok := engine.ChildAttempt(parent, id, 3)
				if !ok || got != attempt {
					t.Fatalf("ChildAttempt of %q = %d %v, want %d", id, got, ok, attempt)
				}
			}
		}
	}
	if _, ok := engine.ChildAttempt("order-42", "order-43-1-0", 3); ok {
		t.Fatal("a child of another run taken for one of order-42")
	}
}

func TestCronRunIDRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	id := engine.CronRunID("reports.daily-eu", at)
	name, got, ok := engine.ParseCronRunID(id)
	if !ok || name != "reports.daily-eu" || !got.Equal(at) {
		t.Fatalf("ParseCronRunID(%q) = %q %s %v", id, name, got, ok)
	}
}
