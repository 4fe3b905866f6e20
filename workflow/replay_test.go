package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
)

// A worker that restarts replays the workflow: journaled steps return
// their results without running again.
func TestReplayAfterWorkerRestart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	def := workflow.Define("test.restart", func(wf *workflow.Context, in string) (string, error) {
		a, err := workflow.Step(wf, "a", func(ctx context.Context) (string, error) {
			e.inc("a")
			return in + "-a", nil
		})
		if err != nil {
			return "", err
		}
		ev, err := workflow.AwaitEvent[string](wf, "go", 0)
		if err != nil {
			return "", err
		}
		b, err := workflow.Step(wf, "b", func(ctx context.Context) (string, error) {
			e.inc("b")
			return a + "-" + ev + "-b", nil
		})
		return b, err
	})
	w1 := e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, def, "x")
	must(t, err)
	st := e.waiting(t, id)
	if len(st.Steps) != 2 || st.Steps[1].State != workflow.StepWaiting || st.Steps[1].Waits.Event != "go" {
		t.Fatalf("steps while waiting: %+v", st.Steps)
	}
	if len(st.Waits) != 1 || !strings.Contains(st.Waits[0], "event go") {
		t.Fatalf("waits: %v", st.Waits)
	}
	must(t, w1.Stop(ctx))
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	must(t, workflow.SendEvent(ctx, e.P, id, "go", "ev"))
	out, err := workflow.Result(ctx, e.P, def, id)
	must(t, err)
	if out != "x-a-ev-b" {
		t.Fatalf("result %q", out)
	}
	if e.n("a") != 1 || e.n("b") != 1 {
		t.Fatalf("a ran %d times, b %d, want once each", e.n("a"), e.n("b"))
	}
	if st := e.status(t, id); st.Segment != 2 {
		t.Fatalf("segments: %d, want 2", st.Segment)
	}
}

// A worker stopped in the middle of a step: an at-most-once step is never
// run twice (the replay fails it as lost); a retryable one runs again and
// its outcome is journaled once.
func TestWorkerStoppedMidStep(t *testing.T) {
	t.Parallel()
	for _, kind := range []jetflow.Kind{jetflow.AtMostOnce, jetflow.Retryable} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			started := make(chan struct{}, 4)
			def := workflow.Define("test.midstep", func(wf *workflow.Context, _ struct{}) (string, error) {
				v, err := workflow.Step(wf, "charge", func(ctx context.Context) (string, error) {
					if e.inc("charge") == 1 {
						started <- struct{}{}
						<-ctx.Done() // the worker stops under it
						return "", context.Cause(ctx)
					}
					return "charged", nil
				}, workflow.StepOptions{Kind: kind})
				if errors.Is(err, jetflow.ErrWorkerLost) {
					return "lost", nil
				}
				return v, err
			})
			w1 := e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
			ctx := testCtx(t)
			id, err := workflow.Start(ctx, e.P, def, struct{}{})
			must(t, err)
			recv(t, started, "the step started")
			sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			_ = w1.Stop(sctx) // its ctx ends: the running segment is canceled
			cancel()
			e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
			out, err := workflow.Result(ctx, e.P, def, id)
			must(t, err)
			st := e.status(t, id)
			switch kind {
			case jetflow.AtMostOnce:
				if out != "lost" || e.n("charge") != 1 {
					t.Fatalf("result %q after %d runs, want lost after 1", out, e.n("charge"))
				}
				if s := st.Steps[0]; s.State != workflow.StepFailed || !strings.Contains(s.Error, "worker lost") {
					t.Fatalf("step: %+v", s)
				}
			default:
				if out != "charged" || e.n("charge") != 2 {
					t.Fatalf("result %q after %d runs, want charged after 2", out, e.n("charge"))
				}
				if s := st.Steps[0]; s.State != workflow.StepDone || s.Segment != 1 {
					t.Fatalf("step: %+v", s)
				}
			}
		})
	}
}

// A replay that reaches another step than the journal holds fails the
// workflow with ErrNondeterministic naming both steps.
func TestNondeterministicChangeDetected(t *testing.T) {
	t.Parallel()
	e := setup(t)
	version := func(first string) *workflow.Workflow[struct{}, string] {
		return workflow.Define("test.nondet", func(wf *workflow.Context, _ struct{}) (string, error) {
			if _, err := workflow.Step(wf, first, func(ctx context.Context) (int, error) { return 1, nil }); err != nil {
				return "", err
			}
			return workflow.AwaitEvent[string](wf, "go", 0)
		})
	}
	v1, v2 := version("reserve"), version("charge")
	w1 := e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, v1)) })
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, v1, struct{}{})
	must(t, err)
	e.waiting(t, id)
	must(t, w1.Stop(ctx))
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, v2)) })
	must(t, workflow.SendEvent(ctx, e.P, id, "go", "now"))
	r := e.wait(t, id)
	if r.State != jetflow.Failed || !strings.Contains(r.Error, workflow.ErrNondeterministic.Error()) ||
		!strings.Contains(r.Error, `"reserve"`) || !strings.Contains(r.Error, `"charge"`) {
		t.Fatalf("workflow %s: %s", r.State, r.Error)
	}
	// Its identity survives the record: Result and Get match it.
	if _, err := workflow.Result(ctx, e.P, v2, id); !errors.Is(err, workflow.ErrNondeterministic) {
		t.Errorf("Result: %v, want errors.Is ErrNondeterministic", err)
	}
	if st := e.status(t, id); st.ErrorCode == "" || !errors.Is(st.Err(), workflow.ErrNondeterministic) {
		t.Errorf("Get: code %q, Err %v", st.ErrorCode, st.Err())
	}
}

// Patched is false for an execution whose journal predates the patch,
// true for a new one.
func TestPatched(t *testing.T) {
	t.Parallel()
	e := setup(t)
	old := workflow.Define("test.patch", func(wf *workflow.Context, _ struct{}) (string, error) {
		return workflow.AwaitEvent[string](wf, "go", 0)
	})
	patched := workflow.Define("test.patch", func(wf *workflow.Context, _ struct{}) (string, error) {
		path := "old"
		if workflow.Patched(wf, "greet-first") {
			path = "new"
		}
		v, err := workflow.AwaitEvent[string](wf, "go", 0)
		return path + "-" + v, err
	})
	w1 := e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, old)) })
	ctx := testCtx(t)
	before, err := workflow.Start(ctx, e.P, old, struct{}{})
	must(t, err)
	e.waiting(t, before)
	must(t, w1.Stop(ctx))
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, patched)) })
	after, err := workflow.Start(ctx, e.P, patched, struct{}{})
	must(t, err)
	e.waiting(t, after)
	for _, id := range []string{before, after} {
		must(t, workflow.SendEvent(ctx, e.P, id, "go", "ok"))
	}
	for id, want := range map[string]string{before: "old-ok", after: "new-ok"} {
		out, err := workflow.Result(ctx, e.P, patched, id)
		if err != nil || out != want {
			t.Errorf("workflow %s: %q, %v; want %q", id, out, err, want)
		}
	}
}

// Steps in parallel branches get ids from the branch and their order in
// it: a replay finds them journaled and runs none twice.
func TestParallelStepsReplayToSameIDs(t *testing.T) {
	t.Parallel()
	e := setup(t)
	def := workflow.Define("test.parallel", func(wf *workflow.Context, _ struct{}) ([]string, error) {
		var fs []*workflow.Future[string]
		for i := range 3 {
			fs = append(fs, workflow.Go(wf, func(wf *workflow.Context) (string, error) {
				v, err := workflow.Step(wf, fmt.Sprintf("s-%d", i), func(ctx context.Context) (string, error) {
					e.inc(fmt.Sprintf("s-%d", i))
					return fmt.Sprint(i), nil
				})
				if err != nil || i != 1 {
					return v, err
				}
				ev, err := workflow.AwaitEvent[string](wf, "go", 0)
				return v + ev, err
			}))
		}
		var out []string
		for _, f := range fs {
			v, err := f.Get()
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		_, err := workflow.Step(wf, "after", func(ctx context.Context) (int, error) { e.inc("after"); return 0, nil })
		return out, err
	})
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, def, struct{}{})
	must(t, err)
	e.waiting(t, id)
	must(t, workflow.SendEvent(ctx, e.P, id, "go", "!"))
	out, err := workflow.Result(ctx, e.P, def, id)
	must(t, err)
	if strings.Join(out, ",") != "0,1!,2" {
		t.Fatalf("result %v", out)
	}
	for _, k := range []string{"s-0", "s-1", "s-2", "after"} {
		if e.n(k) != 1 {
			t.Errorf("%s ran %d times, want 1", k, e.n(k))
		}
	}
	var got []string
	for _, s := range e.status(t, id).Steps {
		got = append(got, s.Step+"="+s.Name)
	}
	if want := "1.1=s-0,2.1=s-1,2.2=go,3.1=s-2,4=after"; strings.Join(got, ",") != want {
		t.Fatalf("step ids %v, want %s", got, want)
	}
}

var _ = testserver.Eventually
