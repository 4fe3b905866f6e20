// Package clients_test runs the tests of the producer clients in other
// languages (clients/typescript, clients/python) from `go test ./...`, so
// that the README's one test command, and CI, run them: each script
// installs its dependencies (npm, pip), runs the shared wire-format vectors
// and the integration tests against real servers and the Go peer.
package clients_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestTypeScriptClient(t *testing.T) {
	t.Parallel()
	runScript(t, "typescript/test.sh", "node", "npm")
}

func TestPythonClient(t *testing.T) {
	t.Parallel()
	runScript(t, "python/test.sh", "python3")
}

// runScript runs a client's test script; its output is the test's log.
// A machine without the language's tools fails the test, naming them.
func runScript(t *testing.T, script string, tools ...string) {
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s needs %s: %v", script, tool, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Env = append(os.Environ(), "CI=1")
	out, err := cmd.CombinedOutput()
	t.Logf("%s:\n%s", script, out)
	if err != nil {
		t.Fatalf("%s: %v", script, err)
	}
}
