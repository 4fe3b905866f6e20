package retrier_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/retrier"
)

// Retriers run to their end, and Cancel cancels them, while a replica that
// is behind answers half of the direct gets of the runs bucket without the
// records: a step that finds no retrier record, and Cancel, ask the
// leader before they give up.
func TestRetriersWhenAReplicaIsBehind(t *testing.T) {
	t.Parallel()
	e := setup(t, retrier.Options{InitialBackoff: 20 * time.Millisecond})
	e.StaleRuns(t)
	e.startProcess(t)
	ctx := context.Background()
	const n = 10
	ids := make([]string, n)
	for i := range n {
		id, err := e.R.Run(ctx, Flaky.With(FlakyArgs{Key: fmt.Sprintf("k%d", i), Failures: 1}))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	for i, id := range ids {
		if st := e.wait(t, id); st.State != jetflow.Success || st.Attempts != 2 {
			t.Fatalf("retrier %d: %+v, want success after 2 attempts", i, st)
		}
		if c := e.tg.nCalls(fmt.Sprintf("k%d", i)); c != 2 {
			t.Fatalf("retrier %d: %d calls, want 2", i, c)
		}
		// The internal runs went on at their first attempt: a record the
		// stale replica lacks is asked of the leader, not failed on (each
		// failure waits longer for the next try: once over a minute).
		for _, run := range []string{retrier.StartID(id), jetflow.CompletionID(retrier.AttemptID(id, 1)), jetflow.CompletionID(retrier.AttemptID(id, 2))} {
			r, err := engine.Of(e.P).Store().Lookup(ctx, run)
			if err != nil {
				t.Fatalf("retrier %d: internal run %s: %v", i, run, err)
			}
			if r.State != jetflow.Success || r.Attempts != 1 {
				t.Fatalf("retrier %d: internal run %s: %s after %d attempts (%s), want success at the first", i, run, r.State, r.Attempts, r.Error)
			}
		}
	}
	// Canceled while attempt 2 waits a minute.
	slow := retrier.New(e.P, retrier.Options{InitialBackoff: time.Minute, NoJitter: true})
	for i := range n {
		key := fmt.Sprintf("c%d", i)
		id, err := slow.Run(ctx, Flaky.With(FlakyArgs{Key: key, Always: true}))
		if err != nil {
			t.Fatal(err)
		}
		testserver.Eventually(t, time.Minute, "attempt 2 waiting", func() bool {
			st, err := slow.Status(ctx, id)
			return err == nil && !st.NextAttempt.IsZero()
		})
		if err := slow.Cancel(ctx, id); err != nil {
			t.Fatalf("cancel %s: %v", id, err)
		}
		if st := e.wait(t, id); st.State != jetflow.Canceled {
			t.Fatalf("retrier %s: %+v, want canceled", id, st)
		}
	}
}

// Status of a live retrier never says not found while a replica that is
// behind answers half of the direct gets: absences are confirmed by the
// leader.
func TestStatusWhenAReplicaIsBehind(t *testing.T) {
	t.Parallel()
	e := setup(t, retrier.Options{InitialBackoff: time.Minute, NoJitter: true})
	e.StaleRuns(t)
	e.startProcess(t)
	ctx := context.Background()
	id, err := e.R.Run(ctx, Flaky.With(FlakyArgs{Key: "k", Always: true}))
	if err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, time.Minute, "attempt 2 waiting", func() bool {
		st, err := e.R.Status(ctx, id)
		return err == nil && !st.NextAttempt.IsZero()
	})
	for i := range 40 {
		if st, err := e.R.Status(ctx, id); err != nil || st.State != jetflow.InProgress {
			t.Fatalf("status %d: %+v, %v; want inProgress", i, st, err)
		}
	}
}
