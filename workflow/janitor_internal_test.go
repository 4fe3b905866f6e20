package workflow

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
)

// The journal's janitor purges a workflow's journal once its record is gone
// or ended a retention period ago. A replica of the runs bucket that is
// behind says a live workflow's record is gone: the janitor reads it from
// the leader, and the journal of every live workflow stays.
func TestJanitorKeepsALiveJournalWhenAReplicaIsBehind(t *testing.T) {
	t.Parallel()
	ts, p, jr := journalEnv(t)
	ctx := context.Background()
	ts.StaleRuns(t)
	const n = 20
	now := time.Now().UTC()
	for i := range n {
		id := fmt.Sprintf("live-%d", i)
		r := &jetflow.Run{ID: id, Name: "wf.live", Kind: jetflow.Retryable, State: jetflow.Pending, ScheduledTime: now, CreationTime: now}
		if _, err := engine.Of(p).Runs().Write(ctx, engine.Schedule, engine.None, r, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := jr.kv.Put(ctx, stepKey(id, "1"), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		if err := janitor(ctx, p, "wf.live", fmt.Sprintf("live-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	var purged []string
	for i := range n {
		id := fmt.Sprintf("live-%d", i)
		if _, err := jr.kv.Get(ctx, stepKey(id, "1")); err != nil {
			purged = append(purged, fmt.Sprintf("%s (%v)", id, err))
		}
	}
	if len(purged) > 0 {
		t.Fatalf("%d of %d live workflows lost their journal: %v", len(purged), n, purged)
	}
	// An ended workflow's journal still goes, once its retention is over:
	// here at once, its record being gone for good.
	if _, err := jr.kv.Put(ctx, stepKey("gone-1", "1"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := janitor(ctx, p, "wf.live", "gone-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := jr.kv.Get(ctx, stepKey("gone-1", "1")); err == nil {
		t.Fatal("the journal of a workflow without a record was kept")
	}
}
