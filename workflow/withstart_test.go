package workflow_test

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/jetflow-dev/jetflow"

	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
)

// 20 concurrent signal-with-start calls on one id (half through package
// workflow, half through the producer): exactly one starts the workflow,
// and it receives all 20 events.
func TestSendEventWithStartConcurrent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const callers = 20
	def := workflow.Define("test.withstart", func(wf *workflow.Context, n int) ([]int, error) {
		var got []int
		for range n {
			v, err := workflow.AwaitEvent[int](wf, "item", 0)
			if err != nil {
				return nil, err
			}
			got = append(got, v)
		}
		return got, nil
	})
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	ctx := testCtx(t)
	const id = "cart-42"
	var wg sync.WaitGroup
	started := make(chan bool, callers)
	errs := make(chan error, callers)
	for i := range callers {
		wg.Go(func() {
			var s bool
			var err error
			if i%2 == 0 {
				s, err = workflow.SendEventWithStart(ctx, e.P, def, id, callers, "item", i)
			} else {
				s, err = e.P.SendEventWithStart(ctx, def.Name(), id, callers, "item", i)
			}
			started <- s
			errs <- err
		})
	}
	wg.Wait()
	close(started)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for s := range started {
		if s {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d calls started the workflow, want 1", n)
	}
	got, err := workflow.Result(ctx, e.P, def, id)
	must(t, err)
	slices.Sort(got)
	want := make([]int, callers)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(got, want) {
		t.Fatalf("events received %v, want %v", got, want)
	}
	// The workflow has ended: a later call neither starts it again nor
	// stores its event.
	if s, err := workflow.SendEventWithStart(ctx, e.P, def, id, callers, "item", 99); s || !errors.Is(err, workflow.ErrEnded) {
		t.Errorf("after the end: started %t, %v; want ErrEnded", s, err)
	}
	if s, err := e.P.SendEventWithStart(ctx, def.Name(), id, callers, "item", 99); s || !errors.Is(err, producer.ErrWorkflowEnded) {
		t.Errorf("producer, after the end: started %t, %v; want ErrWorkflowEnded", s, err)
	}
}

// SendEventWithStart on an id that is another workflow's is refused.
func TestSendEventWithStartOtherDefinition(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := workflow.Define("test.withstart.a", func(wf *workflow.Context, _ int) (string, error) {
		return workflow.AwaitEvent[string](wf, "go", 0)
	})
	b := workflow.Define("test.withstart.b", func(wf *workflow.Context, _ int) (string, error) { return "b", nil })
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, a, 0, workflow.WithID("other-def"))
	must(t, err)
	if s, err := workflow.SendEventWithStart(ctx, e.P, b, id, 0, "go", "x"); s || !errors.Is(err, workflow.ErrBadRecord) {
		t.Errorf("workflow: started %t, %v", s, err)
	}
	if s, err := e.P.SendEventWithStart(ctx, b.Name(), id, 0, "go", "x"); s || !errors.Is(err, jetflow.ErrBadRecord) {
		t.Errorf("producer: started %t, %v", s, err)
	}
}
