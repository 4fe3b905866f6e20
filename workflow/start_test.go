package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/internal/wfwire"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
)

// Start writes the record, then publishes the first segment. A Start that
// died between the two leaves a pending record and nothing to run it: the
// scheduler's repair sweep publishes the first segment, and the workflow
// runs once, with the record's input.
func TestStartThatDiedBeforeItsFirstSegmentIsRepaired(t *testing.T) {
	t.Parallel()
	e := setup(t)
	def := workflow.Define("test.start.repair", func(wf *workflow.Context, in string) (string, error) {
		return workflow.Step(wf, "greet", func(ctx context.Context) (string, error) {
			e.inc("greet")
			return "hello " + in, nil
		})
	})
	ctx := testCtx(t)
	// What Start writes before it publishes, and no more.
	now := time.Now().UTC().Add(-time.Minute)
	id := "start-died"
	rec := &jetflow.Run{
		ID: id, Name: def.Name(), Kind: jetflow.Retryable, Args: json.RawMessage(`"ann"`), State: jetflow.Pending,
		ScheduledTime: now, CreationTime: now, Children: []string{wfwire.SegmentID(id, 1)},
	}
	if _, err := engine.Of(e.P).Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	_, js := e.Connect()
	s, err := scheduler.New(context.Background(), js, scheduler.Config{LeaseTTL: time.Second, RepairInterval: 200 * time.Millisecond, RepairGrace: 200 * time.Millisecond})
	must(t, err)
	must(t, s.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
	out, err := workflow.Result(ctx, e.P, def, id)
	must(t, err)
	if out != "hello ann" || e.n("greet") != 1 {
		t.Fatalf("repaired workflow: %q, step ran %d times", out, e.n("greet"))
	}
	// Start with the same id is refused: the record is the idempotency key.
	if _, err := workflow.Start(ctx, e.P, def, "bob", workflow.WithID(id)); !errors.Is(err, producerErrAlreadyExists) {
		t.Fatalf("second Start of an id: %v, want producer.ErrAlreadyExists", err)
	}
}

// A first segment that runs for a while shows the workflow inProgress (its
// claim comes after a short delay, as a run's late claim does); one that
// ends at once goes from pending to its end, with its start time and one
// attempt recorded.
func TestFirstSegmentClaimsTheRecordWhenItRunsLong(t *testing.T) {
	t.Parallel()
	e := setup(t)
	release := make(chan struct{})
	def := workflow.Define("test.start.claim", func(wf *workflow.Context, slow bool) (int, error) {
		return workflow.Step(wf, "work", func(ctx context.Context) (int, error) {
			if slow {
				select {
				case <-release:
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			}
			return 1, nil
		})
	})
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	ctx := testCtx(t)
	slow, err := workflow.Start(ctx, e.P, def, true)
	must(t, err)
	testserver.Eventually(t, 20*time.Second, "slow workflow inProgress", func() bool {
		r, err := e.P.Get(ctx, slow)
		return err == nil && r.State == jetflow.InProgress && !r.StartedTime.IsZero()
	})
	close(release)
	if r := e.wait(t, slow); r.State != jetflow.Success || r.Attempts != 1 {
		t.Fatalf("slow workflow: %+v", r)
	}
	fast, err := workflow.Start(ctx, e.P, def, false)
	must(t, err)
	r := e.wait(t, fast)
	if r.State != jetflow.Success || r.Attempts != 1 || r.StartedTime.IsZero() || r.CompletedTime.Before(r.StartedTime) {
		t.Fatalf("fast workflow: %+v", r)
	}
}

// A workflow id given again after its record expired, while the journal of
// the earlier workflow is still there (its purge had not run): Start
// removes what is left, and the new workflow runs its steps afresh.
func TestStartOfAnIdWithALeftoverJournalRunsAfresh(t *testing.T) {
	t.Parallel()
	e := setup(t)
	def := workflow.Define("test.start.leftover", func(wf *workflow.Context, in string) (string, error) {
		return workflow.Step(wf, "greet", func(ctx context.Context) (string, error) {
			e.inc("greet")
			return "hello " + in, nil
		})
	})
	ctx := testCtx(t)
	id := "reused-id"
	kvb, err := e.JS.KeyValue(ctx, streams.Config{}.WithDefaults().JournalBucket())
	must(t, err)
	// The earlier workflow's first step, journaled done with its result.
	_, err = kvb.Put(ctx, id+".s.1", []byte(`{"step":"1","name":"greet","kind":"step","state":"done","result":"\"hello old\"","segment":1}`))
	must(t, err)
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	_, err = workflow.Start(ctx, e.P, def, "new", workflow.WithID(id))
	must(t, err)
	out, err := workflow.Result(ctx, e.P, def, id)
	must(t, err)
	if out != "hello new" || e.n("greet") != 1 {
		t.Fatalf("workflow on a reused id: %q, step ran %d times; want the new input's result", out, e.n("greet"))
	}
}
