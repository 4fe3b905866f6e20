package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
)

// dev --json prints only JSON lines on stdout: where it serves, then each
// run change as its record; its text goes to stderr.
func TestDevJSON(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	out, errw := mustCLI(ctx, t, "dev", "--once", "--json", "--port", "0", "--data", t.TempDir(), "--sync-every", testSyncEvery.String())
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var first struct {
		NATSURL string `json:"nats_url"`
		Prefix  string `json:"prefix"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || !strings.HasPrefix(first.NATSURL, "nats://127.0.0.1:") || first.Prefix != "jetflow" {
		t.Fatalf("first line %q: %+v %v", lines[0], first, err)
	}
	succeeded := map[string]bool{}
	for _, l := range lines[1:] {
		var r jetflow.Run
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.ID == "" || !r.State.Valid() {
			t.Fatalf("line %q is not a run record: %v", l, err)
		}
		if r.State == jetflow.Success {
			succeeded[r.ID] = true
		}
	}
	if len(succeeded) != 5 {
		t.Errorf("%d demo runs printed as succeeded, want 5:\n%s", len(succeeded), out)
	}
	if !strings.Contains(errw, "demo runs ended: 5 success") {
		t.Errorf("stderr lacks the end of the demo:\n%s", errw)
	}
}

// dashboard --json prints where it serves as one JSON object.
func TestDashboardJSON(t *testing.T) {
	t.Parallel()
	e := setup(t)
	out, stop := startCommand(t, "dashboard", "--url", e.URL, "--listen", "127.0.0.1:0", "--json")
	var info struct {
		Dashboard string `json:"dashboard"`
		Login     string `json:"login"`
	}
	testserver.Eventually(t, 30*time.Second, "the dashboard's JSON line", func() bool {
		line, _, _ := strings.Cut(out.String(), "\n")
		return json.Unmarshal([]byte(line), &info) == nil && info.Dashboard != ""
	})
	if !strings.HasPrefix(info.Dashboard, "http://127.0.0.1:") || info.Login != "none" {
		t.Fatalf("dashboard --json = %+v", info)
	}
	var page struct {
		Runs []any `json:"runs"`
	}
	httpGetJSON(t, info.Dashboard+"api/runs", &page)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if strings.Count(strings.TrimSpace(out.String()), "\n") != 0 {
		t.Errorf("stdout has more than the JSON line:\n%s", out.String())
	}
}

// bench --json prints the core figures as a JSON array, one object per
// mode, with each ratio beside raw JetStream.
func TestBenchJSON(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	out, errw := mustCLI(ctx, t, "bench", "--quick", "--json", "--mode", "interval", "--skip-claimfirst", "-n", "500", "--lateness-runs", "20", "--sync-every", testSyncEvery.String())
	var figs []map[string]any
	if err := json.Unmarshal([]byte(out), &figs); err != nil {
		t.Fatalf("bench --json printed %q: %v", out, err)
	}
	if len(figs) != 1 || figs[0]["mode"] != "interval" {
		t.Fatalf("bench --json = %v", figs)
	}
	for _, k := range []string{"raw_publish_consume_per_s", "end_to_end_per_s", "end_to_end_ratio", "lateness_p99_ns"} {
		if v, ok := figs[0][k].(float64); !ok || v <= 0 {
			t.Errorf("bench --json %s = %v", k, figs[0][k])
		}
	}
	if !strings.Contains(errw, "SUMMARY") {
		t.Errorf("the text (with SUMMARY) goes to stderr; stderr:\n%s", errw)
	}
}
