package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/worker"
)

type echoArgs struct {
	N    int    `json:"n"`
	Text string `json:"text"`
}

var echo = jetflow.Define[echoArgs]("test.echo")

func TestRunSucceedsWithFullRecord(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	var got atomic.Value
	worker.Handle(e.W, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		got.Store(j.Args)
		return j.SetResult(map[string]int{"double": j.Args.N * 2})
	})
	e.start(t)
	ctx := context.Background()
	id, err := e.P.Enqueue(ctx, echo.With(echoArgs{N: 21, Text: "hi"}))
	if err != nil {
		t.Fatal(err)
	}
	r := e.wait(t, id)
	if r.State != jetflow.Success || r.Attempts != 1 || r.Name != "test.echo" {
		t.Fatalf("record = %+v", r)
	}
	if string(r.Result) != `{"double":42}` {
		t.Fatalf("result = %s", r.Result)
	}
	if got.Load().(echoArgs) != (echoArgs{N: 21, Text: "hi"}) {
		t.Fatalf("args = %+v", got.Load())
	}
	if r.CompletedTime.Before(r.ScheduledTime) || r.CreationTime.IsZero() {
		t.Fatalf("times = %+v", r)
	}
}

func TestDelayedRunFiresAfterDelay(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	worker.Handle(e.W, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error { return nil })
	e.start(t)
	ctx := context.Background()
	start := time.Now()
	id, err := e.P.RunAfter(ctx, 700*time.Millisecond, echo.With(echoArgs{N: 1}))
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.P.Get(ctx, id)
	// A read that returned before the run was due finds it pending (on a
	// loaded machine the read may come later; the start time is checked
	// below in any case).
	if inTime := time.Since(start) < 700*time.Millisecond; err != nil || inTime && r.State != jetflow.Pending {
		t.Fatalf("get before due: %+v %v", r, err)
	}
	r = e.wait(t, id)
	if r.State != jetflow.Success {
		t.Fatalf("state %s", r.State)
	}
	if r.StartedTime.Before(r.ScheduledTime) || r.ScheduledTime.Sub(start) < 700*time.Millisecond {
		t.Fatalf("started %v before scheduled %v", r.StartedTime, r.ScheduledTime)
	}
}

func TestRetriesThenSucceeds(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	var calls atomic.Int32
	worker.Handle(e.W, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		if calls.Add(1) < 3 {
			return errors.New("flaky")
		}
		return nil
	}, worker.Options{MaxAttempts: 5, Backoff: fastBackoff})
	e.start(t)
	id, err := e.P.Enqueue(context.Background(), echo.With(echoArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	r := e.wait(t, id)
	if r.State != jetflow.Success || r.Attempts != 3 || calls.Load() != 3 {
		t.Fatalf("state %s attempts %d calls %d", r.State, r.Attempts, calls.Load())
	}
}
