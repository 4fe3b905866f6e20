package scheduler_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
)

var afterRestart = jetflow.Define[tick]("sched.afterrestart")

// A leader whose connection comes back after the server restarted watches
// the delayed bucket anew and reads its seconds again, at once: the old
// watch is a consumer the restart may have lost, and a run delayed after
// the restart to a second the term had read already (within the horizon)
// was seen only once the client noticed (missed heartbeats), a sleeping
// workflow's wake 9 s late. The delayed run is dispatched.
func TestDelayedEntriesReadAgainOnReconnect(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var logs testserver.Buffer
	_, sjs := ts.Connect()
	s, err := scheduler.New(ctx, sjs, scheduler.Config{LeaseTTL: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	testserver.Eventually(t, 10*time.Second, "the scheduler leads", s.IsLeader)

	_, wjs := ts.Connect()
	w, err := worker.New(ctx, wjs, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int64
	worker.Handle(w, afterRestart, func(context.Context, *worker.Job[tick]) error { ran.Add(1); return nil })
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}

	// The term's dispatch settled: a delayed run went through.
	warm, err := p.RunAfter(ctx, 100*time.Millisecond, afterRestart.With(tick{}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx, warm); err != nil {
		t.Fatal(err)
	}

	ts.Down()
	ts.Up()
	testserver.Eventually(t, 30*time.Second, "the delayed entries read again after the reconnect", func() bool {
		return strings.Contains(logs.String(), "reconnected: delayed entries read again")
	})
	id, err := p.RunAfter(ctx, time.Second, afterRestart.With(tick{}))
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Wait(ctx, id)
	if err != nil {
		t.Fatalf("the run delayed after the restart: %v", err)
	}
	if r.State != jetflow.Success || ran.Load() != 2 {
		t.Fatalf("the run delayed after the restart is %s, ran %d times", r.State, ran.Load())
	}
}
