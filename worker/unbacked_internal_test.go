package worker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/kv"
)

// A late claim refused while the leader's read shows the record as the
// claim expected it (a leader judging against an uncommitted write) is
// written again, by the one rule for lost replies (kv.Settle: not landed):
// the write reports no conflict, and the handler is not given up as taken
// over. Before, such a refusal of a claim or a heartbeat was a conflict,
// and the handler was canceled. The leader's answer is played here by the
// worker's read after a refusal, which returns the record as the handler
// started from while the stored one moved on.
func TestLateClaimRefusedUnbackedIsWrittenAgain(t *testing.T) {
	env, w := provisionedWorker(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stale atomic.Pointer[jetflow.Run]
	w.readConfirmed = func(ctx context.Context, id string) (*jetflow.Run, bool, error) {
		if r := stale.Load(); r != nil {
			return r, true, nil
		}
		return w.store.Decide(ctx, id)
	}
	fn := jetflow.Define[string]("claim.unbacked")
	errs := make(chan error, 1)
	Handle(w, fn, func(ctx context.Context, j *Job[string]) error {
		j.mu.Lock()
		before := *j.rec
		before.Revision = j.rev
		j.mu.Unlock()
		// The stored record moves on (this attempt's own claim, landed
		// unseen), while the "leader" shows it as before.
		if err := landUnseen(ctx, j.jobCore); err != nil {
			errs <- err
			return nil
		}
		stale.Store(&before)
		errs <- j.claim(ctx)
		stale.Store(nil)
		return nil
	}, Options{ClaimAfter: time.Hour})
	p := startWorker(t, env, w)
	id, err := p.Enqueue(ctx, fn.With("x"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if err == nil || errors.Is(err, kv.ErrConflict) || !errors.Is(err, kv.ErrUnconfirmed) {
			t.Fatalf("late claim refused, the record unchanged on the leader's word: %v; want kv.ErrUnconfirmed, no conflict", err)
		}
	case <-ctx.Done():
		t.Fatal("the handler did not run")
	}
	if r, err := p.Wait(ctx, id); err != nil || r.State != jetflow.Success {
		t.Fatalf("run %s: %v, %v; want success", id, r, err)
	}
}
