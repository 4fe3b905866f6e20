package worker

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
)

// A delivery taken as fresh (to run unclaimed, claimed late) whose
// process then stalls past AckWait/2 before its handler starts is claimed
// before the handler starts: JetStream may have redelivered it elsewhere
// meanwhile. The stall is stood in for by beforeStart sleeping; the
// handler reads its own record at its start and must find its claim.
// Without claimIfWaited it finds the pending record (the late claim comes
// ClaimAfter after the start).
func TestDeliveryThatWaitedBeforeItsHandlerIsClaimedFirst(t *testing.T) {
	const ackWait = 2 * time.Second
	env, w := provisionedWorker(t, Config{AckWait: ackWait})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fn := jetflow.Define[struct{}]("gate.fn")
	type start struct {
		hookState jetflow.State // the record j held when the stall began
		stored    *jetflow.Run  // the stored record at the handler's start
		fresh     bool
	}
	const stalled = "gate-stalled"
	hookState := make(chan jetflow.State, 1)
	starts := make(chan start, 10)
	w.beforeStart = func(j *jobCore) {
		if j.ID() == stalled {
			hookState <- j.rec.State
			time.Sleep(ackWait/2 + 200*time.Millisecond)
		}
	}
	Handle(w, fn, func(ctx context.Context, j *Job[struct{}]) error {
		r, err := w.store.Show(ctx, j.ID())
		if err != nil {
			r = nil
		}
		starts <- start{stored: r, fresh: j.Fresh()}
		return nil
	})
	p := startWorker(t, env, w)
	// A first run, so that the worker has measured the server's clock
	// (before that every delivery counts as having waited).
	testserver.Eventually(t, 20*time.Second, "a run started fresh (not claimed first)", func() bool {
		if _, err := p.Enqueue(ctx, fn.With(struct{}{})); err != nil {
			t.Fatal(err)
		}
		select {
		case s := <-starts:
			return s.stored == nil || s.stored.State == jetflow.Pending
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		return false
	})
	if _, err := p.Enqueue(ctx, fn.With(struct{}{}), producer.WithID(stalled)); err != nil {
		t.Fatal(err)
	}
	var got start
	select {
	case got.hookState = <-hookState:
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if got.hookState != jetflow.Pending {
		t.Fatalf("run reached its handler's start %s, want pending (taken as fresh): the test did not stall an unclaimed run", got.hookState)
	}
	select {
	case s := <-starts:
		got.stored, got.fresh = s.stored, s.fresh
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if got.stored == nil || got.stored.State != jetflow.InProgress || got.stored.Owner != w.cfg.ID {
		t.Fatalf("stored record at the handler's start: %+v; want inProgress, owned by %s (claimed first)", got.stored, w.cfg.ID)
	}
	if got.fresh {
		t.Fatal("Fresh() is true for a run claimed after a stall: it may have run elsewhere")
	}
	testserver.Eventually(t, 20*time.Second, "the stalled run succeeded", func() bool {
		r, err := w.store.Show(ctx, stalled)
		return err == nil && r.State == jetflow.Success
	})
}
