package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
)

type cliFlowIn struct {
	User string `json:"user"`
}

type cliApproval struct {
	By string `json:"by"`
}

// A workflow that waits for an approval event, then greets.
var cliFlow = workflow.Define("cli.approve", func(wf *workflow.Context, in cliFlowIn) (string, error) {
	if _, err := workflow.Step(wf, "prepare", func(context.Context) (string, error) { return "ok", nil }); err != nil {
		return "", err
	}
	a, err := workflow.AwaitEvent[cliApproval](wf, "approved", time.Hour)
	if err != nil {
		return "", err
	}
	return "hello " + in.User + ", approved by " + a.By, nil
})

// A workflow that fails with a step's typed error (no event sent).
var cliTimeout = workflow.Define("cli.timeout", func(wf *workflow.Context, _ cliFlowIn) (string, error) {
	return workflow.AwaitEvent[string](wf, "never", -1)
})

// jetflow workflows get shows a waiting workflow and its steps; send-event
// resumes it; get --json then shows it succeeded; cancel and restart answer
// for workflows that cannot.
func TestWorkflowsCommands(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	_, js := e.Connect()
	w, err := worker.New(context.Background(), js, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := workflow.Register(w, cliFlow); err != nil {
		t.Fatal(err)
	}
	if err := workflow.Register(w, cliTimeout); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})
	_, pjs := e.Connect()
	p, err := producer.New(context.Background(), pjs, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := workflow.Start(context.Background(), p, cliFlow, cliFlowIn{User: "ann"}, workflow.WithID("approve-1"))
	if err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 20*time.Second, "workflow waiting for its event", func() bool {
		out, _ := mustCLI(ctx, t, "workflows", "get", id, "--url", e.URL)
		return strings.Contains(out, "waiting for") && strings.Contains(out, "approved") && strings.Contains(out, "prepare")
	})
	if out, _ := mustCLI(ctx, t, "workflows", "send-event", id, "approved", `{"by":"bob"}`, "--url", e.URL); !strings.Contains(out, "event approved sent") {
		t.Fatalf("send-event: %q", out)
	}
	var st workflow.Status
	testserver.Eventually(t, 20*time.Second, "workflow ended", func() bool {
		out, _ := mustCLI(ctx, t, "workflows", "get", id, "--json", "--url", e.URL)
		return json.Unmarshal([]byte(out), &st) == nil && st.Run != nil && st.Run.State.Terminal()
	})
	if st.Run.State != jetflow.Success || string(st.Run.Result) != `"hello ann, approved by bob"` {
		t.Fatalf("workflow ended %s with %s (%s)", st.Run.State, st.Run.Result, st.Run.Error)
	}
	// A failed workflow's error keeps its code through get --json.
	tid, err := workflow.Start(context.Background(), p, cliTimeout, cliFlowIn{}, workflow.WithID("timeout-1"))
	if err != nil {
		t.Fatal(err)
	}
	var tst workflow.Status
	testserver.Eventually(t, 20*time.Second, "workflow failed", func() bool {
		out, _ := mustCLI(ctx, t, "workflows", "get", tid, "--json", "--url", e.URL)
		return json.Unmarshal([]byte(out), &tst) == nil && tst.Run != nil && tst.Run.State.Terminal()
	})
	if tst.ErrorCode != "eventTimeout" || !errors.Is(tst.Err(), workflow.ErrEventTimeout) {
		t.Errorf("get --json of a failed workflow: state %s, code %q, Err %v", tst.Run.State, tst.ErrorCode, tst.Err())
	}
	if out, _ := mustCLI(ctx, t, "workflows", "cancel", id, "--url", e.URL); !strings.Contains(out, "had already ended (success)") {
		t.Fatalf("cancel of an ended workflow: %q", out)
	}
	if _, errOut, err := cli(ctx, t, "workflows", "restart", id, "--url", e.URL); err == nil || !strings.Contains(errOut+err.Error(), "not restartable") && !strings.Contains(errOut+err.Error(), "success") {
		t.Fatalf("restart of a succeeded workflow: %v %q", err, errOut)
	}
	if _, _, err := cli(ctx, t, "workflows", "send-event", id, "approved", `not json`, "--url", e.URL); err == nil {
		t.Fatal("send-event with a payload that is not JSON: no error")
	}
	// The definition's lifecycle.
	if out, _ := mustCLI(ctx, t, "workflows", "definition", "cli.approve", "deprecated", "--url", e.URL); !strings.Contains(out, "cli.approve is deprecated") {
		t.Fatalf("definition deprecated: %q", out)
	}
	if _, err := workflow.Start(context.Background(), p, cliFlow, cliFlowIn{User: "zed"}); !errors.Is(err, workflow.ErrDefinitionInactive) {
		t.Fatalf("start of a deprecated definition: %v", err)
	}
	if out, _ := mustCLI(ctx, t, "workflows", "definition", "cli.approve", "active", "--url", e.URL); !strings.Contains(out, "is active") {
		t.Fatalf("definition active: %q", out)
	}
}

// A workflow whose step name and error are hostile terminal text.
var cliEvilFlow = workflow.Define("cli.evil", func(wf *workflow.Context, _ struct{}) (string, error) {
	_, err := workflow.Step(wf, evil, func(context.Context) (int, error) { return 0, errors.New(evil) })
	return "", err
})

// jetflow workflows with hostile arguments: a plain run is neither shown
// nor canceled as a workflow (it was: "workflow x ... no step journaled
// yet", and cancel canceled the run); a definition name that is not one
// is jetflow.ErrInvalidName (it was "nats: invalid key"); --id elsewhere
// than restart is a usage error (it was ignored); send-event --json prints
// JSON (it printed text); workflow data is escaped on the terminal.
func TestWorkflowsCommandsHostileArguments(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	u := []string{"--url", e.URL}
	_, js := e.Connect()
	w, err := worker.New(context.Background(), js, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := workflow.Register(w, cliFlow); err != nil {
		t.Fatal(err)
	}
	if err := workflow.Register(w, cliEvilFlow); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})
	// A plain run, pending (nothing serves it).
	plain, err := e.P.Enqueue(ctx, jetflow.Call{Name: "cli.unserved", Args: 1}, producer.WithID("plain-1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"get", "cancel"} {
		code, out, errOut := runCLI(ctx, append([]string{"workflows", verb, plain}, u...)...)
		if code != exitError || !strings.Contains(errOut, "not a workflow") {
			t.Errorf("workflows %s of a plain run: exit %d\nstdout: %s\nstderr: %s", verb, code, out, errOut)
		}
	}
	if r, err := e.P.Get(ctx, plain); err != nil || r.State != jetflow.Pending {
		t.Fatalf("the plain run after workflows cancel: %v %v", r, err)
	}
	for _, name := range []string{"a*b", ">", "", "a..b"} {
		code, _, errOut := runCLI(ctx, append([]string{"workflows", "definition", name}, u...)...)
		if code != exitError || !strings.Contains(errOut, "invalid function name") {
			t.Errorf("workflows definition %q: exit %d, %s", name, code, errOut)
		}
	}
	if code, _, errOut := runCLI(ctx, append([]string{"workflows", "get", "x", "--id", "y"}, u...)...); code != exitUsage {
		t.Errorf("workflows get --id: exit %d, %s", code, errOut)
	}
	id, err := workflow.Start(ctx, e.P, cliFlow, cliFlowIn{User: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 20*time.Second, "workflow waiting", func() bool {
		st, err := workflow.Get(ctx, e.P, id)
		return err == nil && st.Waiting
	})
	out, _ := mustCLI(ctx, t, "workflows", append([]string{"send-event", id, "approved", `{"by":"bob"}`, "--json"}, u...)...)
	var sent struct {
		Workflow string `json:"workflow"`
		Event    string `json:"event"`
		Sent     bool   `json:"sent"`
	}
	if err := json.Unmarshal([]byte(out), &sent); err != nil || sent.Workflow != id || sent.Event != "approved" || !sent.Sent {
		t.Errorf("send-event --json printed %q (%v)", out, err)
	}
	// A payload with invalid UTF-8 in a string: get --json is still
	// UTF-8 (strict JSON parsers refuse it otherwise).
	id2, err := workflow.Start(ctx, e.P, cliFlow, cliFlowIn{User: "bea"})
	if err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 20*time.Second, "workflow waiting", func() bool {
		st, err := workflow.Get(ctx, e.P, id2)
		return err == nil && st.Waiting
	})
	mustCLI(ctx, t, "workflows", append([]string{"send-event", id2, "approved", "{\"by\":\"b\xffob\"}"}, u...)...)
	if _, err := e.P.Wait(ctx, id2); err != nil {
		t.Fatal(err)
	}
	out, _ = mustCLI(ctx, t, "workflows", append([]string{"get", id2, "--json"}, u...)...)
	if !utf8.ValidString(out) || !json.Valid([]byte(out)) {
		t.Errorf("workflows get --json is not valid UTF-8 JSON: %q", out)
	}
	evilID, err := workflow.Start(ctx, e.P, cliEvilFlow, struct{}{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.P.Wait(ctx, evilID); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(ctx, append([]string{"workflows", "get", evilID}, u...)...)
	if bad, ok := terminalControls(out + errOut); ok || code != exitOK || !strings.Contains(out, `\x1b]0;PWNED`) {
		t.Errorf("workflows get writes a workflow's control characters (%q), exit %d:\n%s%s", bad, code, out, errOut)
	}
}

// printWorkflow says what a workflow waits for only while it has not
// ended: a workflow canceled (or timed out) while it waited keeps the
// Waiting of its last segment, and was shown as "canceled, waiting for
// step 1 (event): ...".
func TestPrintWorkflowEndedIsNotWaiting(t *testing.T) {
	t.Parallel()
	st := &workflow.Status{
		Run:     &jetflow.Run{ID: "wf-1", Name: "cli.approve", State: jetflow.Canceled, Error: "jetflow: run canceled"},
		Waiting: true,
		Waits:   []string{"step 1 (event): event approved"},
	}
	var b strings.Builder
	if err := printWorkflow(&b, st); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); strings.Contains(out, "waiting for") || !strings.Contains(out, "state     canceled\n") {
		t.Fatalf("a canceled workflow:\n%s", out)
	}
	st.Run.State = jetflow.InProgress
	b.Reset()
	if err := printWorkflow(&b, st); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "state     inProgress, waiting for step 1 (event): event approved\n") {
		t.Fatalf("a waiting workflow:\n%s", out)
	}
}
