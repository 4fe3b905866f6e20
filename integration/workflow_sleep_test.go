package integration_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
)

// sleepDef mirrors jfproc's it.sleep (an hour's durable sleep, then a
// step): the test starts the workflows, a worker process runs them.
var sleepDef = workflow.Define("it.sleep", func(wf *workflow.Context, in flowArgs) (int, error) {
	return 0, fmt.Errorf("it.sleep runs in jfproc, not in the test")
})

// Workflows asleep cost the worker that ran them no goroutine and no
// memory beyond its bounded cache of parked executions: a worker process
// (the server in a process of its own) runs thousands of workflows into a
// durable sleep; its goroutines and heap after a GC are compared before
// and after. 100,000 workflows under JETFLOW_FAULTS=long.
func TestWorkflowsAsleepCostTheWorkerNothing(t *testing.T) {
	t.Parallel()
	n := pick(3000, 100_000)
	srv := startNATS(t)
	e := newLoadEnv(t, srv.url(), streams.Config{})
	w := e.worker("sleep-w", "--workflow", "--concurrency", "64")
	w.waitLine(time.Minute, func(l string) bool { return l == "READY worker sleep-w" })

	segments := streams.Config{}.WithDefaults()
	consumer := worker.ConsumerName(segments.Prefix, workflow.SegmentFunction(sleepDef.Name()))
	startAll := func(from, to int) {
		var wg sync.WaitGroup
		next := make(chan int)
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					id := fmt.Sprintf("sleep-%d", i)
					retry(t, time.Minute, "start "+id, func(ctx context.Context) error {
						_, err := workflow.Start(ctx, e.p, sleepDef, flowArgs{N: i}, workflow.WithID(id))
						return err
					})
				}
			}()
		}
		for i := from; i < to; i++ {
			next <- i
		}
		close(next)
		wg.Wait()
		// Every segment has run: each workflow is parked in its sleep.
		retry(t, 10*time.Minute, "segments run", func(ctx context.Context) error {
			c, err := e.js.Consumer(ctx, segments.FunctionStream(), consumer)
			if err != nil {
				return err
			}
			info, err := c.Info(ctx)
			if err != nil {
				return err
			}
			if info.NumPending+uint64(info.NumAckPending) > 0 {
				return fmt.Errorf("%d segments pending, %d in flight", info.NumPending, info.NumAckPending)
			}
			return nil
		})
	}

	warm := 200
	startAll(0, warm) // the worker's pools and caches grown
	heap0, gor0 := workerStats(t, w)
	startAll(warm, warm+n)
	heap1, gor1 := workerStats(t, w)

	// Each of them sleeps, parked.
	for _, i := range []int{warm, warm + n/2, warm + n - 1} {
		st, err := workflow.Get(context.Background(), e.p, fmt.Sprintf("sleep-%d", i))
		if err != nil || !st.Waiting || len(st.Waits) != 1 {
			t.Fatalf("workflow sleep-%d: %+v %v, want it waiting for its timer", i, st, err)
		}
	}
	f := newFigures()
	f.set("asleep", n)
	f.set("worker_goroutines", fmt.Sprintf("%d->%d", gor0, gor1))
	f.set("worker_heap_mb", fmt.Sprintf("%.1f->%.1f", float64(heap0)/1e6, float64(heap1)/1e6))
	f.print(t, "w workflows-asleep")
	// Sticky execution keeps the latest parked workflows of a definition
	// running, blocked, one goroutine each, at most
	// workflow.DefaultCachedExecutions of them (warm already were):
	// anything per workflow beyond that bound would show at 100k.
	if bound := gor0 + workflow.DefaultCachedExecutions - warm + 10; gor1 > bound {
		t.Errorf("worker goroutines %d -> %d with %d workflows asleep (at most %d: the cache's bound)", gor0, gor1, n, bound)
	}
	// The parked-journal cache holds at most DefaultCachedExecutions
	// workflows per definition (a few KB each); anything per workflow
	// beyond it would show at 100k.
	if heap1 > heap0+24<<20 {
		t.Errorf("worker heap %d -> %d bytes with %d workflows asleep", heap0, heap1, n)
	}
}
