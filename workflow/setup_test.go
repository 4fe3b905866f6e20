package workflow_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go/jetstream"
)

// env is a server, a producer and counters shared by the handlers.
type env struct {
	*testserver.Env
	P *producer.Producer

	mu    sync.Mutex
	count map[string]int
}

func setup(t testing.TB) *env {
	t.Helper()
	ts := testserver.Start(t)
	p, err := producer.New(context.Background(), ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return &env{Env: ts, P: p, count: map[string]int{}}
}

func (e *env) inc(key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.count[key]++
	return e.count[key]
}

func (e *env) n(key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.count[key]
}

// startWorker starts a worker on its own connection with register run on
// it before Start; it is stopped at cleanup.
// A claim is seen as lost after a second: a test that stops a worker
// mid-step has its segment taken over quickly.
func (e *env) startWorker(t testing.TB, register func(w *worker.Worker)) *worker.Worker {
	t.Helper()
	return e.startWorkerWith(t, worker.Config{AckWait: time.Second, LostAfter: time.Second}, register)
}

// startWorkerWith is startWorker with the worker's configuration.
func (e *env) startWorkerWith(t testing.TB, cfg worker.Config, register func(w *worker.Worker)) *worker.Worker {
	t.Helper()
	_, js := e.Connect()
	return startWorkerOn(t, js, cfg, register)
}

// startWorkerOn is startWorkerWith on a connection the test made.
func startWorkerOn(t testing.TB, js jetstream.JetStream, cfg worker.Config, register func(w *worker.Worker)) *worker.Worker {
	t.Helper()
	w, err := worker.New(context.Background(), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	register(w)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w
}

// startScheduler starts a scheduler (delayed runs: sleeps, timeouts).
// startRepairingScheduler is startScheduler whose repair sweep runs every
// 200 ms, for records older than that.
func (e *env) startRepairingScheduler(t testing.TB) {
	t.Helper()
	_, js := e.Connect()
	s, err := scheduler.New(context.Background(), js, scheduler.Config{LeaseTTL: time.Second, RepairInterval: 200 * time.Millisecond, RepairGrace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
}

func (e *env) startScheduler(t testing.TB) {
	t.Helper()
	e.startSchedulerWith(t, scheduler.Config{LeaseTTL: time.Second})
}

// startSchedulerWith is startScheduler with cfg.
func (e *env) startSchedulerWith(t testing.TB, cfg scheduler.Config) {
	t.Helper()
	_, js := e.Connect()
	s, err := scheduler.New(context.Background(), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wait waits for workflow id to end and returns its record.
func (e *env) wait(t *testing.T, id string) *jetflow.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := e.P.Wait(ctx, id)
	if err != nil {
		t.Fatalf("workflow %s did not end: %v", id, err)
	}
	return r
}

func (e *env) status(t *testing.T, id string) *workflow.Status {
	t.Helper()
	st, err := workflow.Get(context.Background(), e.P, id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// waiting polls until workflow id's last segment ended waiting.
func (e *env) waiting(t *testing.T, id string) *workflow.Status {
	t.Helper()
	var st *workflow.Status
	testserver.Eventually(t, 20*time.Second, "workflow "+id+" waiting", func() bool {
		s, err := workflow.Get(context.Background(), e.P, id)
		st = s
		return err == nil && s.Waiting
	})
	return st
}

// testCtx ends after 45 s: a test that would hang fails instead.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// recv waits for a value on ch, or fails the test after 30 s.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
