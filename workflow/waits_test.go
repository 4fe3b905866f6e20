package workflow_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
)

// A sleep resumes through the delayed store: while it sleeps, the segment
// that started it has ended (nothing runs, no goroutine waits).
func TestSleepResumesThroughDelayedStore(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startScheduler(t)
	def := workflow.Define("test.sleep", func(wf *workflow.Context, d time.Duration) (time.Duration, error) {
		start, err := workflow.Step(wf, "start", func(ctx context.Context) (time.Time, error) { return time.Now(), nil })
		if err != nil {
			return 0, err
		}
		wf.Sleep(d)
		return workflow.Step(wf, "end", func(ctx context.Context) (time.Duration, error) { return time.Since(start), nil })
	})
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	ctx := testCtx(t)
	// The segment must settle before the sleep ends, which a segment
	// that slept in its handler could not. Between the sleep's start and
	// the settle come the journal's cursor, the timer's record and the
	// segment's outcome, writes a loaded machine can stretch to seconds:
	// 10 s leave a wide margin.
	const sleep = 10 * time.Second
	id, err := workflow.Start(ctx, e.P, def, sleep)
	must(t, err)
	st := e.waiting(t, id)
	if s := st.Steps[1]; s.Kind != workflow.KindSleep || s.State != workflow.StepWaiting || s.Waits.Until.IsZero() {
		t.Fatalf("sleep step: %+v", s)
	}
	// The cursor says "waiting" a moment before the worker settles the
	// segment: wait for the settle, then check it came before the wake-up.
	var seg *jetflow.Run
	testserver.Eventually(t, 20*time.Second, "segment 1 ended", func() bool {
		r, err := e.P.Get(ctx, workflow.SegmentID(id, 1))
		seg = r
		return err == nil && r.State.Terminal()
	})
	if seg.State != jetflow.Success || !seg.CompletedTime.Before(st.Steps[1].Waits.Until) {
		t.Fatalf("segment 1 is %s (completed %s), want success before the sleep ends at %s", seg.State, seg.CompletedTime, st.Steps[1].Waits.Until)
	}
	slept, err := workflow.Result(ctx, e.P, def, id)
	must(t, err)
	if slept < sleep || slept > sleep+20*time.Second {
		t.Fatalf("slept %s, want %s", slept, sleep)
	}
}

// Events sent before their await are kept and consumed in order, one per
// await; an event sent after resumes the waiting workflow.
func TestEventsBeforeAndAfterAwait(t *testing.T) {
	t.Parallel()
	e := setup(t)
	def := workflow.Define("test.events", func(wf *workflow.Context, _ struct{}) (string, error) {
		var got []string
		for _, name := range []string{"early", "early", "late"} {
			v, err := workflow.AwaitEvent[string](wf, name, 0)
			if err != nil {
				return "", err
			}
			got = append(got, v)
		}
		return strings.Join(got, ","), nil
	})
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, def, struct{}{})
	must(t, err)
	// Sent before any worker runs the workflow.
	must(t, workflow.SendEvent(ctx, e.P, id, "early", "e1"))
	must(t, workflow.SendEvent(ctx, e.P, id, "early", "e2"))
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	st := e.waiting(t, id)
	if last := st.Steps[len(st.Steps)-1]; last.Name != "late" || last.State != workflow.StepWaiting {
		t.Fatalf("steps: %+v", st.Steps)
	}
	must(t, workflow.SendEvent(ctx, e.P, id, "late", "l1"))
	out, err := workflow.Result(ctx, e.P, def, id)
	must(t, err)
	if out != "e1,e2,l1" {
		t.Fatalf("result %q, want e1,e2,l1", out)
	}
	if err := workflow.SendEvent(ctx, e.P, id, "late", "again"); !errors.Is(err, workflow.ErrEnded) {
		t.Fatalf("event to an ended workflow: %v, want ErrEnded", err)
	}
	if err := workflow.SendEvent(ctx, e.P, id, "bad.name", 1); !errors.Is(err, workflow.ErrInvalidEventName) {
		t.Fatalf("bad event name: %v", err)
	}
}

// producer.SendEvent, for a producer that does not import package
// workflow: events before and after the await reach it, through a wake
// run; it refuses runs that are not workflows and ended workflows with the
// errors workflow.SendEvent names.
func TestProducerSendEvent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	def := workflow.Define("test.pevents", func(wf *workflow.Context, _ struct{}) (string, error) {
		a, err := workflow.AwaitEvent[string](wf, "a", 0)
		if err != nil {
			return "", err
		}
		b, err := workflow.AwaitEvent[string](wf, "b", 0)
		return a + b, err
	})
	plain := jetflow.Define[struct{}]("test.pevents.plain")
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, def, struct{}{})
	must(t, err)
	must(t, e.P.SendEvent(ctx, id, "a", "x")) // before any worker runs it
	e.startWorker(t, func(w *worker.Worker) {
		must(t, workflow.Register(w, def))
		worker.Handle(w, plain, func(context.Context, *worker.Job[struct{}]) error { return nil })
	})
	st := e.waiting(t, id)
	if last := st.Steps[len(st.Steps)-1]; last.Name != "b" || last.State != workflow.StepWaiting {
		t.Fatalf("steps: %+v", st.Steps)
	}
	must(t, e.P.SendEvent(ctx, id, "b", "y"))
	out, err := workflow.Result(ctx, e.P, def, id)
	must(t, err)
	if out != "xy" {
		t.Fatalf("result %q, want xy", out)
	}
	if err := e.P.SendEvent(ctx, id, "b", "again"); !errors.Is(err, workflow.ErrEnded) || !errors.Is(err, producer.ErrWorkflowEnded) {
		t.Fatalf("event to an ended workflow: %v, want ErrEnded", err)
	}
	if err := e.P.SendEvent(ctx, id, "bad.name", 1); !errors.Is(err, workflow.ErrInvalidEventName) {
		t.Fatalf("bad event name: %v", err)
	}
	rid, err := e.P.Enqueue(ctx, plain.With(struct{}{}), producer.WithID("not-a-workflow"))
	must(t, err)
	if err := e.P.SendEvent(ctx, rid, "a", 1); !errors.Is(err, producer.ErrNotWorkflow) {
		t.Fatalf("event to a plain run: %v, want ErrNotWorkflow", err)
	}
	if err := e.P.SendEvent(ctx, "no-such-run", "a", 1); !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("event to no run: %v, want ErrNotFound", err)
	}
}

// An await that gets no event in time returns ErrEventTimeout, journaled:
// an event sent later is not consumed by it.
func TestAwaitEventTimeout(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startScheduler(t)
	def := workflow.Define("test.timeout", func(wf *workflow.Context, _ struct{}) (string, error) {
		_, err := workflow.AwaitEvent[string](wf, "approval", 300*time.Millisecond)
		if !errors.Is(err, workflow.ErrEventTimeout) {
			return "", errors.New("want a timeout, got " + errString(err))
		}
		wf.Sleep(10 * time.Millisecond) // a replay after the timeout
		return "timed out", nil
	})
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, def, struct{}{})
	must(t, err)
	out, err := workflow.Result(ctx, e.P, def, id)
	must(t, err)
	if out != "timed out" {
		t.Fatalf("result %q", out)
	}
	if s := e.status(t, id).Steps[0]; s.State != workflow.StepFailed || !strings.Contains(s.Error, "event timeout") {
		t.Fatalf("await step: %+v", s)
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// Cancel during a sleep: the workflow's record is canceled, and its timer
// with it; the steps after the sleep never run.
func TestCancelDuringSleep(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startScheduler(t)
	def := workflow.Define("test.cancel", func(wf *workflow.Context, _ struct{}) (int, error) {
		wf.Sleep(time.Hour)
		return workflow.Step(wf, "after", func(ctx context.Context) (int, error) { e.inc("after"); return 1, nil })
	})
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, def, struct{}{})
	must(t, err)
	e.waiting(t, id)
	rec, err := e.P.Get(ctx, id) // after the segment parked: the timer is among its children
	must(t, err)
	must(t, e.P.Cancel(ctx, id))
	r := e.wait(t, id)
	if r.State != jetflow.Canceled {
		t.Fatalf("workflow %s", r.State)
	}
	var timers int
	for _, c := range rec.Children {
		cr, err := e.P.Get(ctx, c)
		must(t, err)
		if strings.Contains(c, "timer") {
			timers++
			if cr.State != jetflow.Canceled {
				t.Errorf("timer %s is %s, want canceled", c, cr.State)
			}
		}
	}
	if timers != 1 {
		t.Fatalf("children %v: want one timer", rec.Children)
	}
	if e.n("after") != 0 {
		t.Fatal("a step after the canceled sleep ran")
	}
}

type DoubleArgs struct {
	N    int  `json:"n"`
	Fail bool `json:"fail,omitempty"`
}

var Double = jetflow.Define[DoubleArgs]("test.double")

func double(_ context.Context, j *worker.Job[DoubleArgs]) error {
	if j.Args.Fail {
		return jetflow.Permanent(errors.New("cannot double"))
	}
	return j.SetResult(j.Args.N * 2)
}

// A function call is a child run on the fleet; its result comes back
// typed, its failure as a StepError.
func TestCallChildFunction(t *testing.T) {
	t.Parallel()
	e := setup(t)
	def := workflow.Define("test.call", func(wf *workflow.Context, n int) (int, error) {
		v, err := workflow.Call[int](wf, Double.With(DoubleArgs{N: n}))
		if err != nil {
			return 0, err
		}
		_, err = workflow.Call[int](wf, Double.With(DoubleArgs{N: v, Fail: true}))
		var se *workflow.StepError
		if !errors.As(err, &se) || se.Msg != "cannot double" {
			return 0, errors.New("want the child's error, got " + errString(err))
		}
		return v, nil
	})
	e.startWorker(t, func(w *worker.Worker) {
		must(t, workflow.Register(w, def))
		worker.Handle(w, Double, double)
	})
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, def, 21)
	must(t, err)
	out, err := workflow.Result(ctx, e.P, def, id)
	must(t, err)
	if out != 42 {
		t.Fatalf("result %d, want 42", out)
	}
	st := e.status(t, id)
	if s := st.Steps[0]; s.Kind != workflow.KindCall || s.Name != "test.double" || s.State != workflow.StepDone || s.Waits.Run == "" {
		t.Fatalf("call step: %+v", s)
	}
	child, err := e.P.Get(ctx, st.Steps[0].Waits.Run)
	must(t, err)
	if child.Parent != id || child.State != jetflow.Success {
		t.Fatalf("child run: parent %q, %s", child.Parent, child.State)
	}
}

// A child workflow, awaited; canceling the parent would cancel it (it is
// among the parent's children).
func TestChildWorkflow(t *testing.T) {
	t.Parallel()
	e := setup(t)
	child := workflow.Define("test.child", func(wf *workflow.Context, n int) (int, error) {
		return workflow.Step(wf, "square", func(ctx context.Context) (int, error) { return n * n, nil })
	})
	parent := workflow.Define("test.parent", func(wf *workflow.Context, n int) (int, error) {
		a, err := workflow.RunChild(wf, child, n)
		if err != nil {
			return 0, err
		}
		if _, err := workflow.StartChild(wf, child, 1); err != nil {
			return 0, err
		}
		return a + 1, nil
	})
	e.startWorker(t, func(w *worker.Worker) {
		must(t, workflow.Register(w, child))
		must(t, workflow.Register(w, parent))
	})
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, parent, 7)
	must(t, err)
	out, err := workflow.Result(ctx, e.P, parent, id)
	must(t, err)
	if out != 50 {
		t.Fatalf("result %d, want 50", out)
	}
	st := e.status(t, id)
	for _, s := range st.Steps {
		if s.Kind != workflow.KindChild || s.Waits == nil || s.Waits.Run == "" {
			t.Fatalf("step %+v", s)
		}
		r, err := e.P.Get(ctx, s.Waits.Run)
		must(t, err)
		if r.Parent != id || r.Name != "test.child" {
			t.Fatalf("child %s: parent %q name %s", r.ID, r.Parent, r.Name)
		}
	}
}
