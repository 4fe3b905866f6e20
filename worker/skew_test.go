package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/worker"
)

var skewed = jetflow.Define[echoArgs]("test.skewed")

// A worker whose clock runs 30 s ahead sets a retry's due time in the
// server's time: the retry asked for 2 s after the failure is due 2 s after
// it on the server's clock (not 32 s, not at once), and the worker reports
// its offset.
func TestRetryOfASkewedWorkerIsDueInTheServersTime(t *testing.T) {
	t.Parallel()
	const ahead = 30 * time.Second
	e := setup(t, worker.Config{Now: func() time.Time { return time.Now().Add(ahead) }})
	var attempts atomic.Int32
	worker.Handle(e.W, skewed, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		if attempts.Add(1) == 1 {
			return jetflow.RetryAfter(2*time.Second, errors.New("first attempt fails"))
		}
		return nil
	})
	e.start(t)
	testserver.Eventually(t, time.Minute, "the worker measured its clock", func() bool {
		off := e.W.ClockOffset()
		return off > ahead-5*time.Second && off < ahead+5*time.Second
	})
	id, err := e.P.Enqueue(context.Background(), skewed.With(echoArgs{N: 1}))
	if err != nil {
		t.Fatal(err)
	}
	var failedAt time.Time
	testserver.Eventually(t, time.Minute, "the first attempt failed", func() bool {
		r, err := e.P.Get(context.Background(), id)
		if err == nil && r.State == jetflow.Pending && r.Attempts == 1 {
			failedAt = time.Now()
			due := r.ScheduledTime.Sub(failedAt)
			if due > 10*time.Second || due < -5*time.Second {
				t.Fatalf("retry due %v from now on the server's clock, want about 2 s", due)
			}
			return true
		}
		return err == nil && r.State.Terminal()
	})
	r := e.wait(t, id)
	if r.State != jetflow.Success || r.Attempts != 2 {
		t.Fatalf("%s after %d attempts, want success after 2", r.State, r.Attempts)
	}
}

var aged = jetflow.Define[echoArgs]("test.aged")

// A first delivery whose message was stored half of AckWait ago or more
// may have waited long enough to be redelivered elsewhere: its run is
// claimed before its handler starts. The age is the server's: a worker
// whose clock is 30 s behind (by which the message would look 30 s
// younger) claims it first too.
func TestAnOldFirstDeliveryIsClaimedFirstWhateverTheClock(t *testing.T) {
	t.Parallel()
	const ackWait = 2 * time.Second
	e := setup(t, worker.Config{AckWait: ackWait, Now: func() time.Time { return time.Now().Add(-30 * time.Second) }})
	states := make(chan jetflow.State, 10)
	worker.Handle(e.W, aged, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		r, err := e.P.Get(ctx, j.ID())
		if err != nil {
			return err
		}
		states <- r.State
		return nil
	})
	e.start(t)
	testserver.Eventually(t, time.Minute, "the worker measured its clock", func() bool {
		return e.W.ClockOffset() < -25*time.Second
	})
	ctx := context.Background()
	if err := e.P.PauseFunction(ctx, aged.Name()); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 10*time.Second, "worker paused", func() bool { return e.W.Paused(aged.Name()) })
	const n = 5
	var ids []string
	for i := range n {
		id, err := e.P.Enqueue(ctx, aged.With(echoArgs{N: i}))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	time.Sleep(ackWait/2 + 300*time.Millisecond) // the messages age past AckWait/2
	if err := e.P.ResumeFunction(ctx, aged.Name()); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if r := e.wait(t, id); r.State != jetflow.Success || r.Attempts != 1 {
			t.Fatalf("%s: %s after %d attempts", id, r.State, r.Attempts)
		}
	}
	for range n {
		if st := recv(t, states, "a handler's look at its record"); st != jetflow.InProgress {
			t.Fatalf("a handler started on a record %s, want %s (claimed before it started)", st, jetflow.InProgress)
		}
	}
}
