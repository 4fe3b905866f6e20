package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// RunUntilSignal starts w and runs it until the process receives SIGTERM
// or SIGINT (or ctx ends), then stops it for a deploy: readiness fails at
// once (Health's "draining" check) and no new run is taken; running
// handlers have grace to finish (Stop); those still running then have
// their contexts canceled (cause ErrStopping, as StopAndCancel does) and a
// retryable run so interrupted is handed back unharmed (its claim given
// back, the attempt not counted), for another worker to run at once. An
// at-most-once run interrupted this way fails as lost, as with
// StopAndCancel: give such handlers a grace they finish within.
//
// It returns nil once every handler has returned, the error of Start, or
// an error wrapping context.DeadlineExceeded when a handler is still
// running another grace after its context was canceled (it ignores its
// context). Set the orchestrator's kill deadline (Kubernetes'
// terminationGracePeriodSeconds) above twice grace.
func (w *Worker) RunUntilSignal(ctx context.Context, grace time.Duration) error {
	sig, stopSignals := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stopSignals()
	if err := w.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	select {
	case <-sig.Done():
	case <-w.Stopped():
	}
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	err := w.Stop(gctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	// Stop canceled the handlers still running: wait for them to hand
	// their runs back before the process exits.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer wcancel()
	if err := w.handlersReturned(wctx); err != nil {
		return fmt.Errorf("worker: handlers still running %s after their contexts were canceled: %w", grace, err)
	}
	return nil
}

// handlersReturned waits until no handler runs (and no run is being
// handed back), or ctx ends.
func (w *Worker) handlersReturned(ctx context.Context) error {
	done := make(chan struct{})
	go func() { w.inflight.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
