package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/worker"
)

// startSecond starts another worker on e's server whose echo handler
// succeeds at once.
func startSecond(t *testing.T, e *env, cfg worker.Config) {
	t.Helper()
	ctx := context.Background()
	w2, err := worker.New(ctx, e.JS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	worker.Handle(w2, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error { return nil })
	if err := w2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w2.Stop(context.Background()) })
}

func TestStartContextEndStopsGracefully(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	started := make(chan string, 4)
	release := make(chan struct{})
	worker.Handle(e.W, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		started <- j.ID()
		<-release // ignores ctx: the end of Start's ctx does not cancel it
		return ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	if err := e.W.Start(ctx); err != nil {
		t.Fatal(err)
	}
	id, err := e.P.Enqueue(context.Background(), echo.With(echoArgs{N: 1}))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	cancel()
	// Stopping: its consumers are drained, while the handler still runs.
	testserver.Eventually(t, 20*time.Second, "the worker's consumers closed", func() bool { return worker.ConsumersClosed(e.W) })
	select {
	case <-e.W.Stopped():
		t.Fatal("stopped with a handler still running")
	default:
	}
	// Stopping: a new run is left for another worker.
	later, err := e.P.Enqueue(context.Background(), echo.With(echoArgs{N: 2}))
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	select {
	case <-e.W.Stopped():
	case <-time.After(20 * time.Second):
		t.Fatal("the end of Start's ctx did not stop the worker")
	}
	if r := e.wait(t, id); r.State != jetflow.Success || r.Attempts != 1 {
		t.Fatalf("in-flight run: %s attempts %d (%s)", r.State, r.Attempts, r.Error)
	}
	select {
	case got := <-started:
		t.Fatalf("run %s started after the worker's ctx ended", got)
	default:
	}
	if r, err := e.P.Get(context.Background(), later); err != nil || r.State != jetflow.Pending {
		t.Fatalf("run enqueued while stopping: %+v %v", r, err)
	}
	// Stop after the fact is a no-op.
	if err := e.W.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	startSecond(t, e, worker.Config{})
	if r := e.wait(t, later); r.State != jetflow.Success || r.Attempts != 1 {
		t.Fatalf("run left for the next worker: %s attempts %d", r.State, r.Attempts)
	}
}

// interrupted registers an echo handler that waits for its context and
// reports its cause.
func interrupted(e *env, opts worker.Options) (started chan string, causes chan error) {
	started, causes = make(chan string, 4), make(chan error, 4)
	worker.Handle(e.W, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		started <- j.ID()
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	}, opts)
	return started, causes
}

func TestStopAndCancelGivesUnclaimedRunsBackUnharmed(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	started, causes := interrupted(e, worker.Options{ClaimAfter: time.Hour})
	if err := e.W.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	id, err := e.P.Enqueue(context.Background(), echo.With(echoArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.W.StopAndCancel(ctx); err != nil {
		t.Fatal(err)
	}
	<-e.W.Stopped()
	if cause := <-causes; !errors.Is(cause, worker.ErrStopping) {
		t.Fatalf("handler's ctx cause = %v, want worker.ErrStopping", cause)
	}
	if r, err := e.P.Get(context.Background(), id); err != nil || r.State != jetflow.Pending || r.Error != "" {
		t.Fatalf("interrupted run: %+v %v, want pending", r, err)
	}
	startSecond(t, e, worker.Config{})
	if r := e.wait(t, id); r.State != jetflow.Success || r.Attempts != 1 {
		t.Fatalf("retried run: %s attempts %d (%s), want success at attempt 1", r.State, r.Attempts, r.Error)
	}
}

func TestStopAndCancelRetriesClaimedRuns(t *testing.T) {
	t.Parallel()
	// LostAfter an hour: the interrupted run's claim is given back, not
	// waited out.
	cfg := worker.Config{AckWait: time.Second, LostAfter: time.Hour}
	e := setup(t, cfg)
	started, causes := interrupted(e, worker.Options{ClaimAfter: -1})
	if err := e.W.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	id, err := e.P.Enqueue(context.Background(), echo.With(echoArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	e.waitState(t, id, jetflow.InProgress)
	if err := e.W.StopAndCancel(context.Background()); err != nil {
		t.Fatal(err)
	}
	if cause := <-causes; !errors.Is(cause, worker.ErrStopping) {
		t.Fatalf("handler's ctx cause = %v, want worker.ErrStopping", cause)
	}
	if r, err := e.P.Get(context.Background(), id); err != nil || r.State.Terminal() {
		t.Fatalf("interrupted run: %+v %v, want it not ended", r, err)
	}
	startSecond(t, e, cfg)
	if r := e.wait(t, id); r.State != jetflow.Success || r.Attempts != 1 {
		t.Fatalf("retried run: %s attempts %d (%s), want success at attempt 1 (the interrupted one not counted)", r.State, r.Attempts, r.Error)
	}
}

func TestStopCtxEndCancelsHandlersWithErrStopping(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	started, causes := interrupted(e, worker.Options{ClaimAfter: time.Hour})
	if err := e.W.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	id, err := e.P.Enqueue(context.Background(), echo.With(echoArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := e.W.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want the ctx's error", err)
	}
	if cause := <-causes; !errors.Is(cause, worker.ErrStopping) {
		t.Fatalf("handler's ctx cause = %v, want worker.ErrStopping", cause)
	}
	startSecond(t, e, worker.Config{})
	if r := e.wait(t, id); r.State != jetflow.Success || r.Attempts != 1 {
		t.Fatalf("retried run: %s attempts %d (%s)", r.State, r.Attempts, r.Error)
	}
}
