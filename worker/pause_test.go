package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
)

var (
	pausedFn = jetflow.Define[echoArgs]("pause.work")
	otherFn  = jetflow.Define[echoArgs]("pause.other")
)

// A paused function takes no run on any worker: its runs wait as pending
// and start once it is resumed; other functions go on. The registry says
// it is paused.
func TestPauseAndResumeFunction(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{ID: "w-pause"})
	started := make(chan time.Time, 10)
	worker.Handle(e.W, pausedFn, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		started <- time.Now()
		return nil
	})
	worker.Handle(e.W, otherFn, func(ctx context.Context, j *worker.Job[echoArgs]) error { return nil })
	e.start(t)
	ctx := context.Background()
	if err := e.P.PauseFunction(ctx, pausedFn.Name()); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 10*time.Second, "worker paused", func() bool { return e.W.Paused(pausedFn.Name()) })
	id, err := e.P.Enqueue(ctx, pausedFn.With(echoArgs{N: 1}))
	if err != nil {
		t.Fatal(err)
	}
	other, err := e.P.Enqueue(ctx, otherFn.With(echoArgs{N: 2}))
	if err != nil {
		t.Fatal(err)
	}
	// Another function runs meanwhile; the paused one's run waits.
	if r := e.wait(t, other); r.State != jetflow.Success {
		t.Fatalf("other function: %+v", r)
	}
	if r, err := e.P.Get(ctx, id); err != nil || r.State != jetflow.Pending {
		t.Fatalf("run of the paused function: %+v %v, want pending", r, err)
	}
	paused, err := e.P.PausedFunctions(ctx)
	if err != nil || !paused[pausedFn.Name()] || paused[otherFn.Name()] {
		t.Fatalf("paused functions %v %v", paused, err)
	}
	testserver.Eventually(t, 20*time.Second, "registry says paused", func() bool {
		fis, err := kv.ReadFunctions(ctx, e.JS, streams.Config{}, pausedFn.Name())
		return err == nil && len(fis) == 1 && fis[0].Paused
	})
	resumed := time.Now()
	if err := e.P.ResumeFunction(ctx, pausedFn.Name()); err != nil {
		t.Fatal(err)
	}
	if r := e.wait(t, id); r.State != jetflow.Success {
		t.Fatalf("run after resume: %+v", r)
	}
	if at := recv(t, started, "the handler"); at.Before(resumed) {
		t.Fatalf("handler started at %s, before the resume at %s", at, resumed)
	}
	if err := e.P.PauseFunction(ctx, "bad name!"); !errors.Is(err, jetflow.ErrInvalidName) {
		t.Fatalf("pause of an invalid name: %v", err)
	}
}
