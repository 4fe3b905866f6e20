package workflow_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
)

// BenchmarkCachedExecutionMemory: the memory a worker holds for each
// waiting workflow whose execution it keeps (its goroutine's stack, the
// code's state, the journal as it parked): 1,000 workflows that take an
// event and await a second, parked on one worker with the cache on and
// off (a server each); what parking them added to the heap and stacks in
// use (after a GC), the server's state of them included, with the cache
// less without, divided by the workflows.
//
//	go test -run '^$' -bench BenchmarkCachedExecutionMemory -benchtime 1x ./workflow/
func BenchmarkCachedExecutionMemory(b *testing.B) {
	const n = 1000
	// inUse is what parking n workflows added.
	inUse := func(cache int) uint64 {
		e := setup(b)
		def := workflow.Define(fmt.Sprintf("bench.mem.%d", cache), func(wf *workflow.Context, _ struct{}) (string, error) {
			if _, err := workflow.AwaitEvent[string](wf, "a", -1); err != nil && cache == 0 {
				return "", err
			}
			return workflow.AwaitEvent[string](wf, "b", 0)
		})
		e.startWorker(b, func(w *worker.Worker) {
			must(b, workflow.Register(w, def, workflow.RegisterOptions{CachedExecutions: cache}))
		})
		ctx := context.Background()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		before := m.HeapAlloc + m.StackInuse
		ids := make([]string, n)
		for i := range ids {
			id, err := workflow.Start(ctx, e.P, def, struct{}{})
			must(b, err)
			ids[i] = id
		}
		for _, id := range ids {
			testserver.Eventually(b, time.Minute, "parked", func() bool {
				st, err := workflow.Get(ctx, e.P, id)
				return err == nil && st.Waiting && len(st.Steps) == 2
			})
		}
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc + m.StackInuse - before
	}
	for range b.N {
		off := inUse(-1)
		on := inUse(n)
		b.ReportMetric(float64(int64(on)-int64(off))/n, "B/cached-execution")
		b.ReportMetric(float64(off)/n, "B/parked-workflow-uncached")
	}
}
