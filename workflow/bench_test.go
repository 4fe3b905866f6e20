package workflow_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
)

var noop = jetflow.Define[int]("bench.noop")

const benchParallel = 32

// BenchmarkThreeStepWorkflow: workflows of three no-op inline steps, 32
// at a time, start to result.
func BenchmarkThreeStepWorkflow(b *testing.B) {
	e := setup(b)
	def := workflow.Define("bench.three", func(wf *workflow.Context, _ int) (int, error) {
		for i := range 3 {
			if _, err := workflow.Step(wf, fmt.Sprint("s", i), func(context.Context) (int, error) { return i, nil }); err != nil {
				return 0, err
			}
		}
		return 0, nil
	})
	e.startWorker(b, func(w *worker.Worker) { must(b, workflow.Register(w, def)) })
	ctx := context.Background()
	b.ResetTimer()
	run(b, func() error {
		id, err := workflow.Start(ctx, e.P, def, 0)
		if err != nil {
			return err
		}
		_, err = workflow.Result(ctx, e.P, def, id)
		return err
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "workflows/s")
}

// BenchmarkThreePlainRuns: three no-op runs per iteration (enqueued, then
// awaited), 32 iterations at a time: what a 3-step workflow is compared
// with.
func BenchmarkThreePlainRuns(b *testing.B) {
	e := setup(b)
	e.startWorker(b, func(w *worker.Worker) {
		worker.Handle(w, noop, func(context.Context, *worker.Job[int]) error { return nil })
	})
	ctx := context.Background()
	b.ResetTimer()
	run(b, func() error {
		var ids []string
		for range 3 {
			id, err := e.P.Enqueue(ctx, noop.With(0))
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		for _, id := range ids {
			if _, err := e.P.Wait(ctx, id); err != nil {
				return err
			}
		}
		return nil
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "triples/s")
}

func run(b *testing.B, op func() error) {
	var wg sync.WaitGroup
	work := make(chan struct{})
	for range benchParallel {
		wg.Go(func() {
			for range work {
				if err := op(); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for range b.N {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
}
