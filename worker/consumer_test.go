package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

var goneFn = jetflow.Define[echoArgs]("consumer.gone")

// deleteConsumer deletes the worker's consumer of goneFn, as an operator's
// `nats consumer rm` would.
func deleteConsumer(t *testing.T, e *env) {
	t.Helper()
	ctx := context.Background()
	cfg := streams.Config{}.WithDefaults()
	st, err := e.JS.Stream(ctx, cfg.FunctionStream())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteConsumer(ctx, worker.ConsumerName(cfg.Prefix, goneFn.Name())); err != nil {
		t.Fatal(err)
	}
}

// ranOnce waits for run id to succeed on its first attempt and for every
// copy of its message to be settled on consumer c, and checks that the
// handler ran once.
func ranOnce(t *testing.T, e *env, c jetstream.Consumer, id string, runs *atomic.Int64) {
	t.Helper()
	if r := e.wait(t, id); r.State != jetflow.Success || r.Attempts != 1 {
		t.Fatalf("run %s: %s after %d attempts, want success after 1", id, r.State, r.Attempts)
	}
	testserver.Eventually(t, 30*time.Second, "the function stream drained", func() bool {
		info, err := c.Info(context.Background())
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	})
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

// consumerBack waits for the worker to have created goneFn's consumer again
// and returns it.
func consumerBack(t *testing.T, e *env) jetstream.Consumer {
	t.Helper()
	cfg := streams.Config{}.WithDefaults()
	var c jetstream.Consumer
	testserver.Eventually(t, 20*time.Second, "the consumer created again", func() bool {
		var err error
		c, err = e.JS.Consumer(context.Background(), cfg.FunctionStream(), worker.ConsumerName(cfg.Prefix, goneFn.Name()))
		return err == nil
	})
	return c
}

// A consumer deleted under a running worker is created again: the
// function's runs are served on, each once.
func TestWorkerCreatesADeletedConsumerAgain(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	var runs atomic.Int64
	got := make(chan int, 8)
	worker.Handle(e.W, goneFn, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		runs.Add(1)
		got <- j.Args.N
		return nil
	})
	e.start(t)
	ctx := context.Background()
	if _, err := e.P.Enqueue(ctx, goneFn.With(echoArgs{N: 1})); err != nil {
		t.Fatal(err)
	}
	recv(t, got, "the run before the delete")
	deleteConsumer(t, e)
	consumerBack(t, e)
	id, err := e.P.Enqueue(ctx, goneFn.With(echoArgs{N: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if n := recv(t, got, "the run after the delete"); n != 2 {
		t.Fatalf("handled args %d, want 2", n)
	}
	if r := e.wait(t, id); r.State != jetflow.Success || r.Attempts != 1 {
		t.Fatalf("run %s: %s after %d attempts, want success after 1", id, r.State, r.Attempts)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
}

// A run in flight when its consumer is deleted is delivered again by the
// consumer created again, as a first delivery: it is not run twice.
func TestRunInFlightWhenItsConsumerIsDeletedRunsOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	var runs atomic.Int64
	started := make(chan struct{}, 4)
	release := make(chan struct{})
	worker.Handle(e.W, goneFn, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		runs.Add(1)
		started <- struct{}{}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	e.start(t)
	ctx := context.Background()
	id, err := e.P.Enqueue(ctx, goneFn.With(echoArgs{N: 1}))
	if err != nil {
		t.Fatal(err)
	}
	recv(t, started, "the handler")
	deleteConsumer(t, e)
	c := consumerBack(t, e)
	// The new consumer hands the message in flight out again.
	testserver.Eventually(t, 20*time.Second, "the message in flight delivered again", func() bool {
		info, err := c.Info(ctx)
		return err == nil && info.Delivered.Stream >= 1
	})
	close(release)
	ranOnce(t, e, c, id, &runs)
}

// The function stream deleted and provisioned again: the worker creates its
// consumer on the new stream once it exists, and runs enqueued there run.
func TestWorkerConsumesAgainAfterItsStreamIsProvisionedAgain(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	got := make(chan int, 8)
	worker.Handle(e.W, goneFn, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		got <- j.Args.N
		return nil
	})
	e.start(t)
	ctx := context.Background()
	cfg := streams.Config{}.WithDefaults()
	if err := e.JS.DeleteStream(ctx, cfg.FunctionStream()); err != nil {
		t.Fatal(err)
	}
	// Let the worker find the stream missing before it is back.
	testserver.Eventually(t, 20*time.Second, "the stream gone", func() bool {
		_, err := e.JS.Stream(ctx, cfg.FunctionStream())
		return errors.Is(err, jetstream.ErrStreamNotFound)
	})
	if err := streams.Provision(ctx, e.JS, cfg); err != nil {
		t.Fatal(err)
	}
	consumerBack(t, e)
	id, err := e.P.Enqueue(ctx, goneFn.With(echoArgs{N: 7}))
	if err != nil {
		t.Fatal(err)
	}
	if n := recv(t, got, "the run on the new stream"); n != 7 {
		t.Fatalf("handled args %d, want 7", n)
	}
	if r := e.wait(t, id); r.State != jetflow.Success {
		t.Fatalf("run %s: %s, want success", id, r.State)
	}
}

// Two workers, a run in flight on the first (which would claim it only
// after an hour) when the consumer is deleted: the consumer created again
// hands the run out as a first delivery, maybe to the second worker. The
// first claims its runs in flight at once, and the second takes the
// delivery for a possible replay: the handler runs once.
func TestRunInFlightElsewhereWhenTheConsumerIsRecreatedRunsOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	ctx := context.Background()
	var runs atomic.Int64
	started := make(chan struct{}, 4)
	release := make(chan struct{})
	handler := func(ctx context.Context, j *worker.Job[echoArgs]) error {
		runs.Add(1)
		started <- struct{}{}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	worker.Handle(e.W, goneFn, handler, worker.Options{Concurrency: 1, ClaimAfter: time.Hour})
	e.start(t)
	id, err := e.P.Enqueue(ctx, goneFn.With(echoArgs{N: 1}))
	if err != nil {
		t.Fatal(err)
	}
	recv(t, started, "the first worker's handler")

	e.another(t, worker.Config{}, func(w *worker.Worker) {
		worker.Handle(w, goneFn, handler, worker.Options{Concurrency: 8})
	})

	deleteConsumer(t, e)
	c := consumerBack(t, e)
	testserver.Eventually(t, 20*time.Second, "the run in flight delivered again", func() bool {
		info, err := c.Info(ctx)
		return err == nil && info.Delivered.Stream >= 1
	})
	// The first worker claims what it has in flight once it sees the
	// consumer gone.
	e.waitState(t, id, jetflow.InProgress)
	close(release)
	ranOnce(t, e, c, id, &runs)
}
