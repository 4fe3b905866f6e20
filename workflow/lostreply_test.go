package workflow_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// An at-most-once step that finished, and whose result write met a server
// that answered nothing for longer than the write's timeout (a restart),
// is not recorded as lost: the write is made again until it is stored (a
// refusal is settled by the journal leader's read: the stored entry is this
// write), and the workflow succeeds with the step run once. Before, the
// segment aborted on the timeout and its replay failed the step with
// jetflow.ErrWorkerLost.
func TestStepResultWhoseReplyIsLostIsKept(t *testing.T) {
	t.Parallel()
	e := setup(t)
	gate := testserver.NewGate(t, e.Port)
	var ran atomic.Int32
	id := "lost-reply-1"
	def := workflow.Define("test.lostreply", func(wf *workflow.Context, in int) (int, error) {
		return workflow.Step(wf, "charge", func(ctx context.Context) (int, error) {
			ran.Add(1)
			// The step's result write meets a server that answers nothing
			// for longer than the write's timeout (a server restarting).
			gate.Hold()
			go func() {
				time.Sleep(8 * time.Second) // past the write's 5 s timeout
				gate.Open()
			}()
			return in * 2, nil
		}, workflow.StepOptions{Kind: jetflow.AtMostOnce})
	})
	nc, err := nats.Connect(gate.URL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	startWorkerOn(t, js, worker.Config{AckWait: 10 * time.Second}, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	ctx := testCtx(t)
	if _, err := workflow.Start(ctx, e.P, def, 21, workflow.WithID(id)); err != nil {
		t.Fatal(err)
	}
	out, err := workflow.Result(ctx, e.P, def, id)
	if err != nil || out != 42 {
		t.Fatalf("result %d, %v; want 42 (the step's result kept)", out, err)
	}
	if n := ran.Load(); n != 1 {
		t.Fatalf("the at-most-once step ran %d times", n)
	}
}
