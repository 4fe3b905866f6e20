package workflow_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/testserver"

	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
)

type tally struct {
	Sum  int `json:"sum"`
	Seen int `json:"seen"`
}

// counterDef sums 10 "tick" events, 3 per run: each run continues as new
// with the running tally.
var counterDef = workflow.Define("test.counter", func(wf *workflow.Context, t tally) (int, error) {
	workflow.SetQueryHandler(wf, "tally", func() (tally, error) { return t, nil })
	for range 3 {
		v, err := workflow.AwaitEvent[int](wf, "tick", 0)
		if err != nil {
			return 0, err
		}
		t.Sum += v
		t.Seen++
		if t.Seen == 10 {
			return t.Sum, nil
		}
	}
	return 0, workflow.ContinueAsNew(wf, t)
})

// A workflow that continues as new is one workflow from outside: the
// same record in progress throughout, every event sent (some while a run
// ends and the next starts) consumed once, the current run's steps only,
// the earlier runs' steps removed, and a record whose children do not
// grow with each wait.
func TestContinueAsNew(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, counterDef)) })
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, counterDef, tally{})
	must(t, err)
	want := 0
	for i := 1; i <= 10; i++ {
		must(t, workflow.SendEvent(ctx, e.P, id, "tick", i))
		want += i
		if i == 7 {
			// Run 3 took event 7 and waits for the next.
			var st *workflow.Status
			testserver.Eventually(t, 20*time.Second, "run 3 waiting after event 7", func() bool {
				s, err := workflow.Get(ctx, e.P, id)
				st = s
				return err == nil && s.Generation == 3 && s.Waiting && len(s.Steps) == 2
			})
			if st.Run.State.Terminal() {
				t.Fatalf("after 7 events: %s", st.Run.State)
			}
			if q, err := workflow.Query[tally](ctx, e.P, id, "tally"); err != nil || q != (tally{Sum: 28, Seen: 7}) {
				t.Fatalf("query in run 3: %+v, %v", q, err)
			}
			evs, claims := 0, 0
			for _, k := range e.journalKeys(t, id) {
				if strings.Contains(k, ".s.") && !strings.Contains(k, ".s.g3.") {
					t.Errorf("journal key %s of an earlier run left", k)
				}
				if strings.Contains(k, ".ev.") {
					evs++
				}
				if strings.Contains(k, ".claim.") {
					claims++
				}
			}
			// Events 1-6, consumed by runs 1 and 2, are gone with their
			// claims; event 7 is run 3's.
			if evs != 1 || claims != 1 {
				t.Errorf("run 3's journal holds %d events and %d claims, want 1 and 1", evs, claims)
			}
		}
	}
	got, err := workflow.Result(ctx, e.P, counterDef, id)
	if err != nil || got != want {
		t.Fatalf("result %d, %v; want %d", got, err, want)
	}
	st := e.status(t, id)
	if st.Generation != 4 {
		t.Errorf("ended in run %d, want 4", st.Generation)
	}
	// The first segment and the last: each claim drops the segment
	// before, and the runs and timers of ended steps.
	if n := len(st.Run.Children); n > 3 {
		t.Errorf("record has %d children after %d segments: %v", n, st.Segment, st.Run.Children)
	}
}

// ledgerDef adds updates to a total, two per run, continuing as new; an
// update of 0 ends it.
var ledgerDef = workflow.Define("test.ledger", func(wf *workflow.Context, total int) (int, error) {
	workflow.SetQueryHandler(wf, "total", func() (int, error) { return total, nil })
	for range 2 {
		end := false
		err := workflow.AwaitUpdate(wf, "add", 0, func(n int) (int, error) {
			end = n == 0
			total += n
			return total, nil
		}, nil)
		if err != nil || end {
			return total, err
		}
	}
	return 0, workflow.ContinueAsNew(wf, total)
})

// Updates, queries and continue-as-new through a worker replaced and a
// NATS server restart: every update is answered with the running total,
// the query sees it, and the result is the sum.
func TestUpdatesAndContinueAcrossRestarts(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w1 := e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, ledgerDef)) })
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, ledgerDef, 0)
	must(t, err)
	update := func(n, want int) {
		t.Helper()
		var got int
		// Retried only while it is refused before it is stored (the
		// connection back after the restart): a stored update that timed
		// out would still be applied.
		testserver.Eventually(t, 30*time.Second, fmt.Sprintf("update add %d answered", n), func() bool {
			v, err := workflow.Update[int, int](ctx, e.P, id, "add", n)
			if errors.Is(err, workflow.ErrUpdateTimeout) {
				t.Fatalf("update add %d: %v", n, err)
			}
			got = v
			return err == nil
		})
		if got != want {
			t.Fatalf("update add %d: total %d, want %d", n, got, want)
		}
	}
	update(1, 1)
	update(2, 3)
	update(3, 6) // run 2
	must(t, w1.Stop(ctx))
	e.Restart()
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, ledgerDef)) })
	update(4, 10) // run 2, on the new worker, after the restart
	update(5, 15) // run 3
	if q, err := workflow.Query[int](ctx, e.P, id, "total"); err != nil || q != 15 {
		t.Fatalf("query: %d, %v", q, err)
	}
	update(0, 15)
	got, err := workflow.Result(ctx, e.P, ledgerDef, id)
	if err != nil || got != 15 {
		t.Fatalf("result %d, %v", got, err)
	}
	if st := e.status(t, id); st.Generation != 3 {
		t.Errorf("ended in run %d, want 3", st.Generation)
	}
}
