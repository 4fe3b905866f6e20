package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/worker"
)

var slowFn = jetflow.Define[echoArgs]("waiting.slow")

// A run whose message waits in a worker for a free runner (every runner
// busy with handlers longer than AckWait) must not run a second time when
// JetStream, seeing no ack, redelivers it to another worker meanwhile: the
// waiting message's ack deadline is kept alive, and a delivery that waited
// here long is claimed before it starts, as a redelivery is. The same for
// runs pulled ahead of the runners (Options.Prefetch).
func TestRunWaitingForARunnerLongerThanAckWaitRunsOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{AckWait: time.Second})
	ctx := context.Background()
	var mu sync.Mutex
	ran := map[string]int{}
	handler := func(ctx context.Context, j *worker.Job[echoArgs]) error {
		mu.Lock()
		ran[j.ID()]++
		mu.Unlock()
		time.Sleep(2500 * time.Millisecond) // the work: longer than AckWait
		return nil
	}
	// One runner, and three more runs pulled ahead of it.
	worker.Handle(e.W, slowFn, handler, worker.Options{Concurrency: 1, Prefetch: 4})
	e.start(t)
	var ids []string
	for i := range 6 {
		id, err := e.P.Enqueue(ctx, slowFn.With(echoArgs{N: i}))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// A second worker, free while the first one's runner is busy.
	e.another(t, worker.Config{AckWait: time.Second}, func(w *worker.Worker) {
		worker.Handle(w, slowFn, handler, worker.Options{Concurrency: 6})
	})
	for _, id := range ids {
		if r := e.wait(t, id); r.State != jetflow.Success {
			t.Errorf("run %s: %s (%s), want success", id, r.State, r.Error)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var twice []string
	for _, id := range ids {
		if ran[id] != 1 {
			twice = append(twice, fmt.Sprintf("%s ran %d times", id, ran[id]))
		}
	}
	if len(twice) > 0 {
		t.Errorf("handlers ran more than once: %v", twice)
	}
}
