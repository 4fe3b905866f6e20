package workflow_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
)

// A definition's lifecycle: paused, its workflows are accepted but none
// executes until it is active again, and a scheduled fire is skipped;
// deprecated, no new workflow starts.
func TestDefinitionLifecycle(t *testing.T) {
	t.Parallel()
	e := setup(t)
	def := workflow.Define("test.lifecycle", func(wf *workflow.Context, n int) (int, error) {
		return workflow.Step(wf, "inc", func(ctx context.Context) (int, error) { return n + 1, nil })
	})
	w := e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	ctx := testCtx(t)
	if st, err := workflow.DefinitionStateOf(ctx, e.P, def.Name()); err != nil || st != workflow.DefinitionActive {
		t.Fatalf("initial state %q %v, want active", st, err)
	}

	// Paused: accepted, held.
	must(t, workflow.SetDefinitionState(ctx, e.P, def.Name(), workflow.DefinitionPaused))
	testserver.Eventually(t, 10*time.Second, "worker holds the definition's segments", func() bool {
		return w.Paused(workflow.SegmentFunction(def.Name()))
	})
	id, err := workflow.Start(ctx, e.P, def, 1, workflow.WithID("held-1"))
	must(t, err)
	if r, err := e.P.Get(ctx, id); err != nil || r.State.Terminal() {
		t.Fatalf("workflow of a paused definition: %+v %v, want it waiting", r, err)
	}
	// A scheduled fire (a run of the start function) is skipped.
	fire, err := e.P.Enqueue(ctx, workflow.StartCall(def, 5))
	must(t, err)
	if r := e.wait(t, fire); r.State != jetflow.Success || string(r.Result) != `{"skipped":"definition paused"}` {
		t.Fatalf("fire of a paused definition: %s %s", r.State, r.Result)
	}
	if _, err := e.P.Get(ctx, workflow.TriggeredID(fire)); !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("the skipped fire started a workflow: %v", err)
	}
	resumed := time.Now()
	must(t, workflow.SetDefinitionState(ctx, e.P, def.Name(), workflow.DefinitionActive))
	r := e.wait(t, id)
	if r.State != jetflow.Success || string(r.Result) != "2" || r.CompletedTime.Before(resumed) {
		t.Fatalf("held workflow after resume: %s %s completed %s (resumed %s)", r.State, r.Result, r.CompletedTime, resumed)
	}

	// Deprecated: no new workflow.
	must(t, workflow.SetDefinitionState(ctx, e.P, def.Name(), workflow.DefinitionDeprecated))
	if _, err := workflow.Start(ctx, e.P, def, 1); !errors.Is(err, workflow.ErrDefinitionInactive) {
		t.Fatalf("start of a deprecated definition: %v, want ErrDefinitionInactive", err)
	}
	if err := workflow.SetDefinitionState(ctx, e.P, def.Name(), "bogus"); !errors.Is(err, workflow.ErrInvalidState) {
		t.Fatalf("bogus state: %v", err)
	}
}
