package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/worker"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
)

func TestGracefulStopFinishesInFlightAndLeavesTheRest(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	started := make(chan struct{}, 10)
	release := make(chan struct{})
	var finished atomic.Int32
	worker.Handle(e.W, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		started <- struct{}{}
		<-release
		finished.Add(1)
		return nil
	}, worker.Options{Concurrency: 2})
	if err := e.W.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var ids []string
	for i := 0; i < 6; i++ {
		id, err := e.P.Enqueue(ctx, echo.With(echoArgs{N: i}))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	<-started
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- e.W.Stop(context.Background()) }()
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	<-e.W.Stopped()
	done := finished.Load()
	if done < 2 {
		t.Fatalf("in-flight runs not finished: %d", done)
	}
	// The rest is untouched and runs on the next worker.
	w2, err := worker.New(ctx, e.JS, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	worker.Handle(w2, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error { return nil })
	if err := w2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w2.Stop(ctx) }()
	for _, id := range ids {
		if r := e.wait(t, id); r.State != jetflow.Success || r.Attempts != 1 {
			t.Fatalf("%s: %s attempts %d (%s)", id, r.State, r.Attempts, r.Error)
		}
	}
}

func TestTerminalStateIsNeverOverwritten(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	ids := make(chan string, 1)
	release := make(chan struct{})
	worker.Handle(e.W, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		ids <- j.ID()
		<-release // a late success, after cancel and timeout raced
		return nil
	}, worker.Options{Timeout: 400 * time.Millisecond})
	e.start(t)
	ctx := context.Background()
	id, err := e.P.Enqueue(ctx, echo.With(echoArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	<-ids
	cancelErr := e.P.Cancel(ctx, id) // races the timeout
	r := e.wait(t, id)
	close(release)
	if cancelErr != nil {
		t.Fatal(cancelErr)
	}
	if r.State != jetflow.Canceled && r.State != jetflow.Failed {
		t.Fatalf("state %s", r.State)
	}
	// Whatever won stays: a later cancel, and the late success, change nothing.
	if err := e.P.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	marker, _ := e.P.Enqueue(ctx, echo.With(echoArgs{}))
	<-ids
	e.wait(t, marker)
	after, err := e.P.Get(ctx, id)
	if err != nil || after.State != r.State || after.Revision != r.Revision {
		t.Fatalf("terminal record changed: before %s@%d after %+v %v", r.State, r.Revision, after, err)
	}
}

func TestTraceContextTravelsToWorkerAndChildren(t *testing.T) {
	e := setup(t, worker.Config{})
	parents := make(chan trace.SpanContext, 2)
	worker.Handle(e.W, parent, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		parents <- trace.SpanContextFromContext(ctx)
		_, err := j.Enqueue(ctx, child.With(echoArgs{}))
		return err
	})
	worker.Handle(e.W, child, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		parents <- trace.SpanContextFromContext(ctx)
		return nil
	})
	e.start(t)
	_ = otel.GetTracerProvider()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	id, err := e.P.Enqueue(ctx, parent.With(echoArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	e.wait(t, id)
	for i, who := range []string{"parent", "child"} {
		select {
		case got := <-parents:
			if got.TraceID() != tid {
				t.Fatalf("%s handler trace %s, want %s", who, got.TraceID(), tid)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s (%d) never ran", who, i)
		}
	}
	_ = errors.New
	_ = testserver.Eventually
}
