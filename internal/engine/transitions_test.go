package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
)

func TestNamedTransitions(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	running := &jetflow.Run{ID: "r1", State: jetflow.InProgress, Attempts: 2, Owner: "w1",
		StartedTime: now.Add(-time.Minute), History: []jetflow.Attempt{{Attempt: 1, Outcome: "failed"}}}
	held := &jetflow.Run{ID: "c1", State: jetflow.Pending, HeldBy: "p1"}
	cases := []struct {
		name    string
		step    Step
		from    *jetflow.Run
		next    *jetflow.Run
		state   jetflow.State
		err     string
		history int
	}{
		{"an at-most-once run's worker is lost", Lost, running, LoseRun(running, now), jetflow.Failed, jetflow.ErrWorkerLost.Error(), 2},
		{"a retryable run's last attempt is lost", Lost, running, LoseLastAttempt(running, now), jetflow.Failed, "attempt 2 lost, no attempts left", 2},
		{"a held child's parent did not succeed", Orphan, held, OrphanRun(held, now), jetflow.Canceled, OrphanError, 0},
	}
	for _, c := range cases {
		n := c.next
		if n.State != c.state || !strings.Contains(n.Error, c.err) || len(n.History) != c.history || !n.CompletedTime.Equal(now) {
			t.Errorf("%s: %s %q, %d attempts in history, completed %v", c.name, n.State, n.Error, len(n.History), n.CompletedTime)
		}
		if err := Check(c.step, c.from.State, n.State); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if c.from == n {
			t.Errorf("%s: the current record was changed in place", c.name)
		}
	}
	if len(running.History) != 1 || running.State != jetflow.InProgress {
		t.Errorf("the current record was changed: %+v", running)
	}
	if last := LoseRun(running, now).History[1]; last.Outcome != "lost" || last.Worker != "w1" || last.Attempt != 2 {
		t.Errorf("lost attempt %+v", last)
	}
}
