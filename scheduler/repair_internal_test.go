package scheduler

import (
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
)

func TestRepairCandidate(t *testing.T) {
	cut := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		st   jetflow.State
		due  time.Time
		want bool
	}{
		{jetflow.Pending, cut.Add(-time.Second), true},
		{jetflow.Pending, cut, false},
		{jetflow.Pending, cut.Add(2 * time.Hour), false}, // waiting far ahead: not copied
		{jetflow.Pending, time.Time{}, false},
		{jetflow.InProgress, cut.Add(time.Hour), true},
		{jetflow.InProgress, time.Time{}, true},
		{jetflow.Success, cut.Add(-time.Hour), false},
	} {
		if got := repairCandidate(c.st, c.due, cut); got != c.want {
			t.Errorf("repairCandidate(%s, %s) = %v, want %v", c.st, c.due, got, c.want)
		}
	}
}
