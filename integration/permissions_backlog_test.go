package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
)

// A scheduler as the documented scheduler user reads the backlog (the
// figures of /scaling and the gauges): a function's ready runs, counted
// from its consumer, and the runs due soon, from the delayed store.
func TestSchedulerRoleReadsTheBacklog(t *testing.T) {
	t.Parallel()
	url := startSecuredNATS(t, permissionsConf(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, ajs := connectAs(t, url, "admin")
	if err := streams.Provision(ctx, ajs, streams.Config{}); err != nil {
		t.Fatal(err)
	}

	// A worker registers the function and its consumer, then is paused
	// out of the way so the runs stay ready.
	_, wjs := connectAs(t, url, "worker")
	w, err := worker.New(ctx, wjs, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	worker.Handle(w, permFn, func(context.Context, *worker.Job[permArgs]) error { return nil })
	_, pjs := connectAs(t, url, "producer")
	p, err := producer.New(ctx, pjs, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := producer.New(ctx, ajs, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.PauseFunction(ctx, permFn.Name()); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopWithin(w.Stop) })
	const n = 4
	for range n {
		if _, err := p.Enqueue(ctx, permFn.With(permArgs{})); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.RunAfter(ctx, 30*time.Second, permFn.With(permArgs{})); err != nil {
		t.Fatal(err)
	}

	_, sjs := connectAs(t, url, "scheduler")
	s, err := scheduler.New(ctx, sjs, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		b, err := s.Backlog(ctx)
		if err == nil && readyOf(b, permFn.Name()) == n && b.Due1m >= 1 {
			if b.QueuesError != "" {
				t.Fatalf("the scheduler user's read of the queues: %s", b.QueuesError)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the scheduler user's backlog read: %+v, %v; want %d ready of %s and 1 due within a minute", b, err, n, permFn.Name())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// readyOf is function fn's ready runs in b (0 when b does not name it).
func readyOf(b *scheduler.Backlog, fn string) uint64 {
	if b == nil {
		return 0
	}
	for _, f := range b.Functions {
		if f.Name == fn {
			return f.Ready
		}
	}
	return 0
}
