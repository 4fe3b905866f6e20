package worker_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
)

func TestProgressWritesAreCoalesced(t *testing.T) {
	t.Parallel()
	const interval, calls = 50 * time.Millisecond, 20000
	e := setup(t, worker.Config{ProgressInterval: interval})
	var took atomic.Int64 // how long the handler ran
	worker.Handle(e.W, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		began := time.Now()
		defer func() { took.Store(int64(time.Since(began))) }()
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
	// Only this run writes to the runs bucket, so revisions count its writes:
	// at most one progress write per interval the handler ran (a loaded
	// machine stretches the loop over more of them), and a few others (the
	// claim, the outcome). Without coalescing, each call would write.
	writes := r.Revision - first.Revision
	d := time.Duration(took.Load())
	if limit := uint64(d/interval) + 10; writes > limit {
		t.Fatalf("%d progress calls made %d record writes in %s, want at most %d (one per %s)", calls, writes, d, limit, interval)
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
