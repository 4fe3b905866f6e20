package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
)

func TestThreeStepsEachRunOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	def := workflow.Define("test.three", func(wf *workflow.Context, in int) (int, error) {
		sum := in
		for i := 1; i <= 3; i++ {
			v, err := workflow.Step(wf, fmt.Sprintf("add-%d", i), func(ctx context.Context) (int, error) {
				e.inc(fmt.Sprintf("step-%d", i))
				return i, nil
			})
			if err != nil {
				return 0, err
			}
			sum += v
		}
		return sum, nil
	})
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, def, 10, workflow.WithID("three-1"))
	must(t, err)
	out, err := workflow.Result(ctx, e.P, def, id)
	must(t, err)
	if out != 16 {
		t.Fatalf("result %d, want 16", out)
	}
	for i := 1; i <= 3; i++ {
		if n := e.n(fmt.Sprintf("step-%d", i)); n != 1 {
			t.Errorf("step %d ran %d times, want 1", i, n)
		}
	}
	st := e.status(t, id)
	if st.Run.State != jetflow.Success || len(st.Steps) != 3 {
		t.Fatalf("status %s with %d steps: %+v", st.Run.State, len(st.Steps), st.Steps)
	}
	for i, s := range st.Steps {
		if s.Name != fmt.Sprintf("add-%d", i+1) || s.State != workflow.StepDone || s.Attempts != 1 || s.Kind != workflow.KindStep {
			t.Errorf("step %d: %+v", i, s)
		}
	}
	// The id is an idempotency key.
	if _, err := workflow.Start(ctx, e.P, def, 10, workflow.WithID("three-1")); !errors.Is(err, producerErrAlreadyExists) {
		t.Fatalf("second start: %v, want ErrAlreadyExists", err)
	}
}

func TestStepFailureFailsWorkflowAndRetries(t *testing.T) {
	t.Parallel()
	e := setup(t)
	def := workflow.Define("test.retry", func(wf *workflow.Context, _ struct{}) (string, error) {
		v, err := workflow.Step(wf, "flaky", func(ctx context.Context) (string, error) {
			if e.inc("flaky") < 3 {
				return "", errors.New("not yet")
			}
			return "ok", nil
		}, workflow.StepOptions{MaxAttempts: 3, Backoff: jetflow.Backoff{Initial: time.Millisecond}})
		if err != nil {
			return "", err
		}
		_, err = workflow.Step(wf, "broken", func(ctx context.Context) (int, error) {
			return 0, errors.New("broken for good")
		})
		return v, err
	})
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	id, err := workflow.Start(context.Background(), e.P, def, struct{}{})
	must(t, err)
	r := e.wait(t, id)
	if r.State != jetflow.Failed || !strings.Contains(r.Error, "broken for good") {
		t.Fatalf("workflow %s: %s", r.State, r.Error)
	}
	st := e.status(t, id)
	if st.Steps[0].Attempts != 3 || st.Steps[0].State != workflow.StepDone || st.Steps[1].State != workflow.StepFailed {
		t.Fatalf("steps: %+v", st.Steps)
	}
}

// A panic in workflow code fails the workflow with jetflow.ErrPanic; a
// panic inside a step fails the step, which the code may handle.
func TestPanicFailsWorkflow(t *testing.T) {
	t.Parallel()
	e := setup(t)
	def := workflow.Define("test.panic", func(wf *workflow.Context, _ struct{}) (int, error) {
		_, err := workflow.Step(wf, "explode", func(ctx context.Context) (int, error) { panic("in a step") })
		if err == nil || !strings.Contains(err.Error(), "in a step") {
			return 0, errors.New("want the step's panic as its error")
		}
		panic("in the workflow")
	})
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	id, err := workflow.Start(testCtx(t), e.P, def, struct{}{})
	must(t, err)
	r := e.wait(t, id)
	if r.State != jetflow.Failed || !strings.Contains(r.Error, jetflow.ErrPanic.Error()) || !strings.Contains(r.Error, "in the workflow") {
		t.Fatalf("workflow %s: %.200s", r.State, r.Error)
	}
}

// RegisterOptions.MaxParallel bounds the workflows executing at once.
func TestMaxParallelWorkflows(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var mu sync.Mutex
	running, most := 0, 0
	def := workflow.Define("test.bounded", func(wf *workflow.Context, _ int) (int, error) {
		return workflow.Step(wf, "work", func(ctx context.Context) (int, error) {
			mu.Lock()
			running++
			most = max(most, running)
			mu.Unlock()
			time.Sleep(30 * time.Millisecond) // work that takes a while
			mu.Lock()
			running--
			mu.Unlock()
			return 1, nil
		})
	})
	// Two workers on the default AckWait and LostAfter: with startWorker's
	// second, a heartbeat late by a second on a loaded machine lets the
	// other worker take a segment over while it still runs, which that
	// configuration allows and this test would count as two at once.
	for range 2 {
		e.startWorkerWith(t, worker.Config{}, func(w *worker.Worker) {
			must(t, workflow.Register(w, def, workflow.RegisterOptions{MaxParallel: 1}))
		})
	}
	ctx := testCtx(t)
	var ids []string
	for i := range 6 {
		id, err := workflow.Start(ctx, e.P, def, i)
		must(t, err)
		ids = append(ids, id)
	}
	for _, id := range ids {
		if r := e.wait(t, id); r.State != jetflow.Success {
			t.Fatalf("%s: %s %s", id, r.State, r.Error)
		}
	}
	if most != 1 {
		t.Fatalf("%d workflows ran at once, want 1", most)
	}
}
