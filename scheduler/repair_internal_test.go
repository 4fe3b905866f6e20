package scheduler

import (
	"context"
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

// A dispatch settles a delayed entry (starts its run, or drops it as
// obsolete) only on a read of its record that is not behind it: the record
// is written before its entry, so a read that misses it, or finds an older
// revision, is a replica's or a leader's that has not applied every write
// (a leader just elected), even when it is the leader's word.
func TestDoubtRecord(t *testing.T) {
	pending := func(rev uint64) *jetflow.Run { return &jetflow.Run{State: jetflow.Pending, Revision: rev} }
	for _, c := range []struct {
		name string
		r    *jetflow.Run
		err  error
		want bool
	}{
		{"the record at the entry's revision", pending(7), nil, false},
		{"the record changed since", pending(9), nil, false},
		{"not found: a read behind the writes", nil, jetflow.ErrNotFound, true},
		{"an older revision: a read behind the writes", pending(5), nil, true},
		{"the read failed", nil, context.DeadlineExceeded, true},
	} {
		if got := doubtRecord(c.r, c.err, 7); got != c.want {
			t.Errorf("%s: doubtRecord = %v, want %v", c.name, got, c.want)
		}
	}
}
