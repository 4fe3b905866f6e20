package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/workflow"
)

var (
	peerOnce sync.Once
	peerBin  string
	peerErr  error
)

// clientPeer builds integration/internal/clientpeer (the Go worker and
// scheduler the clients in other languages test against) once.
func clientPeer(t *testing.T) string {
	t.Helper()
	peerOnce.Do(func() {
		peerBin = filepath.Join(binDir, "clientpeer")
		args := []string{"build", "-o", peerBin}
		if raceEnabled {
			args = append(args, "-race")
		}
		if out, err := exec.Command("go", append(args, "./internal/clientpeer")...).CombinedOutput(); err != nil {
			peerErr = errors.New(string(out))
		}
	})
	if peerErr != nil {
		t.Fatal(peerErr)
	}
	return peerBin
}

// The client peer serves what its doc comment promises, to a producer in
// another process: echo, fail then succeed, a delayed run, a cancel of a
// sleeping run, a workflow resumed by an event; and SIGTERM stops it with
// status 0.
func TestClientPeer(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	bin := clientPeer(t)
	p := &proc{t: t, name: "clientpeer", stderr: &syncBuffer{}, exited: make(chan struct{}), notify: make(chan struct{})}
	startCmd(t, p, exec.Command(bin, "-url", ts.S.ClientURL(), "-id", "peer-1"))
	ready := p.waitLine(60*time.Second, func(l string) bool { return strings.HasPrefix(l, "READY ") })
	if ready != "READY prefix=jetflow id=peer-1" {
		t.Fatalf("ready line %q", ready)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pr, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	wait := func(id string, want jetflow.State) *jetflow.Run {
		t.Helper()
		r, err := pr.Wait(ctx, id)
		if err != nil {
			t.Fatalf("wait %s: %v", id, err)
		}
		if r.State != want {
			t.Fatalf("run %s: %s (%s), want %s", id, r.State, r.Error, want)
		}
		return r
	}

	id, err := pr.Enqueue(ctx, jetflow.RawCall("demo.echo", json.RawMessage(`{"msg":"zoë 👋"}`)))
	if err != nil {
		t.Fatal(err)
	}
	if r := wait(id, jetflow.Success); string(r.Result) != `{"msg":"zoë 👋"}` {
		t.Errorf("echo result %s", r.Result)
	}
	p.waitLine(5*time.Second, func(l string) bool { return l == "RUN demo.echo "+id+" 1" })

	id, err = pr.Enqueue(ctx, jetflow.RawCall("demo.fail", json.RawMessage(`{"times":1}`)))
	if err != nil {
		t.Fatal(err)
	}
	if r := wait(id, jetflow.Success); string(r.Result) != `{"attempts":2}` || r.Attempts != 2 {
		t.Errorf("fail once: result %s, attempts %d", r.Result, r.Attempts)
	}
	id, err = pr.Enqueue(ctx, jetflow.RawCall("demo.fail", json.RawMessage(`{"message":"no","permanent":true}`)))
	if err != nil {
		t.Fatal(err)
	}
	if r := wait(id, jetflow.Failed); r.Error != "no" || !r.Permanent || r.Attempts != 1 {
		t.Errorf("fail permanently: error %q, permanent %t, attempts %d", r.Error, r.Permanent, r.Attempts)
	}

	start := time.Now()
	id, err = pr.RunAfter(ctx, time.Second, jetflow.RawCall("demo.echo", json.RawMessage(`1`)))
	if err != nil {
		t.Fatal(err)
	}
	r := wait(id, jetflow.Success)
	if late := r.StartedTime.Sub(start); late < time.Second || late > 5*time.Second {
		t.Errorf("run after 1 s started after %s", late)
	}

	id, err = pr.Enqueue(ctx, jetflow.RawCall("demo.sleep", json.RawMessage(`{"ms":60000}`)))
	if err != nil {
		t.Fatal(err)
	}
	p.waitLine(10*time.Second, func(l string) bool { return l == "RUN demo.sleep "+id+" 1" })
	if err := pr.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	wait(id, jetflow.Canceled)

	flow := workflow.Define("demo.flow", func(*workflow.Context, json.RawMessage) (json.RawMessage, error) { return nil, nil })
	wf, err := workflow.Start(ctx, pr, flow, json.RawMessage(`{"order":42}`), workflow.WithID("peer-wf-1"))
	if err != nil {
		t.Fatal(err)
	}
	// The first segment runs and suspends at the await.
	p.waitLine(10*time.Second, func(l string) bool { return strings.HasPrefix(l, "RUN demo.flow.segment "+wf+"-seg1 ") })
	time.Sleep(200 * time.Millisecond)
	sent := time.Now()
	if err := pr.SendEvent(ctx, wf, "approve", map[string]bool{"ok": true}); err != nil {
		t.Fatal(err)
	}
	r = wait(wf, jetflow.Success)
	if string(r.Result) != `{"ok":true}` {
		t.Errorf("workflow result %s", r.Result)
	}
	if d := time.Since(sent); d > 5*time.Second {
		t.Errorf("workflow resumed %s after the event", d)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("clientpeer did not stop on SIGTERM")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("clientpeer exit status %d; stderr:\n%s", code, tail(p.stderr.String(), 4000))
	}
}
