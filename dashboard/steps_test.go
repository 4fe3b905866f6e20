package dashboard_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/dashboard"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
)

type stepsIn struct {
	N int `json:"n"`
}

// A workflow that runs two steps, then waits for an event.
var stepsFlow = workflow.Define("dash.flow", func(wf *workflow.Context, in stepsIn) (int, error) {
	a, err := workflow.Step(wf, "fetch", func(context.Context) (int, error) { return in.N, nil })
	if err != nil {
		return 0, err
	}
	b, err := workflow.Step(wf, "double", func(context.Context) (int, error) { return 2 * a, nil })
	if err != nil {
		return 0, err
	}
	if _, err := workflow.AwaitEvent[struct{}](wf, "go", time.Hour); err != nil {
		return 0, err
	}
	return b, nil
})

// A workflow's run page shows its steps (Config.Steps, from
// workflow.StepsFunc) and what it waits for; /api/runs/{id}/steps answers
// them, and nothing for a run that is not a workflow.
func TestWorkflowSteps(t *testing.T) {
	t.Parallel()
	chromiumPath(t)
	ts := testserver.Start(t)
	ctx := context.Background()
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, wjs := ts.Connect()
	w, err := worker.New(ctx, wjs, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := workflow.Register(w, stepsFlow); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})
	e := setupOn(t, ts, dashboard.Config{Steps: workflow.StepsFunc(p)})
	id, err := workflow.Start(ctx, p, stepsFlow, stepsIn{N: 21}, workflow.WithID("flow-1"))
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Steps *workflow.Status `json:"steps"`
	}
	testserver.Eventually(t, 20*time.Second, "the workflow waits for its event", func() bool {
		getJSON(t, "GET", e.URL+"/api/runs/"+id+"/steps", http.StatusOK, &res)
		return res.Steps != nil && res.Steps.Waiting && len(res.Steps.Steps) == 3
	})
	for i, want := range []string{"fetch", "double"} {
		if s := res.Steps.Steps[i]; s.Name != want || s.State != workflow.StepDone {
			t.Fatalf("step %d = %+v, want %s done", i, s, want)
		}
	}
	plain := e.enqueue(t, okFn.With(testArgs{N: 1}), "plain-1")
	res.Steps = nil
	getJSON(t, "GET", e.URL+"/api/runs/"+plain+"/steps", http.StatusOK, &res)
	if res.Steps != nil {
		t.Fatalf("steps of a plain run: %+v", res.Steps)
	}

	b := startBrowser(t)
	b.navigate(e.URL + "/runs/" + id)
	b.waitFor("the steps table", `document.querySelectorAll('#steps tbody tr').length === 3 && !document.getElementById('steps-section').hidden`)
	html := b.dom()
	for _, want := range []string{`data-step="1"`, "fetch", "double", "Waiting for", `class="bar state-done"`} {
		if !strings.Contains(html, want) {
			t.Fatalf("run page lacks %q:\n%s", want, html)
		}
	}
	dir := t.TempDir()
	if keep := os.Getenv("JETFLOW_DASHBOARD_SCREENSHOTS"); keep != "" {
		dir = keep
	}
	shot := filepath.Join(dir, "workflow-steps.png")
	b.screenshot(shot)
	t.Logf("screenshot %s", shot)
	// Live: the event ends the workflow, and the page follows.
	if err := workflow.SendEvent(ctx, p, id, "go", struct{}{}); err != nil {
		t.Fatal(err)
	}
	b.waitFor("the workflow's success", `document.getElementById('run-state').textContent.includes('success') && document.getElementById('steps-waiting').hidden`)
}
