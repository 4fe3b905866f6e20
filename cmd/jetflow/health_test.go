package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/testserver"
)

// jetflow dashboard and jetflow dev serve /livez and /readyz at the root,
// beside the dashboard (under its base path); dev's include its worker's
// and scheduler's checks.
func TestDashboardAndDevServeProbes(t *testing.T) {
	t.Parallel()
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	e := setup(t)
	out, _ := startCommand(t, "dashboard", "--url", e.URL, "--listen", "127.0.0.1:0", "--base-path", "/jf")
	root := strings.TrimSuffix(waitDashboard(t, out), "jf/")
	for _, path := range []string{"livez", "readyz"} {
		if code, body := get(root + path); code != http.StatusOK || !strings.Contains(body, `"status":"ok"`) {
			t.Errorf("dashboard /%s: %d %s", path, code, body)
		}
	}

	dout, _ := startCommand(t, "dev", "--no-demo", "--port", "0", "--data", t.TempDir(),
		"--sync-every", testSyncEvery.String(), "--http", "127.0.0.1:0")
	droot := waitDashboard(t, dout)
	testserver.Eventually(t, 20*time.Second, "jetflow dev ready", func() bool {
		code, body := get(droot + "readyz")
		return code == http.StatusOK && strings.Contains(body, "dev.worker.checks") && strings.Contains(body, "dev.scheduler.checks")
	})
	if code, body := get(droot + "livez"); code != http.StatusOK {
		t.Errorf("dev /livez: %d %s", code, body)
	}
}

// jetflow scheduler runs a scheduler serving /livez, /readyz and /scaling
// (the deploy recipe's scheduler, docs/deploy/scheduler.yaml): it becomes
// ready once it knows the lease holder, answers the scaling endpoint, and
// stops when its context ends (SIGTERM).
func TestSchedulerCommandServesProbesAndScaling(t *testing.T) {
	t.Parallel()
	e := setup(t)
	out, stop := startCommand(t, "scheduler", "--url", e.URL, "--listen", "127.0.0.1:0", "--id", "sched-cmd")
	var root string
	testserver.Eventually(t, 30*time.Second, "the scheduler's banner", func() bool {
		for _, line := range strings.Split(out.String(), "\n") {
			if u, ok := strings.CutPrefix(line, "scheduler: probes and scaling on "); ok {
				root = strings.TrimSpace(u)
				return true
			}
		}
		return false
	})
	status := func(path string) (int, string) {
		resp, err := http.Get(root + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testserver.Eventually(t, 30*time.Second, "the scheduler ready", func() bool {
		code, _ := status("/readyz")
		return code == http.StatusOK
	})
	if code, body := status("/livez"); code != http.StatusOK {
		t.Errorf("/livez: %d %s", code, body)
	}
	if code, body := status("/scaling?target=10"); code != http.StatusOK || !strings.Contains(body, `"desiredWorkers"`) {
		t.Errorf("/scaling: %d %s", code, body)
	}
	if err := stop(); err != nil {
		t.Errorf("jetflow scheduler ended with %v, want nil after its context ended", err)
	}
}
