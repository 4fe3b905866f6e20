package integration_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// TestWireFormatFromNodeJS runs docs/wire-format.md from another language:
// testdata/nodeclient/wire.mjs, on nats.js (installed from the npm registry
// into a temporary folder), publishes runs by hand and reads their records
// from the runs bucket with a KV watch, while a Go worker and scheduler
// serve them. It is skipped only where node or npm is missing or the
// package cannot be installed (no registry); it says why.
func TestWireFormatFromNodeJS(t *testing.T) {
	node, dir := nodeClient(t)
	srv, _, js := wireServer(t)
	p, calls := serveWire(t, js, js, js)
	checkNodeWire(t, runNodeWire(t, node, dir, srv.ClientURL(), "js", nil), p, calls)
}

// TestWireFormatFromNodeJSAsProducer runs the same script as the producer
// user of docs/permissions.md, on a nats-server process started with that
// file's configuration: a producer in another language needs no more than
// the permissions documented for the role (its JetStream and KV calls, the
// delayed run's two writes and the KV watch included).
func TestWireFormatFromNodeJSAsProducer(t *testing.T) {
	node, dir := nodeClient(t)
	url := startSecuredNATS(t, permissionsConf(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, ajs := connectAs(t, url, "admin")
	if err := streams.Provision(ctx, ajs, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	_, wjs := connectAs(t, url, "worker")
	_, sjs := connectAs(t, url, "scheduler")
	_, pjs := connectAs(t, url, "producer")
	p, calls := serveWire(t, wjs, sjs, pjs)
	env := []string{"NATS_USER=producer", "NATS_PASSWORD=" + rolePasswords["producer"]}
	checkNodeWire(t, runNodeWire(t, node, dir, url, "perm", env), p, calls)
}

// nodeClient installs nats.js (the versions testdata/nodeclient's lock
// file names) beside a copy of testdata/nodeclient and
// returns node's path and the folder; it skips the test where that cannot
// be done.
func nodeClient(t *testing.T) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not found: the nats.js producer is not tried")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm not found: the nats.js producer is not tried")
	}
	dir = t.TempDir()
	for _, f := range []string{"wire.mjs", "package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", "nodeclient", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The versions of package-lock.json, exactly.
	install := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		t.Skipf("npm install nats.js failed (no registry?): %v\n%s", err, out)
	}
	return node, dir
}

// serveWire starts a worker serving emails.send (on wjs) and a scheduler
// (on sjs), and returns a producer (on pjs) to read records with and the
// ids the handler ran, in order.
func serveWire(t *testing.T, wjs, sjs, pjs jetstream.JetStream) (*producer.Producer, chan string) {
	t.Helper()
	ctx := context.Background()
	p, err := producer.New(ctx, pjs, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(ctx, wjs, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	calls := make(chan string, 100)
	worker.Handle(w, wireSend, func(ctx context.Context, j *worker.Job[wireEmail]) error {
		calls <- j.ID()
		return j.SetResult("sent to " + j.Args.To)
	})
	startWithScheduler(t, w, sjs)
	return p, calls
}

// nodeResult is one line wire.mjs prints.
type nodeResult struct {
	Case      string       `json:"case"`
	ID        string       `json:"id"`
	Stream    string       `json:"stream"`
	Duplicate bool         `json:"duplicate"`
	Due       time.Time    `json:"due"`
	Record    *jetflow.Run `json:"record"`
	GetState  string       `json:"getState"` // read with a KV get once ended
}

// runNodeWire runs wire.mjs against url (env: more environment) and
// returns its results by case.
func runNodeWire(t *testing.T, node, dir, url, prefix string, env []string) map[string]nodeResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, node, "wire.mjs", url, prefix)
	run.Dir = dir
	run.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	run.Stderr = &stderr
	out, err := run.Output()
	if err != nil {
		t.Fatalf("node wire.mjs: %v\n%s%s", err, out, stderr.String())
	}
	got := map[string]nodeResult{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r nodeResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("node printed %q: %v", sc.Text(), err)
		}
		if r.Record == nil {
			t.Fatalf("case %s: run %s did not end within 30 s as seen from nats.js", r.Case, r.ID)
		}
		got[r.Case] = r
	}
	if len(got) != 4 {
		t.Fatalf("node printed %d cases, want 4:\n%s\n%s", len(got), out, stderr.String())
	}
	return got
}

// checkNodeWire checks what wire.mjs saw against what Go reads and what the
// handler ran.
func checkNodeWire(t *testing.T, got map[string]nodeResult, p *producer.Producer, calls chan string) {
	t.Helper()
	for _, r := range got {
		// What nats.js read is the record Go reads.
		g, err := p.Get(context.Background(), r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if g.State != r.Record.State || g.Error != r.Record.Error || string(g.State) != r.GetState {
			t.Fatalf("case %s: nats.js watched %s %q and got %q, Go reads %s %q", r.Case, r.Record.State, r.Record.Error, r.GetState, g.State, g.Error)
		}
	}
	now := got["now"]
	if now.Stream != "JETFLOW_FN" || !now.Duplicate {
		t.Errorf("now: stored in %q, second publish duplicate=%v; want JETFLOW_FN and true", now.Stream, now.Duplicate)
	}
	if r := now.Record; r.State != jetflow.Success || string(r.Result) != `"sent to a@b.c"` || r.MaxAttempts != 3 || r.Attempts != 1 {
		t.Errorf("now: record %s result %s attempts %d/%d; want success, \"sent to a@b.c\", 1/3", r.State, r.Result, r.Attempts, r.MaxAttempts)
	}
	if r := got["notjson"].Record; r.State != jetflow.Failed || !strings.Contains(r.Error, "bad arguments") || string(r.Args) != `"not json"` {
		t.Errorf("notjson: record %s %q args %s; want failed, bad arguments, the body kept as a string", r.State, r.Error, r.Args)
	}
	if r := got["badheader"].Record; r.State != jetflow.Failed || !strings.Contains(r.Error, `bad header Jetflow-Timeout: "soon"`) {
		t.Errorf("badheader: record %s %q; want failed naming the header", r.State, r.Error)
	}
	later := got["later"]
	if r := later.Record; r.State != jetflow.Success || r.StartedTime.Before(later.Due) {
		t.Errorf("later: record %s started %v, due %v; want success, not before due", r.State, r.StartedTime, later.Due)
	}
	// The handler ran once for each good run, never for the bad ones or
	// the duplicate.
	var ran []string
	for len(calls) > 0 {
		ran = append(ran, <-calls)
	}
	if want := []string{now.ID, later.ID}; strings.Join(ran, ",") != strings.Join(want, ",") {
		t.Errorf("handler ran for %v, want %v", ran, want)
	}
}
