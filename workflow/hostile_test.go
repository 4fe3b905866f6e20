package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
)

// errsOf names the sentinels err matches, for a workflow's result.
func errsOf(err error) string {
	var se *workflow.StepError
	return fmt.Sprintf("step=%v invalidName=%v inactive=%v", errors.As(err, &se),
		errors.Is(err, jetflow.ErrInvalidName), errors.Is(err, workflow.ErrDefinitionInactive))
}

// A call of a function whose name is not valid, and a child workflow of a
// deprecated or deleted definition, are refused for good: the step fails
// with the refusal (a *StepError matching it), once, instead of the
// segment being retried into the same refusal with the workflow stuck
// for hours.
func TestRefusedCallOrChildFailsTheStep(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	child := workflow.Define("test.refused.child", func(wf *workflow.Context, _ struct{}) (string, error) { return "child", nil })
	badCall := workflow.Define("test.refused.call", func(wf *workflow.Context, _ struct{}) (string, error) {
		_, err := workflow.Call[string](wf, jetflow.Call{Name: "orders.*", Args: 1})
		return errsOf(err), nil
	})
	runChild := workflow.Define("test.refused.runchild", func(wf *workflow.Context, _ struct{}) (string, error) {
		_, err := workflow.RunChild(wf, child, struct{}{})
		return errsOf(err), nil
	})
	startChild := workflow.Define("test.refused.startchild", func(wf *workflow.Context, _ struct{}) (string, error) {
		_, err := workflow.StartChild(wf, child, struct{}{})
		return errsOf(err), nil
	})
	e.startWorker(t, func(w *worker.Worker) {
		for _, def := range []*workflow.Workflow[struct{}, string]{child, badCall, runChild, startChild} {
			must(t, workflow.Register(w, def))
		}
	})
	must(t, workflow.SetDefinitionState(ctx, e.P, child.Name(), workflow.DefinitionDeprecated))
	for _, c := range []struct {
		def  *workflow.Workflow[struct{}, string]
		want string
	}{
		{badCall, `"step=true invalidName=true inactive=false"`},
		{runChild, `"step=true invalidName=false inactive=true"`},
		{startChild, `"step=true invalidName=false inactive=true"`},
	} {
		id, err := workflow.Start(ctx, e.P, c.def, struct{}{})
		must(t, err)
		wctx, cancel := context.WithTimeout(ctx, 45*time.Second)
		r, err := e.P.Wait(wctx, id)
		cancel()
		if err != nil {
			st, _ := workflow.Get(ctx, e.P, id)
			t.Fatalf("%s: did not end: %v (steps %+v)", c.def.Name(), err, st.Steps)
		}
		if r.State != jetflow.Success || string(r.Result) != c.want {
			t.Errorf("%s: %s %s %q, want success %s", c.def.Name(), r.State, r.Result, r.Error, c.want)
		}
		if st := e.status(t, id); len(st.Steps) != 1 || st.Steps[0].State != workflow.StepFailed || st.Steps[0].Attempts > 1 {
			t.Errorf("%s: steps %+v, want one failed step", c.def.Name(), st.Steps)
		}
	}
}

// A sleep until a time no record holds (after year 9999) fails the
// workflow with jetflow.ErrBadArgs at once; one before year 0 does not
// sleep. Neither leaves the workflow pending while its segment is retried.
func TestSleepUntilOutOfRange(t *testing.T) {
	t.Parallel()
	e := setup(t)
	far := workflow.Define("test.sleep.far", func(wf *workflow.Context, _ struct{}) (string, error) {
		wf.SleepUntil(time.Date(20000, 1, 1, 0, 0, 0, 0, time.UTC))
		return "woke", nil
	})
	past := workflow.Define("test.sleep.past", func(wf *workflow.Context, _ struct{}) (string, error) {
		wf.SleepUntil(time.Date(-5, 1, 1, 0, 0, 0, 0, time.UTC))
		return "woke", nil
	})
	e.startWorker(t, func(w *worker.Worker) {
		must(t, workflow.Register(w, far))
		must(t, workflow.Register(w, past))
	})
	e.startScheduler(t)
	for _, c := range []struct {
		def   *workflow.Workflow[struct{}, string]
		state jetflow.State
		text  string
	}{
		{far, jetflow.Failed, jetflow.ErrBadArgs.Error()},
		{past, jetflow.Success, `"woke"`},
	} {
		endsAs(t, e, c.def, c.state, c.text)
	}
}

// Restart of a workflow whose definition is deprecated is refused with
// ErrDefinitionInactive and leaves nothing in the journal under the new id
// (it copied the steps that succeeded there first, for good); Restart of a
// plain run is producer.ErrNotWorkflow.
func TestRestartRefusedLeavesNoJournal(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	def := workflow.Define("test.restart.inactive", func(wf *workflow.Context, _ struct{}) (string, error) {
		if _, err := workflow.Step(wf, "a", func(context.Context) (int, error) { return 1, nil }); err != nil {
			return "", err
		}
		_, err := workflow.Step(wf, "b", func(context.Context) (int, error) { return 0, errors.New("b fails") })
		return "", err
	})
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	id, err := workflow.Start(ctx, e.P, def, struct{}{})
	must(t, err)
	if r := e.wait(t, id); r.State != jetflow.Failed {
		t.Fatalf("workflow %s", r.State)
	}
	must(t, workflow.SetDefinitionState(ctx, e.P, def.Name(), workflow.DefinitionDeprecated))
	if _, err := workflow.Restart(ctx, e.P, id, workflow.WithID("restarted-1")); !errors.Is(err, workflow.ErrDefinitionInactive) {
		t.Fatalf("restart of a deprecated definition's workflow: %v", err)
	}
	kv, err := e.JS.KeyValue(ctx, "jetflow_journal")
	must(t, err)
	keys, err := kv.ListKeysFiltered(ctx, "restarted-1.>")
	must(t, err)
	for k := range keys.Keys() {
		t.Errorf("journal key %s left by a refused restart", k)
	}
	plain, err := e.P.Enqueue(ctx, jetflow.Call{Name: "test.plain", Args: 1}, producerWithID("plain-1"))
	must(t, err)
	must(t, e.P.Cancel(ctx, plain))
	if _, err := workflow.Restart(ctx, e.P, plain); !errors.Is(err, producerErrNotWorkflow) || !errors.Is(err, workflow.ErrBadRecord) {
		t.Fatalf("restart of a plain run: %v", err)
	}
	if _, err := workflow.Get(ctx, e.P, plain); !errors.Is(err, producerErrNotWorkflow) {
		t.Fatalf("Get of a plain run: %v", err)
	}
	if st, err := workflow.StepsFunc(e.P)(ctx, plain); st != nil || err != nil {
		t.Fatalf("StepsFunc of a plain run: %v %v", st, err)
	}
}

// A replay whose code ends before a step the journal holds (it took
// another path) fails the workflow with ErrNondeterministic naming the
// step, as a replay that meets another step does, instead of ending as a
// success with what that step waited for dropped.
func TestNondeterministicEarlyEndDetected(t *testing.T) {
	t.Parallel()
	e := setup(t)
	first := func(wf *workflow.Context) error {
		_, err := workflow.Step(wf, "reserve", func(ctx context.Context) (int, error) { return 1, nil })
		return err
	}
	v1 := workflow.Define("test.nondet.early", func(wf *workflow.Context, _ struct{}) (string, error) {
		if err := first(wf); err != nil {
			return "", err
		}
		return workflow.AwaitEvent[string](wf, "approved", 0)
	})
	v2 := workflow.Define("test.nondet.early", func(wf *workflow.Context, _ struct{}) (string, error) {
		if err := first(wf); err != nil {
			return "", err
		}
		return "done without approval", nil
	})
	w1 := e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, v1)) })
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, v1, struct{}{})
	must(t, err)
	e.waiting(t, id)
	must(t, w1.Stop(ctx))
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, v2)) })
	must(t, workflow.SendEvent(ctx, e.P, id, "approved", "yes"))
	r := e.wait(t, id)
	if r.State != jetflow.Failed || !strings.Contains(r.Error, workflow.ErrNondeterministic.Error()) ||
		!strings.Contains(r.Error, `step 2 is event "approved"`) {
		t.Fatalf("workflow %s %s: %s", r.State, r.Result, r.Error)
	}
}

// A step name the journal cannot keep as it is (longer than MaxStepName,
// or not valid UTF-8, which JSON would turn into another name so that
// every replay found a step of another name) fails the workflow with
// ErrInvalidStepName before the step runs.
func TestInvalidStepNameFailsBeforeTheStepRuns(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var ran atomic.Int32
	mk := func(wfName, stepName string) *workflow.Workflow[struct{}, string] {
		return workflow.Define(wfName, func(wf *workflow.Context, _ struct{}) (string, error) {
			_, err := workflow.Step(wf, stepName, func(context.Context) (int, error) { ran.Add(1); return 1, nil })
			return "done", err
		})
	}
	long := mk("test.stepname.long", strings.Repeat("s", workflow.MaxStepName+1))
	bad := mk("test.stepname.utf8", "step\xff")
	ok := mk("test.stepname.ok", strings.Repeat("s", workflow.MaxStepName))
	e.startWorker(t, func(w *worker.Worker) {
		must(t, workflow.Register(w, long))
		must(t, workflow.Register(w, bad))
		must(t, workflow.Register(w, ok))
	})
	for _, c := range []struct {
		def   *workflow.Workflow[struct{}, string]
		state jetflow.State
		text  string
	}{
		{long, jetflow.Failed, workflow.ErrInvalidStepName.Error()},
		{bad, jetflow.Failed, workflow.ErrInvalidStepName.Error()},
		{ok, jetflow.Success, `"done"`},
	} {
		endsAs(t, e, c.def, c.state, c.text)
	}
	if n := ran.Load(); n != 1 {
		t.Errorf("steps ran %d times, want 1 (only the valid name's)", n)
	}
}

// endsAs starts def and checks that it ends in state with text in its
// error or result.
func endsAs(t *testing.T, e *env, def *workflow.Workflow[struct{}, string], state jetflow.State, text string) {
	t.Helper()
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, def, struct{}{})
	must(t, err)
	r, err := e.P.Wait(ctx, id)
	if err != nil {
		t.Fatalf("%s: did not end: %v", def.Name(), err)
	}
	if r.State != state || !strings.Contains(r.Error+string(r.Result), text) {
		t.Errorf("%s: %s %s %q, want %s with %s", def.Name(), r.State, r.Result, r.Error, state, text)
	}
}
