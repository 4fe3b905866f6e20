package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/retrier"
	"github.com/jetflow-dev/jetflow/worker"
)

// The retrier's internal functions, which the worker never fails for want
// of attempts, read "unlimited" under MAX ATTEMPTS, not 2147483647; the
// demo's read their numbers. --json keeps the number
// (kv.UnlimitedAttempts).
func TestFunctionsListShowsUnlimitedAttempts(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	e.serveDemo(t)
	_, js := e.Connect()
	w, err := worker.New(context.Background(), js, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := retrier.New(e.P, retrier.Options{}).Register(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	var table string
	testserver.Eventually(t, 20*time.Second, "functions list shows the retrier's and the demo's functions", func() bool {
		table, _ = mustCLI(ctx, t, "functions", "list", "--url", e.URL)
		return strings.Contains(table, retrier.StepFunction) && strings.Contains(table, "demo.hello")
	})
	// Columns: FUNCTION KIND WORKERS CONCURRENCY MAX-ATTEMPTS ...
	want := map[string]string{retrier.StartFunction: "unlimited", retrier.StepFunction: "unlimited", "demo.report": "1"}
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if w, ok := want[f[0]]; ok {
			if f[4] != w {
				t.Errorf("%s: max attempts %q, want %q:\n%s", f[0], f[4], w, table)
			}
			delete(want, f[0])
		}
	}
	if len(want) > 0 || strings.Contains(table, "2147483647") {
		t.Errorf("functions list, missing %v or showing 2147483647:\n%s", want, table)
	}
	out, _ := mustCLI(ctx, t, "functions", "list", "--json", "--url", e.URL)
	var infos []kv.FunctionInfo
	if err := json.Unmarshal([]byte(out), &infos); err != nil {
		t.Fatalf("functions list --json printed %q: %v", out, err)
	}
	for _, fi := range infos {
		if fi.Name == retrier.StepFunction && fi.MaxAttempts != kv.UnlimitedAttempts {
			t.Errorf("--json: %s maxAttempts %d, want kv.UnlimitedAttempts", fi.Name, fi.MaxAttempts)
		}
	}
}
