package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/cmd/jetflow/internal/demo"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
)

// syncBuffer is a bytes.Buffer safe for the goroutines of a command.
type syncBuffer = testserver.Buffer

// cli runs one command in-process, as `jetflow <name> <args...>` would,
// and returns what it printed on stdout and stderr.
func cli(ctx context.Context, t *testing.T, name string, args ...string) (string, string, error) {
	t.Helper()
	c, ok := commands[name]
	if !ok {
		t.Fatalf("no command %q", name)
	}
	var out, errw syncBuffer
	err := c.run(withOutput(ctx, &out, &errw), args)
	return out.String(), errw.String(), err
}

// mustCLI is cli that fails the test on an error.
func mustCLI(ctx context.Context, t *testing.T, name string, args ...string) (string, string) {
	t.Helper()
	out, errw, err := cli(ctx, t, name, args...)
	if err != nil {
		t.Fatalf("jetflow %s %s: %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, out, errw)
	}
	return out, errw
}

type cliEnv struct {
	S   *embedded.Server
	URL string
	P   *producer.Producer
	t   *testing.T
}

// testSyncEvery is the fsync interval of the servers these tests start.
// nats-server v2.15.2 arms a new stream's sync timer before it stores the
// timer (filestore.go, setSyncTimer): with a 10 ms interval on a loaded
// machine the first sync can run in between, which -race reports. A 1 s
// interval leaves no such window; durability is not what these tests test.
const testSyncEvery = time.Second

// setup starts a real embedded server on file storage under t.TempDir(),
// stopped when the test ends.
func setup(t *testing.T) *cliEnv {
	t.Helper()
	s, err := embedded.Start(embedded.Options{Dir: t.TempDir(), SyncEvery: testSyncEvery})
	if err != nil {
		t.Fatal(err)
	}
	e := &cliEnv{S: s, URL: s.ClientURL(), t: t}
	t.Cleanup(s.Stop)
	_, js := e.Connect()
	e.P, err = producer.New(context.Background(), js, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Connect opens a client connection (another "process"), closed at cleanup.
func (e *cliEnv) Connect() (*nats.Conn, jetstream.JetStream) {
	e.t.Helper()
	nc, err := e.S.Connect()
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		e.t.Fatal(err)
	}
	return nc, js
}

// serveDemo starts a worker serving the demo functions until the test ends.
func (e *cliEnv) serveDemo(t *testing.T) {
	t.Helper()
	_, js := e.Connect()
	w, err := worker.New(context.Background(), js, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := demo.Register(w); err != nil {
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
}

// getJSON reads run id through `runs get --json`.
func (e *cliEnv) getJSON(ctx context.Context, t *testing.T, id string) *jetflow.Run {
	t.Helper()
	out, _ := mustCLI(ctx, t, "runs", "get", id, "--json", "--url", e.URL)
	var r jetflow.Run
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("runs get --json printed %q: %v", out, err)
	}
	return &r
}

func compact(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return b.String()
}

// testCtx is the context of one test's commands: long enough for a test's
// every step on a loaded machine (the outage tests alone wait out a 25 s
// outage, then up to 30 s for each of several steps, all under it), short
// enough that a command that hangs fails the test.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestEnqueueThenGetShowsTheRecord(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.serveDemo(t)
	ctx := testCtx(t)

	out, errw := mustCLI(ctx, t, "enqueue", "demo.hello", `{"name":"cli","steps":1}`, "--url", e.URL)
	id := strings.TrimSpace(out)
	if jetflow.ValidateRunID(id) != nil {
		t.Fatalf("enqueue printed %q, want a run id", out)
	}
	if errw != "" {
		t.Fatalf("enqueue warned although a worker serves demo.hello: %s", errw)
	}
	if _, err := e.P.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}

	r := e.getJSON(ctx, t, id)
	if r.ID != id || r.Name != "demo.hello" || r.State != jetflow.Success || r.Attempts != 1 {
		t.Fatalf("record = %+v", r)
	}
	if compact(t, r.Args) != `{"name":"cli","steps":1}` || compact(t, r.Result) != `{"greeting":"hello, cli"}` {
		t.Fatalf("args %s, result %s", r.Args, r.Result)
	}

	text, _ := mustCLI(ctx, t, "runs", "get", id, "--url", e.URL)
	for _, want := range []string{"id:           " + id, "function:     demo.hello", "state:        success",
		"attempts:     1", `result:       {"greeting":"hello, cli"}`, "completed:"} {
		if !strings.Contains(text, want) {
			t.Errorf("runs get output lacks %q:\n%s", want, text)
		}
	}
}

func TestEnqueueForUnservedFunctionWarnsAndWaitsPending(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.serveDemo(t) // serves demo.*, not nobody.home
	ctx := testCtx(t)

	out, errw := mustCLI(ctx, t, "enqueue", "nobody.home", `{"x":1}`, "--url", e.URL)
	id := strings.TrimSpace(out)
	if !strings.Contains(errw, "no worker serves nobody.home") || !strings.Contains(errw, id) {
		t.Fatalf("stderr = %q, want a warning naming the function and run %s", errw, id)
	}
	if r := e.getJSON(ctx, t, id); r.State != jetflow.Pending || r.Attempts != 0 {
		t.Fatalf("record = %+v, want pending", r)
	}
}

func TestEnqueueOptions(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)

	out, _ := mustCLI(ctx, t, "enqueue", "later.fn", `[1,2]`, "--after", "1h", "--id", "order-1-check", "--max-attempts", "3", "--url", e.URL)
	if id := strings.TrimSpace(out); id != "order-1-check" {
		t.Fatalf("enqueue printed %q", out)
	}
	r := e.getJSON(ctx, t, "order-1-check")
	if r.State != jetflow.Pending || r.MaxAttempts != 3 || time.Until(r.ScheduledTime) < 50*time.Minute {
		t.Fatalf("record = %+v", r)
	}
	at := time.Date(2099, 1, 2, 3, 4, 5, 0, time.UTC)
	mustCLI(ctx, t, "enqueue", "later.fn", `{}`, "--at", at.Format(time.RFC3339), "--id", "at-run", "--url", e.URL)
	if r := e.getJSON(ctx, t, "at-run"); !r.ScheduledTime.Equal(at) {
		t.Fatalf("scheduled %s, want %s", r.ScheduledTime, at)
	}

	// The same id again is refused and names the run.
	_, _, err := cli(ctx, t, "enqueue", "later.fn", `{}`, "--id", "at-run", "--url", e.URL)
	if err == nil || !strings.Contains(err.Error(), "at-run already exists") {
		t.Fatalf("second enqueue with one id: %v", err)
	}
}

func TestEnqueueRefusesBadInput(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"demo.hello", `{"name":`}, "not valid JSON"},
		{[]string{"demo.hello", `{name: 1}`}, "not valid JSON at byte 2"},
		{[]string{"bad name", `{}`}, `function "bad name"`},
		{[]string{"demo.*", `{}`}, `function "demo.*"`},
		{[]string{"demo.hello", `{}`, "--at", "tomorrow"}, "--at \"tomorrow\": not an RFC 3339 time"},
		{[]string{"demo.hello", `{}`, "--at", "2099-01-01T00:00:00Z", "--after", "1s"}, "not both"},
		{[]string{"demo.hello", `{}`, "--id", "a.b"}, `--id "a.b"`},
		{[]string{}, "want a function name"},
	}
	for _, c := range cases {
		_, _, err := cli(ctx, t, "enqueue", append(c.args, "--url", e.URL)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("enqueue %q: error %v, want it to say %q", c.args, err, c.want)
		}
	}
	// Nothing was written.
	page, err := e.P.List(ctx, producer.Filter{})
	if err != nil || len(page.Runs) != 0 {
		t.Fatalf("runs after refused enqueues: %d, %v", len(page.Runs), err)
	}
}

func TestRunsCancel(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)

	out, _ := mustCLI(ctx, t, "enqueue", "nobody.home", `{}`, "--url", e.URL)
	id := strings.TrimSpace(out)
	out, _ = mustCLI(ctx, t, "runs", "cancel", id, "--url", e.URL)
	if !strings.Contains(out, "run "+id+" canceled (was pending)") {
		t.Fatalf("runs cancel printed %q", out)
	}
	if r := e.getJSON(ctx, t, id); r.State != jetflow.Canceled || r.CompletedTime.IsZero() {
		t.Fatalf("record = %+v, want canceled", r)
	}
	out, _ = mustCLI(ctx, t, "runs", "cancel", id, "--url", e.URL)
	if !strings.Contains(out, "already ended (canceled)") {
		t.Fatalf("second cancel printed %q", out)
	}
}

func TestUnknownRunIsNotFound(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	for _, sub := range []string{"get", "cancel", "watch"} {
		_, _, err := cli(ctx, t, "runs", sub, "no-such-run", "--url", e.URL)
		if !errors.Is(err, jetflow.ErrNotFound) || err.Error() != "run no-such-run: not found" {
			t.Errorf("runs %s of an unknown id: %v", sub, err)
		}
	}
	_, _, err := cli(ctx, t, "runs", "get", "a.b", "--url", e.URL)
	if !errors.Is(err, jetflow.ErrInvalidRunID) {
		t.Errorf("runs get a.b: %v, want ErrInvalidRunID", err)
	}
}

func TestRunsListFilters(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	enqueue := func(fn, id string) {
		mustCLI(ctx, t, "enqueue", fn, `{}`, "--id", id, "--url", e.URL)
	}
	enqueue("a.one", "r1")
	enqueue("a.one", "r2")
	enqueue("b.two", "r3")
	enqueue("b.two", "r4")
	mustCLI(ctx, t, "runs", "cancel", "r2", "--url", e.URL)
	mustCLI(ctx, t, "runs", "cancel", "r3", "--url", e.URL)

	type page struct {
		Runs []*jetflow.Run `json:"runs"`
		Next string         `json:"next"`
		Prev string         `json:"prev"`
	}
	list := func(args ...string) (page, string) {
		t.Helper()
		out, _ := mustCLI(ctx, t, "runs", append([]string{"list", "--json", "--url", e.URL}, args...)...)
		var p page
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatalf("runs list --json printed %q: %v", out, err)
		}
		var got []string
		for _, r := range p.Runs {
			got = append(got, r.ID)
		}
		return p, strings.Join(got, " ")
	}
	// Newest activity first: r3's and r2's cancels are the last writes.
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "r3 r2 r4 r1"},
		{[]string{"--state", "canceled"}, "r3 r2"},
		{[]string{"--state", "pending"}, "r4 r1"},
		{[]string{"--state", "success"}, ""},
		{[]string{"--function", "b.two"}, "r3 r4"},
		{[]string{"--function", "b.two", "--state", "pending"}, "r4"},
	} {
		if p, got := list(c.args...); got != c.want || p.Next != "" || p.Prev != "" {
			t.Errorf("runs list %q = %q (next %q, prev %q), want %q alone", c.args, got, p.Next, p.Prev, c.want)
		}
	}
	// Pages both ways, by cursor.
	first, got := list("--limit", "2")
	if got != "r3 r2" || first.Next == "" || first.Prev != "" {
		t.Fatalf("runs list --limit 2 = %q next %q prev %q", got, first.Next, first.Prev)
	}
	second, got := list("--limit", "2", "--after", first.Next)
	if got != "r4 r1" || second.Next != "" || second.Prev == "" {
		t.Fatalf("second page = %q next %q prev %q", got, second.Next, second.Prev)
	}
	if _, got := list("--limit", "2", "--before", second.Prev); got != "r3 r2" {
		t.Fatalf("back to the first page = %q", got)
	}
	if _, _, err := cli(ctx, t, "runs", "list", "--after", "r2", "--url", e.URL); err == nil || !strings.Contains(err.Error(), "not a cursor") {
		t.Fatalf("runs list --after r2 (an id, not a cursor): %v", err)
	}
	var counts struct {
		Pending  int    `json:"pending"`
		Canceled int    `json:"canceled"`
		Total    int    `json:"total"`
		Source   string `json:"source"`
	}
	out, _ := mustCLI(ctx, t, "runs", "counts", "--json", "--url", e.URL)
	if err := json.Unmarshal([]byte(out), &counts); err != nil || counts.Pending != 2 || counts.Canceled != 2 || counts.Total != 4 || counts.Source != "scan" {
		t.Fatalf("runs counts --json = %s (%v)", out, err)
	}

	table, _ := mustCLI(ctx, t, "runs", "list", "--state", "canceled", "--url", e.URL)
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[2], "r2") ||
		!strings.Contains(lines[2], "a.one") || !strings.Contains(lines[2], "canceled") || !strings.Contains(lines[1], "r3") {
		t.Fatalf("runs list table:\n%s", table)
	}
	if _, _, err := cli(ctx, t, "runs", "list", "--state", "bogus", "--url", e.URL); err == nil || !strings.Contains(err.Error(), `unknown state "bogus"`) {
		t.Fatalf("runs list --state bogus: %v", err)
	}
}

func TestRunsWatchPrintsUntilTerminal(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.serveDemo(t)
	ctx := testCtx(t)
	out, _ := mustCLI(ctx, t, "enqueue", "demo.hello", `{"steps":2}`, "--url", e.URL)
	id := strings.TrimSpace(out)
	out, _ = mustCLI(ctx, t, "runs", "watch", id, "--url", e.URL)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	if !strings.Contains(last, id) || !strings.Contains(last, "-> success") && !strings.Contains(last, "is success") {
		t.Fatalf("runs watch ended with %q:\n%s", last, out)
	}
}

func TestFunctionsList(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	out, _ := mustCLI(ctx, t, "functions", "list", "--url", e.URL)
	if !strings.Contains(out, "no worker serves any function") {
		t.Fatalf("functions list without workers:\n%s", out)
	}
	e.serveDemo(t)
	e.serveDemo(t)
	out, _ = mustCLI(ctx, t, "functions", "list", "--json", "--url", e.URL)
	// The dashboard's /api/functions: one entry per function and worker.
	var infos []kv.FunctionInfo
	if err := json.Unmarshal([]byte(out), &infos); err != nil {
		t.Fatalf("functions list --json printed %q: %v", out, err)
	}
	if len(infos) != 6 {
		t.Fatalf("entries = %+v, want 3 functions on 2 workers", infos)
	}
	for i, fi := range infos {
		name := []string{"demo.flaky", "demo.hello", "demo.report"}[i/2]
		if fi.Name != name || fi.Worker == "" || fi.Concurrency != 10 || fi.Seen.IsZero() {
			t.Errorf("entry %d = %+v, want %s", i, fi, name)
		}
	}
	if infos[5].Kind != jetflow.AtMostOnce || infos[5].MaxAttempts != 1 {
		t.Errorf("demo.report = %+v, want atMostOnce with 1 attempt", infos[5])
	}
	table, _ := mustCLI(ctx, t, "functions", "list", "--url", e.URL)
	if !strings.Contains(table, "demo.report  atMostOnce") {
		t.Fatalf("functions list:\n%s", table)
	}
	// Pause and resume: every worker follows, and the list says so.
	pausedIs := func(want bool) func() bool {
		return func() bool {
			out, _ := mustCLI(ctx, t, "functions", "list", "--json", "--url", e.URL)
			var infos []kv.FunctionInfo
			if json.Unmarshal([]byte(out), &infos) != nil {
				return false
			}
			n := 0
			for _, fi := range infos {
				if fi.Name == "demo.hello" && fi.Paused == want {
					n++
				}
			}
			return n == 2
		}
	}
	if out, _ := mustCLI(ctx, t, "functions", "pause", "demo.hello", "--url", e.URL); !strings.Contains(out, "demo.hello paused") {
		t.Fatalf("functions pause: %q", out)
	}
	testserver.Eventually(t, 20*time.Second, "both workers paused demo.hello", pausedIs(true))
	if table, _ := mustCLI(ctx, t, "functions", "list", "--url", e.URL); !strings.Contains(table, "paused") {
		t.Fatalf("functions list after pause:\n%s", table)
	}
	mustCLI(ctx, t, "functions", "resume", "demo.hello", "--url", e.URL)
	testserver.Eventually(t, 20*time.Second, "both workers resumed demo.hello", pausedIs(false))
}

func TestDevOnceRunsTheDemo(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	out, _ := mustCLI(ctx, t, "dev", "--once", "--port", "0", "--data", t.TempDir(), "--sync-every", testSyncEvery.String())
	for _, want := range []string{
		"export JETFLOW_URL=nats://127.0.0.1:",
		"go run ./cmd/jetflow runs list",
		"demo.hello", "new -> pending",
		"demo.flaky", "attempt 1 failed",
		"demo.report",
		"-> success",
		"demo runs ended: 5 success",
		"jetflow dev stopped",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dev --once output lacks %q", want)
		}
	}
	// Every demo run printed its way to success.
	ids := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 4 && strings.HasPrefix(f[1], "demo.") && strings.Contains(l, "-> success") {
			ids[f[2]] = true
		}
	}
	if len(ids) != 5 {
		t.Errorf("success lines for %d runs, want 5:\n%s", len(ids), out)
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// cancelOn is an output that cancels a command's context as soon as it
// prints marker, as Ctrl-C does when the user sees it.
type cancelOn struct {
	syncBuffer
	marker string
	cancel context.CancelFunc
}

func (c *cancelOn) Write(p []byte) (int, error) {
	n, err := c.syncBuffer.Write(p)
	if strings.Contains(c.String(), c.marker) {
		c.cancel()
	}
	return n, err
}

// Ctrl-C right after dev's banner, while it schedules the demo runs,
// stops it gracefully: no error, as at any other time.
func TestDevCtrlCWhileSeeding(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	out := &cancelOn{marker: "Ctrl-C stops.", cancel: cancel}
	var errw syncBuffer
	code := runMain(withOutput(ctx, out, &errw), []string{"dev", "--port", "0", "--data", t.TempDir(), "--sync-every", testSyncEvery.String()})
	if code != exitOK || errw.String() != "" || !strings.Contains(out.String(), "jetflow dev stopped") {
		t.Fatalf("dev, Ctrl-C after the banner: exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errw.String())
	}
}
