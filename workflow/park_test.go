package workflow_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go"
)

// Many workflows park on a sleep at once, the worker that parked them is
// replaced while they sleep, and each resumes exactly once: one segment
// (the second) runs the code after its sleep, and each ends. Parking
// looks up no message in the function stream: a run a workflow starts
// (its timer) is read by its record, not searched for among the queued
// messages of every function, whose cost grows with the messages queued
// (the first segments of the workflows starting).
func TestManySleepingWorkflowsResumeOnce(t *testing.T) {
	const n = 500
	e := setup(t)
	// Its repair sweep looks up the messages of records older than
	// RepairGrace: on a loaded machine, parking 500 takes longer than the
	// default 10 s, and those lookups are the sweep's, not the parking's.
	e.startSchedulerWith(t, scheduler.Config{LeaseTTL: time.Second, RepairGrace: 10 * time.Minute})
	var mu sync.Mutex
	resumed := map[string]map[int]bool{} // workflow -> the segments that ran the code after its sleep
	def := workflow.Define("test.parkmany", func(wf *workflow.Context, d time.Duration) (int, error) {
		wf.Sleep(d)
		mu.Lock()
		if resumed[wf.ID()] == nil {
			resumed[wf.ID()] = map[int]bool{}
		}
		resumed[wf.ID()][wf.Segment()] = true
		mu.Unlock()
		return workflow.Step(wf, "woke", func(context.Context) (int, error) { return wf.Segment(), nil })
	})
	// Lookups of messages in the function stream (by subject: the worker
	// fetches its messages through consumers, not these).
	nc, _ := e.Connect()
	fnStream := streams.Config{}.WithDefaults().FunctionStream()
	var lookups atomic.Int64
	for _, subj := range []string{"$JS.API.STREAM.MSG.GET." + fnStream, "$JS.API.DIRECT.GET." + fnStream, "$JS.API.DIRECT.GET." + fnStream + ".>"} {
		_, err := nc.Subscribe(subj, func(*nats.Msg) { lookups.Add(1) })
		must(t, err)
	}
	must(t, nc.Flush())

	register := func(w *worker.Worker) { must(t, workflow.Register(w, def)) }
	first := e.startWorkerWith(t, worker.Config{}, register)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Each sleeps 10 s from when its code reaches the sleep: it parks
	// (its first segment writes a step, a timer and the cursor first).
	ids := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			id, err := workflow.Start(ctx, e.P, def, 10*time.Second)
			if err != nil {
				t.Error(err)
			}
			ids[i] = id
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// Once each has parked, the worker that parked them goes (its cache of
	// parked journals with it) and another serves them.
	left := append([]string(nil), ids...)
	testserver.Eventually(t, 3*time.Minute, fmt.Sprintf("%d workflows parked", n), func() bool {
		for len(left) > 0 {
			st, err := workflow.Get(ctx, e.P, left[0])
			if err != nil || (!st.Waiting && !st.Run.State.Terminal()) {
				return false
			}
			left = left[1:]
		}
		return true
	})
	if got := lookups.Load(); got != 0 {
		t.Errorf("%d message lookups in the function stream while %d workflows parked, want 0", got, n)
	}
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	must(t, first.Stop(sctx))
	scancel()
	e.startWorkerWith(t, worker.Config{}, register)

	for _, id := range ids {
		r, err := e.P.Wait(ctx, id)
		if err != nil {
			t.Fatalf("workflow %s: %v", id, err)
		}
		if r.State != jetflow.Success {
			t.Fatalf("workflow %s is %s (%s), want success", id, r.State, r.Error)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var wrong []string
	for _, id := range ids {
		if segs := resumed[id]; len(segs) != 1 || !segs[2] {
			wrong = append(wrong, fmt.Sprintf("%s: %v", id, segs))
		}
	}
	if len(wrong) > 0 {
		t.Fatalf("%d of %d workflows did not resume once, in their second segment (the segments that ran the code after the sleep): %s",
			len(wrong), n, strings.Join(wrong[:min(len(wrong), 10)], "; "))
	}
}
