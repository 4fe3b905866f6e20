package workflow

import (
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/worker"
)

// The internal functions (segment, wake, start) are retried for about 8
// hours, never more than the worker's default ReplayGrace apart: a wake or
// segment that failed many times across server crashes runs again within
// seconds of the server's return (with the former 30 s cap a sleeping
// workflow resumed up to 30 s late after repeated crashes).
func TestInternalRetriesStayWithinTheReplayGrace(t *testing.T) {
	b := internalOptions.Backoff
	var total time.Duration
	for n := 1; n < internalOptions.MaxAttempts; n++ {
		d := b.Cap(n)
		if d > worker.DefaultReplayGrace {
			t.Fatalf("after %d failures an internal function waits up to %s, more than the replay grace (%s)", n, d, worker.DefaultReplayGrace)
		}
		total += d
	}
	if total < 8*time.Hour {
		t.Fatalf("internal functions retried for %s at most, want about 8 hours", total)
	}
}
