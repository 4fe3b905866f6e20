package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
)

func TestProgressWritesAreCoalesced(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{ProgressInterval: 50 * time.Millisecond})
	const calls = 20000
	worker.Handle(e.W, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		deadline := time.Now().Add(300 * time.Millisecond)
		for i := 1; i <= calls; i++ {
			if err := j.Progress(ctx, jetflow.Progress{Processed: int64(i), Total: calls}); err != nil {
				return err
			}
			if i%1000 == 0 && time.Now().Before(deadline) {
				time.Sleep(15 * time.Millisecond) // spread the loop over several intervals
			}
		}
		return nil
	})
	e.start(t)
	ctx := context.Background()
	id, err := e.P.Enqueue(ctx, echo.With(echoArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	first, err := e.P.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	r := e.wait(t, id)
	if r.State != jetflow.Success || r.Progress == nil || r.Progress.Processed != calls {
		t.Fatalf("final record %+v", r)
	}
	// Only this run writes to the runs bucket, so revisions count its writes.
	writes := r.Revision - first.Revision
	if writes > 40 {
		t.Fatalf("%d progress calls made %d record writes", calls, writes)
	}
}

func TestPerRunTimeoutOverridesFunction(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	worker.Handle(e.W, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		<-ctx.Done()
		return context.Cause(ctx)
	}, worker.Options{Timeout: time.Hour})
	e.start(t)
	id, err := e.P.Enqueue(context.Background(), echo.With(echoArgs{}), producer.WithTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r := e.wait(t, id)
	if r.State != jetflow.Failed || !strings.Contains(r.Error, "timed out after 200ms") {
		t.Fatalf("record %+v", r)
	}
}
