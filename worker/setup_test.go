package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
)

type env struct {
	*testserver.Env
	P *producer.Producer
	W *worker.Worker
	S *scheduler.Scheduler
}

func setup(t *testing.T, wcfg worker.Config) *env {
	t.Helper()
	return setupOn(t, testserver.Start(t), wcfg)
}

// setupOn is setup on a server the test started.
func setupOn(t *testing.T, ts *testserver.Env, wcfg worker.Config) *env {
	t.Helper()
	ctx := context.Background()
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(ctx, ts.JS, wcfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New(ctx, ts.JS, scheduler.Config{LeaseTTL: time.Second, RepairInterval: 500 * time.Millisecond, RepairGrace: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return &env{Env: ts, P: p, W: w, S: s}
}

func (e *env) start(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if err := e.W.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.S.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.W.Stop(ctx)
		_ = e.S.Stop(ctx)
	})
}

// another starts a second worker on a connection of its own, with what
// register adds to it, stopped when the test ends.
func (e *env) another(t *testing.T, cfg worker.Config, register func(*worker.Worker)) *worker.Worker {
	t.Helper()
	_, js := e.Connect()
	w, err := worker.New(context.Background(), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	register(w)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w
}

// wait waits for run id to be terminal and returns its record.
func (e *env) wait(t *testing.T, id string) *jetflow.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := e.P.Wait(ctx, id)
	if err != nil {
		t.Fatalf("run %s did not end: %v (last %+v)", id, err, r)
	}
	return r
}

// waitState polls run id until it is in state st.
func (e *env) waitState(t *testing.T, id string, st jetflow.State) *jetflow.Run {
	t.Helper()
	var r *jetflow.Run
	testserver.Eventually(t, 20*time.Second, "run "+id+" "+string(st), func() bool {
		var err error
		r, err = e.P.Get(context.Background(), id)
		return err == nil && r.State == st
	})
	return r
}
