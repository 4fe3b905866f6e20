package workflow_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
)

// BenchmarkWaits: one workflow of n waits (each a call of a no-op
// function: the workflow parks and a new segment resumes it), start to
// result, at n = 10, 100, 1000; and the same continuing as new every 50
// waits. It reports the time per workflow and the bytes its producer and
// worker published (messages, record and journal writes, requests):
//
//	go test -run '^$' -bench BenchmarkWaits -benchtime 1x ./workflow/
func BenchmarkWaits(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) { benchWaits(b, n, 0) })
		b.Run(fmt.Sprintf("n=%d/continue-every=50", n), func(b *testing.B) { benchWaits(b, n, 50) })
	}
}

type waitsIn struct {
	Left  int `json:"left"`
	Every int `json:"every"`
}

func benchWaits(b *testing.B, n, every int) {
	e := setup(b)
	// A segment that finds the one before still holding the cursor is
	// retried 100 ms later, through the delayed store.
	e.startScheduler(b)
	name := fmt.Sprintf("bench.waits%d.%d", n, every)
	def := workflow.Define(name, func(wf *workflow.Context, in waitsIn) (int, error) {
		for i := 0; in.Left > 0; i++ {
			if in.Every > 0 && i == in.Every {
				return 0, workflow.ContinueAsNew(wf, in)
			}
			if _, err := workflow.Call[int](wf, noop.With(0)); err != nil {
				return 0, err
			}
			in.Left--
		}
		return 0, nil
	})
	nc, js := e.Connect()
	w, err := worker.New(context.Background(), js, worker.Config{})
	must(b, err)
	must(b, workflow.Register(w, def))
	worker.Handle(w, noop, func(context.Context, *worker.Job[int]) error { return nil })
	must(b, w.Start(context.Background()))
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	pc := e.JS.Conn()
	ctx := context.Background()
	before := nc.Stats().OutBytes + pc.Stats().OutBytes
	b.ResetTimer()
	for range b.N {
		id, err := workflow.Start(ctx, e.P, def, waitsIn{Left: n, Every: every})
		must(b, err)
		_, err = workflow.Result(ctx, e.P, def, id)
		must(b, err)
	}
	b.StopTimer()
	written := nc.Stats().OutBytes + pc.Stats().OutBytes - before
	b.ReportMetric(float64(written)/float64(b.N), "B-written/wf")
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/wf")
}
