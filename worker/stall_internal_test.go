package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
)

// A Consume that stops pulling while runs wait (what nats.go's drifting
// count of owed messages does now and then, here done outright by
// stopping it mid-flow) is replaced once the deliveries stop: every run
// still runs, each once. Without watchPulls the runs after the stop wait
// forever (a stopped Consume never pulls again, and its consumer is there,
// so nothing else looks).
func TestConsumeThatStopsPullingIsReplaced(t *testing.T) {
	// A short AckWait: the runs the stopped Consume held when it stopped
	// come back after it.
	env, w := provisionedWorker(t, Config{AckWait: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fn := jetflow.Define[struct{}]("stall.fn")
	const n, stopAt = 3000, 500
	var mu sync.Mutex
	seen := map[string]int{}
	var handled atomic.Int64
	stopped := make(chan struct{})
	Handle(w, fn, func(_ context.Context, j *Job[struct{}]) error {
		mu.Lock()
		seen[j.ID()]++
		mu.Unlock()
		if handled.Add(1) == stopAt {
			go func() {
				w.mu.Lock()
				cc := w.fns[fn.Name()].cc
				w.mu.Unlock()
				cc.Stop()
				close(stopped)
			}()
		}
		return nil
	}, Options{Concurrency: 16, Prefetch: 64})
	p, err := producer.New(ctx, env.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	items := make([]producer.Item, 0, 1000)
	for range n / 1000 {
		items = items[:0]
		for range 1000 {
			items = append(items, producer.Item{Call: fn.With(struct{}{})})
		}
		if _, err := p.Batch(ctx, items); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = w.Stop(sctx)
	})
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatalf("the Consume was never stopped: %d runs handled, want %d first", handled.Load(), stopAt)
	}
	testserver.Eventually(t, 45*time.Second, "every run handled after the Consume stopped", func() bool { return handled.Load() >= n })
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n {
		t.Fatalf("%d runs handled, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("run %s handled %d times", id, c)
		}
	}
}
