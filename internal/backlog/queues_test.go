package backlog_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/backlog"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/pool"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/trigger"
	"github.com/jetflow-dev/jetflow/worker"
)

var (
	pooled    = jetflow.Define[args]("bk.pooled")
	triggered = jetflow.Define[args]("bk.triggered")
)

// A pool's queue and running items, and a trigger's messages not yet
// made runs, are read as their own records and consumer say: the pool
// holds 2 items running (its limit) and 3 queued, as each item's Status
// says; the trigger's capture stream holds 4 messages published while its
// runner was stopped.
func TestFiguresOfPoolsAndTriggers(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	w, err := worker.New(ctx, ts.JS, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	worker.Handle(w, pooled, func(ctx context.Context, _ *worker.Job[args]) error {
		select {
		case <-hold:
		case <-ctx.Done():
		}
		return nil
	})
	worker.Handle(w, triggered, func(context.Context, *worker.Job[args]) error { return nil })
	if err := pool.Register(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(hold)
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})
	p := w.Producer()
	pl, err := pool.New(ctx, p, pool.Config{Name: "bkpool", MaxParallelism: 2})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 5 {
		id, err := pl.Enqueue(ctx, pooled.With(args{i}))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := pl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pl.Stop(context.Background()) })

	// The trigger: started once (its stream and consumer made), stopped,
	// then 4 messages.
	tr := trigger.New(p, trigger.Config{})
	if err := trigger.Bind(tr, trigger.Func(triggered), trigger.Spec[args]{Name: "bktrig", Subjects: []string{"bk.events"}}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tr.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := ts.JS.Publish(ctx, "bk.events", []byte(`{"N":1}`)); err != nil {
			t.Fatal(err)
		}
	}

	r := backlog.New(ts.JS, streams.Config{})
	direct := func() (pending, running int) {
		for _, id := range ids {
			it, err := pl.Status(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			switch it.State {
			case jetflow.Pending:
				pending++
			case jetflow.InProgress:
				running++
			}
		}
		return pending, running
	}
	var f *backlog.Figures
	testserver.Eventually(t, 20*time.Second, "the pool's figures match its items", func() bool {
		f, err = r.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pending, running := direct()
		return len(f.Pools) == 1 && running == 2 && f.Pools[0].Running == running && f.Pools[0].Queued == uint64(pending)
	})
	if got := f.Pools[0]; got.Name != "bkpool" || got.Queued != 3 || got.Running != 2 {
		t.Errorf("pool figures %+v, want bkpool: 3 queued, 2 running", got)
	}
	if len(f.Triggers) != 1 {
		t.Fatalf("triggers %+v, want bktrig", f.Triggers)
	}
	want := backlog.Trigger{Name: "bktrig", Stream: "JETFLOW_TRIGGER_bktrig", Consumer: "jetflow_trigger_bktrig", Ready: 4}
	if got := f.Triggers[0]; got != want {
		t.Errorf("trigger figures %+v, want %+v", got, want)
	}
}
