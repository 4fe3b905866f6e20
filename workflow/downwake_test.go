package workflow_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A workflow whose sleep ends while the server is down resumes as soon as
// its worker is back, not ReplayGrace later. Its wake, published by the
// scheduler before the worker reconnected, may be a replay to the worker,
// but a wake is never claimed (two copies schedule one segment), so it
// runs at once; the segment it schedules is stored after the reconnect,
// which the function stream's sequence tells. With ReplayGrace an hour,
// either held back as a possible replay would keep the workflow asleep.
func TestSleepEndingWhileTheServerIsDownResumesWithoutTheReplayGrace(t *testing.T) {
	e := setup(t)
	e.startScheduler(t)
	def := workflow.Define("test.sleepdown", func(wf *workflow.Context, d time.Duration) (int, error) {
		wf.Sleep(d)
		return workflow.Step(wf, "woke", func(context.Context) (int, error) {
			e.inc(wf.ID())
			return wf.Segment(), nil
		})
	})
	// The worker reconnects about 6 s after the server went down, seconds
	// after the scheduler, which reconnects within 50 ms of the server's
	// return and publishes the wake first.
	nc, err := nats.Connect(e.S.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(6*time.Second))
	must(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	must(t, err)
	var logs testserver.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	startWorkerOn(t, js, worker.Config{ReplayGrace: time.Hour, Logger: log}, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	defer func() {
		if t.Failed() {
			t.Logf("the worker's log:\n%s", logs.String())
		}
	}()
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, def, 2*time.Second)
	must(t, err)
	e.waiting(t, id)
	e.Down()
	time.Sleep(3 * time.Second) // the sleep ends while the server is down
	e.Up()
	r := e.wait(t, id)
	if r.State != jetflow.Success {
		t.Fatalf("workflow %s: %s (%s), want success", id, r.State, r.Error)
	}
	// Resumed once: its second segment ran the step after the sleep, once.
	out, err := workflow.Result(ctx, e.P, def, id)
	if err != nil || out != 2 || e.n(id) != 1 {
		t.Fatalf("result %d, %v, step ran %d times; want segment 2's, once", out, err, e.n(id))
	}
}
