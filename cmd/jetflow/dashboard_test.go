package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/cmd/jetflow/internal/demo"
	"github.com/jetflow-dev/jetflow/internal/testserver"
)

// startCommand runs a long-running command until the test ends and
// returns its output, growing, and a function that stops it and returns
// its error.
func startCommand(t *testing.T, name string, args ...string) (*syncBuffer, func() error) {
	t.Helper()
	out, _, stop := startCommandStderr(t, name, args...)
	return out, stop
}

// startCommandStderr is startCommand that also returns the command's
// stderr, growing.
func startCommandStderr(t *testing.T, name string, args ...string) (*syncBuffer, *syncBuffer, func() error) {
	t.Helper()
	c := commands[name]
	ctx, cancel := context.WithCancel(context.Background())
	var out, errw syncBuffer
	done := make(chan error, 1)
	go func() { done <- c.run(withOutput(ctx, &out, &errw), args) }()
	var stopped bool
	var err error
	stop := func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("jetflow %s did not stop within 30s", name)
			}
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return &out, &errw, stop
}

// waitDashboard waits for the dashboard's banner and returns its URL.
func waitDashboard(t *testing.T, out *syncBuffer) string {
	t.Helper()
	var url string
	testserver.Eventually(t, 30*time.Second, "the dashboard banner", func() bool {
		for _, line := range strings.Split(out.String(), "\n") {
			if u, ok := strings.CutPrefix(line, "jetflow dashboard: "); ok {
				url = strings.TrimSpace(u)
				return true
			}
		}
		return false
	})
	return url
}

func httpGetJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, body)
	}
}

func TestDashboardCommandServesRuns(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	mustCLI(ctx, t, "enqueue", "demo.hello", `{"name":"web"}`, "--id", "web1", "--url", e.URL)
	out, stop := startCommand(t, "dashboard", "--url", e.URL, "--listen", "127.0.0.1:0", "--base-path", "/jf")
	url := waitDashboard(t, out)
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasSuffix(url, "/jf/") {
		t.Fatalf("dashboard URL %q", url)
	}
	var page struct {
		Runs []struct {
			ID    string `json:"id"`
			Name  string `json:"name"`
			State string `json:"state"`
		} `json:"runs"`
	}
	httpGetJSON(t, url+"api/runs", &page)
	if len(page.Runs) != 1 || page.Runs[0].ID != "web1" || page.Runs[0].Name != "demo.hello" || page.Runs[0].State != "pending" {
		t.Fatalf("runs: %+v", page.Runs)
	}
	var crons struct {
		Crons []any `json:"crons"`
	}
	httpGetJSON(t, url+"api/crons", &crons)

	// An open events stream does not hold the shutdown.
	resp, err := http.Get(url + "api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := stop(); err != nil {
		t.Fatalf("dashboard: %v\n%s", err, out.String())
	}
}

func TestDevServesTheDashboard(t *testing.T) {
	t.Parallel()
	out, stop := startCommand(t, "dev", "--no-demo", "--port", "0", "--data", t.TempDir(),
		"--sync-every", testSyncEvery.String(), "--http", "127.0.0.1:0")
	url := waitDashboard(t, out)
	var fns struct {
		Functions []struct {
			Name string `json:"name"`
		} `json:"functions"`
	}
	httpGetJSON(t, url+"api/functions", &fns)
	var names []string
	for _, f := range fns.Functions {
		names = append(names, f.Name)
	}
	want := slices.Sorted(slices.Values(demo.Names))
	if !slices.Equal(names, want) {
		t.Fatalf("functions %v, want the demo's %v", names, want)
	}
	if err := stop(); err != nil {
		t.Fatalf("dev: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "jetflow dev stopped") {
		t.Fatalf("dev output:\n%s", out.String())
	}
}
