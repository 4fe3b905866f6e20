package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/trigger"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

func TestTriggersManageThroughCLI(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	url := "--url=" + e.URL
	_, js := e.Connect()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		t.Fatal(err)
	}
	out, _ := mustCLI(ctx, t, "triggers", "list", url)
	if !strings.Contains(out, "no triggers") {
		t.Fatalf("empty list: %s", out)
	}
	out, _ = mustCLI(ctx, t, "triggers", "add", "ship", "orders.ship", "--stream", "ORDERS", "--subject", "orders.created", "--window", "50", url)
	if !strings.Contains(out, "trigger ship added: stream ORDERS orders.created -> orders.ship (window 50)") {
		t.Fatalf("add: %s", out)
	}
	mustCLI(ctx, t, "triggers", "add", "signups", "users.onboard", "--subject", "events.signup", "--workflow", url)
	if _, _, err := cli(ctx, t, "triggers", "add", "ship", "orders.ship", "--stream", "ORDERS", url); !errors.Is(err, trigger.ErrExists) {
		t.Fatalf("add twice: %v", err)
	}
	if code, _, errw := runCLI(ctx, "triggers", "add", "x", "f", url); code != exitUsage || !strings.Contains(errw, "--stream or --subject") {
		t.Fatalf("add without a source: exit %d %q", code, errw)
	}
	if _, _, err := cli(ctx, t, "triggers", "add", "bad.name", "f", "--stream", "ORDERS", url); !errors.Is(err, trigger.ErrInvalid) {
		t.Fatalf("add invalid: %v", err)
	}

	// A worker process with a trigger runner: the trigger runs without a
	// restart, and its counters show in the list.
	_, wjs := e.Connect()
	w, err := worker.New(ctx, wjs, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ship := jetflow.Define[map[string]any]("orders.ship")
	worker.Handle(w, ship, func(context.Context, *worker.Job[map[string]any]) error { return nil })
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop(context.Background()) }()
	r := trigger.New(w.Producer(), trigger.Config{StatsEvery: 50 * time.Millisecond})
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Stop(context.Background()) }()
	for i := 0; i < 3; i++ {
		if _, err := js.Publish(ctx, "orders.created", []byte(`{"order":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	var list []trigger.Info
	testserver.Eventually(t, 30*time.Second, "three runs counted", func() bool {
		out, _ := mustCLI(ctx, t, "triggers", "list", "--json", url)
		list = nil
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("list --json: %v\n%s", err, out)
		}
		return len(list) == 2 && list[0].Name == "ship" && list[0].Totals.Runs == 3
	})
	if list[1].Name != "signups" || list[1].Workflow != "users.onboard" || list[1].Function != "users.onboard.start" || list[1].Stream != "" {
		t.Fatalf("workflow trigger: %+v", list[1])
	}
	out, _ = mustCLI(ctx, t, "triggers", "list", url)
	for _, w := range []string{"NAME", "SOURCE", "RUNS", "ship", "stream ORDERS orders.created", "orders.ship", "running",
		"signups", "subjects events.signup", "workflow users.onboard", "runtime"} {
		if !strings.Contains(out, w) {
			t.Errorf("triggers list lacks %q:\n%s", w, out)
		}
	}

	out, _ = mustCLI(ctx, t, "triggers", "pause", "ship", "--json", url)
	var d trigger.Def
	if err := json.Unmarshal([]byte(out), &d); err != nil || !d.Paused || d.Window != 50 {
		t.Fatalf("pause --json: %v %s", err, out)
	}
	if def, err := trigger.Get(ctx, w.Producer(), "ship"); err != nil || !def.Paused {
		t.Fatalf("after the CLI pause, trigger.Get: %+v %v", def, err)
	}
	out, _ = mustCLI(ctx, t, "triggers", "resume", "ship", url)
	if !strings.Contains(out, "trigger ship resumed") {
		t.Fatalf("resume: %s", out)
	}
	// The resume is stored, seen by the trigger package, and acted on: a
	// new message makes a run.
	if def, err := trigger.Get(ctx, w.Producer(), "ship"); err != nil || def.Paused || def.Window != 50 {
		t.Fatalf("after the CLI resume, trigger.Get: %+v %v", def, err)
	}
	if _, err := js.Publish(ctx, "orders.created", []byte(`{"order":2}`)); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 30*time.Second, "the resumed trigger's fourth run", func() bool {
		infos, err := trigger.List(ctx, w.Producer())
		if err != nil {
			return false
		}
		for _, ti := range infos {
			if ti.Name == "ship" {
				if ti.Paused {
					t.Fatalf("after the CLI resume, trigger.List: ship paused: %+v", ti)
				}
				return ti.Totals.Runs == 4 && ti.State() == "running"
			}
		}
		t.Fatalf("after the CLI resume, trigger.List lacks ship: %+v", infos)
		return false
	})
	mustCLI(ctx, t, "triggers", "delete", "signups", url)
	if _, err := js.Stream(ctx, "JETFLOW_TRIGGER_signups"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("capture stream after delete: %v", err)
	}
	code, _, errw := runCLI(ctx, "triggers", "pause", "signups", url)
	if code != exitError || !strings.Contains(errw, "no such trigger") {
		t.Fatalf("pause deleted: exit %d %q", code, errw)
	}
	if _, _, err := cli(ctx, t, "triggers", "delete", "nope", url); !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("delete unknown: %v", err)
	}
	if code, _, _ := runCLI(ctx, "triggers", "frobnicate"); code != exitUsage {
		t.Fatalf("unknown subcommand: exit %d", code)
	}
}
