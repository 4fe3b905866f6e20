package worker

import (
	"context"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/kv"
)

// FunctionInfo is what a worker publishes about a function it serves, in the
// functions bucket under <worker id>.<function> with a 30 s TTL renewed
// every 10 s. It is kv.FunctionInfo: the CLI and the dashboard read the
// registry with kv.ReadFunctions, without the worker.
type FunctionInfo = kv.FunctionInfo

func (w *Worker) register(ctx context.Context, fns []*fnEntry) error {
	for _, e := range fns {
		attempts := e.opts.MaxAttempts
		if e.kind == jetflow.AtMostOnce {
			attempts = 1
		}
		w.mu.Lock()
		paused := e.paused
		w.mu.Unlock()
		fi := FunctionInfo{
			Name: e.name, Kind: e.kind, Worker: w.cfg.ID, Concurrency: e.opts.Concurrency,
			MaxParallel: e.opts.MaxParallel, MaxAttempts: attempts, Timeout: e.opts.Timeout,
			Seen: w.now().UTC(), Paused: paused,
		}
		if _, err := w.js.PublishMsg(ctx, kv.FunctionMsg(w.scfg, fi)); err != nil {
			return err
		}
	}
	return nil
}
