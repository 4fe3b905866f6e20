package integration_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

type wireSlowArgs struct{}

// wireSlow's first attempt waits for its context to end (a timeout, a
// cancel notice) and asks for a retry; later attempts succeed.
var wireSlow = jetflow.Define[wireSlowArgs]("slow.op")

// TestWireFormatFromPython runs docs/wire-format.md from Python with no
// package at all: testdata/wireformat_py/wire.py speaks the NATS protocol
// over a socket (natsmini.py: PUB, HPUB, SUB, MSG, HMSG), publishes runs and
// bad messages by hand, writes a run due later, sends cancel notices, and
// reads records with direct gets and a KV watch done by hand, while a Go
// worker and scheduler serve them. It is skipped where python3 is missing.
func TestWireFormatFromPython(t *testing.T) {
	python := pythonPath(t)
	// A small max payload keeps the oversized body small.
	srv, err := embedded.Start(embedded.Options{Dir: t.TempDir(), SyncEvery: time.Second, MaxPayload: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	checkPythonWire(t, python, srv.ClientURL(), nil, js, js, js)
}

// TestWireFormatFromPythonAsProducer runs wire.py as the producer user of
// docs/permissions.md, on a nats-server process started with that file's
// configuration: the bare protocol's JetStream calls (the publishes with
// an ack, the direct and stream message gets, the KV watch's consumer, the
// delayed run's two writes, the notices) need no more than the role
// grants. (The role does not read the functions bucket: that read is left
// out.)
func TestWireFormatFromPythonAsProducer(t *testing.T) {
	python := pythonPath(t)
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
	env := []string{"NATS_USER=producer", "NATS_PASSWORD=" + rolePasswords["producer"]}
	checkPythonWire(t, python, url, env, wjs, sjs, pjs)
}

func pythonPath(t *testing.T) string {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: the Python producer is not tried")
	}
	return python
}

// checkPythonWire serves emails.send and slow.op with a worker (on wjs) and
// a scheduler (on sjs), runs wire.py against url (env: more environment)
// and checks what it saw against what a producer (on pjs) reads.
func checkPythonWire(t *testing.T, python, url string, env []string, wjs, sjs, pjs jetstream.JetStream) {
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
	worker.Handle(w, wireSlow, func(ctx context.Context, j *worker.Job[wireSlowArgs]) error {
		if j.Attempt() == 1 {
			<-ctx.Done()
			return jetflow.RetryAfter(10*time.Millisecond, context.Cause(ctx))
		}
		return j.SetResult("slept")
	})
	startWithScheduler(t, w, sjs)
	asProducer := len(env) > 0
	argsLimit := pjs.Conn().MaxPayload() - 4096

	got := runPythonWire(t, python, url, "py", env)
	// What Python read is the record Go reads.
	for name, r := range got {
		if r.Record == nil {
			continue
		}
		g, err := p.Get(ctx, r.ID)
		if err != nil {
			t.Fatalf("case %s: %v", name, err)
		}
		if g.State != r.Record.State || g.Error != r.Record.Error || string(g.State) != r.GetState {
			t.Errorf("case %s: Python watched %s %q and got %q, Go reads %s %q", name, r.Record.State, r.Record.Error, r.GetState, g.State, g.Error)
		}
	}
	now := got["now"]
	if now.Ack.Stream != "JETFLOW_FN" || now.Ack.Duplicate || !now.Again.Duplicate || now.Again.Seq != now.Ack.Seq {
		t.Errorf("now: acks %+v then %+v; want JETFLOW_FN, the second a duplicate of the first", now.Ack, now.Again)
	}
	if r := now.Record; r.State != jetflow.Success || string(r.Result) != `"sent to a@b.c"` || r.MaxAttempts != 3 || r.Timeout != 30*time.Second || r.Attempts != 1 {
		t.Errorf("now: %s %s attempts %d/%d timeout %v; want success, \"sent to a@b.c\", 1/3, 30s", r.State, r.Result, r.Attempts, r.MaxAttempts, r.Timeout)
	}
	failed := map[string]string{
		"notjson":   `jetflow: bad arguments: invalid character 'o' in literal null (expecting 'u')`,
		"wrongtype": `jetflow: bad arguments: json: cannot unmarshal number into Go struct field`,
		"badheader": `jetflow: bad message: subject jetflow.fn.emails.send.py-badheader: bad header Jetflow-Timeout: "soon"`,
		"otherid":   `jetflow: bad message: subject jetflow.fn.emails.send.py-otherid: Nats-Msg-Id "py-y" names neither run "py-otherid" of the subject nor its attempt 1 ("py-otherid")`,
		"badid":     `jetflow: bad message: subject jetflow.fn.emails.send.py-bad!id: jetflow: invalid run id: "py-bad!id"`,
		"oversized": fmt.Sprintf("bytes of args: more than a run record holds (%d)", argsLimit),
		"timeout":   `jetflow: run timed out after 200ms`,
	}
	for name, want := range failed {
		r := got[name].Record
		if r == nil || r.State != jetflow.Failed || !r.Permanent || !strings.Contains(r.Error, want) {
			t.Errorf("%s: record %+v; want failed, permanent, %q", name, r, want)
		}
	}
	if r := got["notjson"].Record; string(r.Args) != `"not json"` {
		t.Errorf("notjson: args %s, want the body as a JSON string", r.Args)
	}
	for _, name := range []string{"otherid", "badid"} {
		if r := got[name]; r.ID != "dlq-JETFLOW_FN-"+jsonNumber(r.Ack.Seq) {
			t.Errorf("%s: record %s, want dlq-JETFLOW_FN-<the ack's seq %d>", name, r.ID, r.Ack.Seq)
		}
	}
	var summary struct {
		NotJSON   *bool `json:"notJSON"`
		Size      int   `json:"size"`
		Truncated bool  `json:"truncated"`
	}
	if err := json.Unmarshal(got["oversized"].Record.Args, &summary); err != nil || summary.NotJSON == nil || *summary.NotJSON || summary.Size <= int(argsLimit) || !summary.Truncated {
		t.Errorf("oversized: args summary %+v (%v); want notJSON false, the size, truncated", summary, err)
	}
	if !got["onetoken"].Refused {
		t.Errorf("onetoken: a publish on jetflow.fn.<one token> was not refused")
	}
	un := got["unserved"]
	if un.Record != nil || un.GetState != "" || un.Found.Subject != "jetflow.fn.nobody.serves.py-unserved" || un.Found.Seq != un.Ack.Seq || un.Found.Data != `{"x":1}` {
		t.Errorf("unserved: %+v; want no record and its message found in the stream", un)
	}
	if r, err := p.Get(ctx, un.ID); err != nil || r.State != jetflow.Pending || r.Name != "nobody.serves" {
		t.Errorf("unserved: Go reads %+v %v; want pending nobody.serves", r, err)
	}
	later := got["later"]
	if r := later.Record; r.State != jetflow.Success || r.StartedTime.Before(later.Due) || string(r.Result) != `"sent to later@b.c"` {
		t.Errorf("later: %s started %v, due %v; want success, not before due", r.State, r.StartedTime, later.Due)
	}
	if later.Twice.Error == nil || later.Twice.Error.ErrCode != 10071 {
		t.Errorf("later: a second create of the record answered %+v; want wrong last sequence (10071)", later.Twice)
	}
	// Cancel notices without the canceled record lose nothing.
	if r := got["prenotice"].Record; r.State != jetflow.Success {
		t.Errorf("prenotice: %s; want success (a notice before the run is forgotten)", r.State)
	}
	if n := got["notice"]; !n.SawRunning || n.Record.State != jetflow.Success || n.Record.Attempts != 2 {
		t.Errorf("notice: saw running %v, record %s after %d attempts; want success at attempt 2 (the first stopped by the notice)", n.SawRunning, n.Record.State, n.Record.Attempts)
	}
	b := got["buckets"]
	if !b.IdxCP || !asProducer && (b.Function == nil || b.Function.Name != "emails.send" || b.Function.Worker == "") {
		t.Errorf("buckets: checkpoint read %v, functions entry %+v", b.IdxCP, b.Function)
	}
	// The handler ran for each good run of emails.send, once.
	var ran []string
	for len(calls) > 0 {
		ran = append(ran, <-calls)
	}
	if want := []string{now.ID, later.ID, got["prenotice"].ID}; strings.Join(ran, ",") != strings.Join(want, ",") {
		t.Errorf("emails.send ran for %v, want %v", ran, want)
	}
}

func jsonNumber(n uint64) string { b, _ := json.Marshal(n); return string(b) }

type pyAck struct {
	Stream    string `json:"stream"`
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"`
	Error     *struct {
		ErrCode int `json:"err_code"`
	} `json:"error"`
}

// pyResult is one line wire.py prints.
type pyResult struct {
	Case       string       `json:"case"`
	ID         string       `json:"id"`
	Ack        pyAck        `json:"ack"`
	Again      pyAck        `json:"again"`
	Twice      pyAck        `json:"twice"`
	Record     *jetflow.Run `json:"record"`
	GetState   string       `json:"getState"`
	Due        time.Time    `json:"due"`
	Refused    bool         `json:"refused"`
	SawRunning bool         `json:"sawRunning"`
	Found      struct {
		Subject string `json:"subject"`
		Seq     uint64 `json:"seq"`
		Data    string `json:"data"`
	} `json:"found"`
	IdxCP    bool `json:"-"`
	RawIdxCP any  `json:"idxcp"`
	Function *struct {
		Name   string `json:"name"`
		Worker string `json:"worker"`
	} `json:"function"`
}

// runPythonWire runs wire.py against url (env: more environment) and
// returns its results by case.
func runPythonWire(t *testing.T, python, url, prefix string, env []string) map[string]pyResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, python, "wire.py", url, prefix)
	run.Dir = filepath.Join("testdata", "wireformat_py")
	run.Env = append(append(run.Environ(), "PYTHONDONTWRITEBYTECODE=1"), env...)
	var stderr bytes.Buffer
	run.Stderr = &stderr
	out, err := run.Output()
	if err != nil {
		t.Fatalf("python3 wire.py: %v\n%s%s", err, out, stderr.String())
	}
	got := map[string]pyResult{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r pyResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("python printed %.300q: %v", sc.Text(), err)
		}
		if l, ok := r.RawIdxCP.([]any); ok {
			r.IdxCP = len(l) > 0
		}
		got[r.Case] = r
	}
	want := []string{"now", "notjson", "wrongtype", "badheader", "otherid", "badid", "oversized", "timeout",
		"onetoken", "unserved", "later", "prenotice", "notice", "buckets"}
	for _, c := range want {
		r, ok := got[c]
		if !ok {
			t.Fatalf("python printed no case %s:\n%s\n%s", c, out, stderr.String())
		}
		if r.Record == nil && r.ID != "" && c != "unserved" {
			t.Fatalf("case %s: run %s did not end within 30 s as seen from Python:\n%s", c, r.ID, stderr.String())
		}
	}
	return got
}
