package scheduler

import (
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
)

func TestPaceWait(t *testing.T) {
	for _, c := range []struct {
		n, perSec int
		elapsed   time.Duration
		want      time.Duration
	}{
		{500, 10_000, 0, 50 * time.Millisecond},                     // ahead of the pace: waits
		{500, 10_000, 20 * time.Millisecond, 30 * time.Millisecond}, // partly
		{500, 10_000, 50 * time.Millisecond, 0},                     // on the pace
		{500, 10_000, time.Second, 0},                               // behind it: never waits
		{10_000, 10_000, 400 * time.Millisecond, 600 * time.Millisecond},
		{500, 0, 0, 0}, // no limit
	} {
		if got := paceWait(c.n, c.perSec, c.elapsed); got != c.want {
			t.Errorf("paceWait(%d, %d, %s) = %s, want %s", c.n, c.perSec, c.elapsed, got, c.want)
		}
	}
}

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
