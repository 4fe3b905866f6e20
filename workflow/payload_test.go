package workflow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/payload"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
)

var bigResult = jetflow.Define[int]("test.bigresult")

// text is n bytes of text that differ along their length, from seed.
func text(seed byte, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + (seed+byte(i))%26
	}
	return string(b)
}

// journalValues is every journal entry under workflow id, by key.
func (e *env) journalValues(t *testing.T, id string) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	kvb, err := e.JS.KeyValue(ctx, streams.Config{}.WithDefaults().JournalBucket())
	must(t, err)
	out := map[string][]byte{}
	for _, k := range e.journalKeys(t, id) {
		ent, err := kvb.Get(ctx, k)
		must(t, err)
		out[k] = ent.Value()
	}
	return out
}

// parked waits until workflow id's cursor says it waits for event name,
// reading the journal's cursor (workflow.Get would read its 20 MB input
// each time).
func (e *env) parked(t *testing.T, id, name string) {
	t.Helper()
	kvb, err := e.JS.KeyValue(context.Background(), streams.Config{}.WithDefaults().JournalBucket())
	must(t, err)
	testserver.Eventually(t, 4*time.Minute, "workflow "+id+" waiting for "+name, func() bool {
		ent, err := kvb.Get(context.Background(), id+".wf")
		return err == nil && bytes.Contains(ent.Value(), []byte(`"waiting":true`)) && bytes.Contains(ent.Value(), []byte(name))
	})
}

// A workflow's input, a step's result, an event's payload and the
// workflow's result of 20 MB each, and a call's result of 2 MB, on a server of NATS's default
// max payload (1 MB), go through the payloads bucket: the workflow's code
// gets each whole after a server restart between their writes and their
// reads (the worker stopped meanwhile), its step and call run once, Result
// returns the result whole, and the journal and the record keep
// references only.
func TestLargePayloadsThroughAWorkflowAndAServerRestart(t *testing.T) {
	// Not parallel: 20 MB payloads under -race take the machine for a
	// while, and would slow the package's parallel tests past their
	// deadlines; the parallel tests start after this one.
	ts := testserver.StartMaxPayload(t, 1<<20)
	p, err := producer.New(context.Background(), ts.JS, producer.Config{})
	must(t, err)
	e := &env{Env: ts, P: p, count: map[string]int{}}
	const size = 20 << 20
	// The call's result, written and read as the step's is, at 2 MB: the
	// worker's tests carry a 20 MB result.
	in, stepOut, callOut, event := text(0, size), text(1, size), text(2, 2<<20), text(3, size)
	def := workflow.Define("test.bigpayloads", func(wf *workflow.Context, got string) (string, error) {
		if got != in {
			return "", errors.New("the input is not the one given to Start")
		}
		s, err := workflow.Step(wf, "big", func(context.Context) (string, error) {
			e.inc("step")
			return stepOut, nil
		})
		if err != nil || s != stepOut {
			return "", errors.New("the step's result is not the one it returned: " + errString(err))
		}
		c, err := workflow.Call[string](wf, bigResult.With(3))
		if err != nil || c != callOut {
			return "", errors.New("the call's result is not the one its handler set: " + errString(err))
		}
		ev, err := workflow.AwaitEvent[string](wf, "doc", 0)
		if err != nil || ev != event {
			return "", errors.New("the event is not the one sent: " + errString(err))
		}
		return strings.ToUpper(ev), nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	register := func(w *worker.Worker) {
		must(t, workflow.Register(w, def))
		worker.Handle(w, bigResult, func(ctx context.Context, j *worker.Job[int]) error {
			e.inc("call")
			return j.SetResult(callOut)
		})
	}
	// The default AckWait and LostAfter: a 20 MB read on a loaded machine
	// may take longer than startWorker's second, and a segment taken over
	// mid-step would run its (retryable) step again.
	first := e.startWorkerWith(t, worker.Config{}, register)
	id, err := workflow.Start(ctx, e.P, def, in)
	must(t, err)
	e.parked(t, id, "doc") // the input, the step's and the call's results are written
	must(t, first.Stop(ctx))
	must(t, e.P.SendEvent(ctx, id, "doc", event))
	ts.Restart()
	testserver.Eventually(t, 10*time.Second, "reconnected", ts.NC.IsConnected)
	e.startWorkerWith(t, worker.Config{}, register)
	out, err := workflow.Result(ctx, e.P, def, id)
	if err != nil {
		t.Fatalf("workflow %s: %v", id, err)
	}
	if out != strings.ToUpper(event) {
		t.Fatalf("Result: %d bytes, not the %d the workflow returned", len(out), size)
	}
	if e.n("step") != 1 || e.n("call") != 1 {
		t.Fatalf("the step ran %d times, the call %d; want once each", e.n("step"), e.n("call"))
	}
	for k, v := range e.journalValues(t, id) {
		if len(v) > 4096 {
			t.Errorf("journal entry %s holds %d bytes, want a reference", k, len(v))
		}
	}
	kvb, err := e.JS.KeyValue(ctx, streams.Config{}.WithDefaults().RunsBucket())
	must(t, err)
	rec, err := kvb.Get(ctx, id)
	must(t, err)
	if v := rec.Value(); len(v) > 4096 || bytes.Count(v, []byte(`"`+payload.Key+`"`)) != 2 {
		t.Fatalf("the workflow's record holds %d bytes: %.300s; want two references (input, result)", len(v), v)
	}
}

// A workflow whose input is a reference to an object that is not there
// fails, with the typed error in its record, rather than retrying its
// segment for good.
func TestWorkflowWithAMissingInputFails(t *testing.T) {
	t.Parallel()
	ts := testserver.StartMaxPayload(t, 1<<20)
	p, err := producer.New(context.Background(), ts.JS, producer.Config{})
	must(t, err)
	e := &env{Env: ts, P: p, count: map[string]int{}}
	def := workflow.Define("test.missinginput", func(wf *workflow.Context, in string) (int, error) {
		e.inc("ran")
		return len(in), nil
	})
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, def, text(0, 300<<10))
	must(t, err)
	if _, err := workflow.Result(ctx, e.P, def, id); err != nil {
		t.Fatalf("the workflow with an offloaded input: %v", err)
	}
	// The same reference, its object deleted, as the input of another
	// workflow (what Start would write once it expired).
	kvb, err := e.JS.KeyValue(ctx, streams.Config{}.WithDefaults().RunsBucket())
	must(t, err)
	rec, err := kvb.Get(ctx, id)
	must(t, err)
	var stored struct {
		Args json.RawMessage `json:"args"`
	}
	must(t, json.Unmarshal(rec.Value(), &stored))
	ref, ok := payload.Parse(stored.Args)
	if !ok {
		t.Fatalf("the record's args are no reference: %.200s", stored.Args)
	}
	obs, err := e.JS.ObjectStore(ctx, streams.Config{}.WithDefaults().PayloadsBucket())
	must(t, err)
	must(t, obs.Delete(ctx, ref.Name))
	_, err = workflow.Result(ctx, e.P, def, id)
	if !errors.Is(err, jetflow.ErrPayloadMissing) {
		t.Fatalf("Result of a workflow whose input is gone: %v, want jetflow.ErrPayloadMissing", err)
	}
	id2, err := workflow.Start(ctx, e.P, workflow.Define("test.missinginput", func(*workflow.Context, json.RawMessage) (int, error) { return 0, nil }), stored.Args)
	must(t, err)
	// Wait returns the record with the error of its input: wait on the
	// record.
	var r *jetflow.Run
	testserver.Eventually(t, 30*time.Second, "workflow "+id2+" ended", func() bool {
		r, _ = e.P.Get(ctx, id2)
		return r != nil && r.State.Terminal()
	})
	if r.State != jetflow.Failed || !strings.Contains(r.Error, jetflow.ErrPayloadMissing.Error()) {
		t.Fatalf("workflow %s: %s %q; want failed, naming the missing payload", id2, r.State, r.Error)
	}
	if e.n("ran") != 1 {
		t.Fatalf("the workflow's code ran %d times, want once (not for the missing input)", e.n("ran"))
	}
}
