package workflow_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/payload"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// journalKeys lists the journal keys under workflow (or run) id.
func (e *env) journalKeys(t *testing.T, id string) []string {
	t.Helper()
	ctx := context.Background()
	kvb, err := e.JS.KeyValue(ctx, streams.Config{}.WithDefaults().JournalBucket())
	must(t, err)
	keys, err := kvb.ListKeysFiltered(ctx, id+".>")
	must(t, err)
	var out []string
	for k := range keys.Keys() {
		out = append(out, k)
	}
	return out
}

// An input above what jetflow offloads (payload.MaxSize) is refused by
// Start, typed, with nothing written. An input near the server's max
// payload, which no run record holds, goes to the payloads bucket and runs.
func TestStartRefusesAnInputItsFirstSegmentCannotCarry(t *testing.T) {
	t.Parallel()
	e := setup(t)
	// 8 MB messages, in a race build on a busy machine: longer than testCtx.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	def := workflow.Define("test.biginput", func(wf *workflow.Context, in string) (int, error) {
		e.inc("ran")
		return len(in), nil
	})
	// The default AckWait and LostAfter: every write of this run's record
	// carries 8 MB, and on a loaded machine one may take longer than the
	// second startWorker's worker allows before it takes a run over.
	e.startWorkerWith(t, worker.Config{}, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	limit := int(e.JS.Conn().MaxPayload()) - 4096     // kv.ArgsLimit: what a run's args hold
	for _, size := range []int{payload.MaxSize - 1} { // JSON adds 2 quotes
		t0 := time.Now()
		_, err := workflow.Start(ctx, e.P, def, strings.Repeat("y", size), workflow.WithID("big"))
		if !errors.Is(err, producer.ErrArgsTooLarge) || !errors.Is(err, jetflow.ErrBadArgs) {
			t.Fatalf("input of %d bytes (limit %d): %v, want producer.ErrArgsTooLarge (and jetflow.ErrBadArgs)", size, limit, err)
		}
		if _, err := e.P.Get(ctx, "big"); !errors.Is(err, jetflow.ErrNotFound) {
			t.Fatalf("input of %d bytes refused, but a record is there: %v", size, err)
		}
		t.Logf("size %d refused in %s", size, time.Since(t0))
	}
	size := limit - 1000
	id, err := workflow.Start(ctx, e.P, def, strings.Repeat("y", size))
	must(t, err)
	n, err := workflow.Result(ctx, e.P, def, id)
	if err != nil {
		r, gerr := e.P.Get(context.Background(), id)
		if gerr == nil {
			r.Args = nil
		}
		t.Fatalf("result of the %d-byte input: %v; its record: %+v, %v", size, err, r, gerr)
	}
	if n != size || e.n("ran") != 1 {
		t.Fatalf("result %d, ran %d times; want %d, once", n, e.n("ran"), size)
	}
}

// A step's result larger than a journal entry holds fails the step once,
// with ErrResultTooLarge journaled as its failure (the workflow's code sees
// it and goes on): the step is not run again and again by retried
// segments, and an at-most-once step does not come back as "worker lost".
func TestStepResultTooLargeForTheJournalFailsTheStepOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	huge := func(key string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) {
			e.inc(key)
			return strings.Repeat("x", payload.MaxSize), nil
		}
	}
	def := workflow.Define("test.hugeresult", func(wf *workflow.Context, _ struct{}) (string, error) {
		var got []string
		_, err := workflow.Step(wf, "huge", huge("huge"), workflow.StepOptions{MaxAttempts: 3})
		if !errors.Is(err, workflow.ErrResultTooLarge) {
			return "", errors.New("retryable step: " + errString(err))
		}
		got = append(got, "retryable")
		_, err = workflow.Step(wf, "huge-amo", huge("amo"), workflow.StepOptions{Kind: jetflow.AtMostOnce})
		if !errors.Is(err, workflow.ErrResultTooLarge) || errors.Is(err, jetflow.ErrWorkerLost) {
			return "", errors.New("at-most-once step: " + errString(err))
		}
		got = append(got, "at-most-once")
		// A wait long enough to park the segment whatever the machine's
		// load, so that the steps above are replayed from the journal.
		wf.Sleep(time.Second)
		return strings.Join(got, ","), nil
	})
	e.startScheduler(t)
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, def, struct{}{})
	must(t, err)
	out, err := workflow.Result(ctx, e.P, def, id)
	if err != nil || out != "retryable,at-most-once" {
		t.Fatalf("result %q, %v", out, err)
	}
	if e.n("huge") != 1 || e.n("amo") != 1 {
		t.Fatalf("the retryable step ran %d times, the at-most-once one %d; want once each", e.n("huge"), e.n("amo"))
	}
	st := e.status(t, id)
	for _, s := range st.Steps[:2] {
		if s.State != workflow.StepFailed || len(s.Result) != 0 || !strings.Contains(s.Error, workflow.ErrResultTooLarge.Error()) {
			t.Fatalf("step %s: %s, %d bytes of result, error %q", s.Step, s.State, len(s.Result), s.Error)
		}
	}
	if st.Segment < 2 {
		t.Fatalf("the workflow ended in segment %d: the steps were not replayed", st.Segment)
	}
}

// A child workflow whose input no run holds fails its step, typed, rather
// than the parent's segment being retried for hours.
func TestChildInputTooLargeFailsTheStep(t *testing.T) {
	t.Parallel()
	e := setup(t)
	child := workflow.Define("test.bigchild", func(wf *workflow.Context, in string) (int, error) { return len(in), nil })
	parent := workflow.Define("test.bigparent", func(wf *workflow.Context, _ struct{}) (string, error) {
		_, err := workflow.RunChild(wf, child, strings.Repeat("c", payload.MaxSize))
		var se *workflow.StepError
		if !errors.Is(err, producer.ErrArgsTooLarge) || !errors.As(err, &se) {
			return "", errors.New("RunChild: " + errString(err))
		}
		_, err = workflow.StartChild(wf, child, strings.Repeat("c", payload.MaxSize))
		if !errors.Is(err, producer.ErrArgsTooLarge) {
			return "", errors.New("StartChild: " + errString(err))
		}
		return "refused", nil
	})
	e.startWorker(t, func(w *worker.Worker) {
		must(t, workflow.Register(w, parent))
		must(t, workflow.Register(w, child))
	})
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, parent, struct{}{})
	must(t, err)
	out, err := workflow.Result(ctx, e.P, parent, id)
	if err != nil || out != "refused" {
		t.Fatalf("result %q, %v", out, err)
	}
}

// Journal entries and cursors that do not decode, or make no sense, fail
// the workflow with jetflow.ErrBadRecord naming the key (retrying would
// read them again), and Get says so, typed; the step that ran is not run
// again.
func TestUnreadableJournalFailsTheWorkflow(t *testing.T) {
	t.Parallel()
	e := setup(t)
	def := workflow.Define("test.corrupt", func(wf *workflow.Context, _ struct{}) (string, error) {
		if _, err := workflow.Step(wf, "a", func(ctx context.Context) (int, error) {
			e.inc(wf.ID())
			return 1, nil
		}, workflow.StepOptions{Kind: jetflow.AtMostOnce}); err != nil {
			return "", err
		}
		return workflow.AwaitEvent[string](wf, "go", 0)
	})
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	kvb, err := e.JS.KeyValue(testCtx(t), streams.Config{}.WithDefaults().JournalBucket())
	must(t, err)
	for _, c := range []struct {
		name, key, val string
		getFails       bool // Get reads the bad key
		sendFails      bool // SendEvent reads the bad key (the cursor)
	}{
		{"garbage step", "s.1", "{not json", true, false},
		{"garbage cursor", "wf", "\x00\xff garbage", true, true},
		{"waiting without waits", "s.2", `{"step":"2","name":"go","kind":"event","state":"waiting"}`, true, false},
		{"step id not its key's", "s.1", `{"step":"7","name":"a","kind":"step","state":"done","result":1}`, true, false},
		{"unknown state", "s.2", `{"step":"2","name":"go","kind":"event","state":"bogus","waits":{"event":"go"}}`, true, false},
		{"negative cursor", "wf", `{"seg":-5,"waiting":true}`, true, true},
		{"cursor at a segment that never ran", "wf", `{"seg":99}`, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A deadline of its own: seven cases one after the other
			// under one test's 45 s could outlast it on a loaded machine.
			ctx := testCtx(t)
			id, err := workflow.Start(ctx, e.P, def, struct{}{})
			must(t, err)
			e.waiting(t, id)
			_, err = kvb.Put(ctx, id+"."+c.key, []byte(c.val))
			must(t, err)
			if c.key != "wf" {
				// A new cursor revision: the next segment reads the
				// journal rather than the copy its worker kept.
				ce, err := kvb.Get(ctx, id+".wf")
				must(t, err)
				_, err = kvb.Put(ctx, id+".wf", ce.Value())
				must(t, err)
			}
			if _, err := workflow.Get(ctx, e.P, id); c.getFails != errors.Is(err, jetflow.ErrBadRecord) {
				t.Fatalf("Get: %v, want jetflow.ErrBadRecord: %v", err, c.getFails)
			}
			err = workflow.SendEvent(ctx, e.P, id, "go", "x")
			if c.sendFails != errors.Is(err, jetflow.ErrBadRecord) || !c.sendFails && err != nil {
				t.Fatalf("SendEvent: %v, want jetflow.ErrBadRecord: %v", err, c.sendFails)
			}
			r := e.wait(t, id)
			if r.State != jetflow.Failed || !strings.Contains(r.Error, jetflow.ErrBadRecord.Error()) || !strings.Contains(r.Error, id+"."+c.key) {
				t.Fatalf("workflow %s %q; want failed with jetflow.ErrBadRecord naming key %s", r.State, r.Error, id+"."+c.key)
			}
			if n := e.n(id); n != 1 {
				t.Fatalf("the at-most-once step ran %d times", n)
			}
		})
	}
}

// workflow.SendEvent, like producer.SendEvent, refuses a run that is not a
// workflow, and stores nothing for it.
func TestSendEventToARunThatIsNotAWorkflow(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	fn := jetflow.Define[struct{}]("test.plain")
	id, err := e.P.RunAfter(ctx, time.Hour, fn.With(struct{}{}), producer.WithID("plain-1"))
	must(t, err)
	if err := workflow.SendEvent(ctx, e.P, id, "go", 1); !errors.Is(err, producer.ErrNotWorkflow) {
		t.Fatalf("workflow.SendEvent: %v, want producer.ErrNotWorkflow", err)
	}
	if err := e.P.SendEvent(ctx, id, "go", 1); !errors.Is(err, producer.ErrNotWorkflow) {
		t.Fatalf("producer.SendEvent: %v, want producer.ErrNotWorkflow", err)
	}
	if keys := e.journalKeys(t, id); len(keys) != 0 {
		t.Fatalf("journal keys left under %s: %v", id, keys)
	}
}

// An event payload above what jetflow offloads (payload.MaxSize) is refused
// by both SendEvents with producer.ErrArgsTooLarge, and nothing is stored;
// the workflow still takes one near the max payload (offloaded).
func TestSendEventPayloadTooLarge(t *testing.T) {
	t.Parallel()
	e := setup(t)
	// 8 MB messages, in a race build on a busy machine: longer than testCtx.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	def := workflow.Define("test.bigevent", func(wf *workflow.Context, _ struct{}) (int, error) {
		v, err := workflow.AwaitEvent[string](wf, "go", 0)
		return len(v), err
	})
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	id, err := workflow.Start(ctx, e.P, def, struct{}{})
	must(t, err)
	e.waiting(t, id)
	limit := int(e.JS.Conn().MaxPayload()) - 4096 - 1024
	for _, size := range []int{payload.MaxSize - 1} { // JSON adds 2 quotes
		if err := workflow.SendEvent(ctx, e.P, id, "go", strings.Repeat("z", size)); !errors.Is(err, producer.ErrArgsTooLarge) {
			t.Fatalf("workflow.SendEvent of %d bytes: %v, want producer.ErrArgsTooLarge", size, err)
		}
		if err := e.P.SendEvent(ctx, id, "go", strings.Repeat("z", size)); !errors.Is(err, producer.ErrArgsTooLarge) {
			t.Fatalf("producer.SendEvent of %d bytes: %v, want producer.ErrArgsTooLarge", size, err)
		}
	}
	for _, k := range e.journalKeys(t, id) {
		if strings.Contains(k, ".ev.") {
			t.Fatalf("refused event stored: %s", k)
		}
	}
	must(t, workflow.SendEvent(ctx, e.P, id, "go", strings.Repeat("z", limit-2)))
	n, err := workflow.Result(ctx, e.P, def, id)
	if err != nil || n != limit-2 {
		t.Fatalf("result %d, %v; want %d", n, err, limit-2)
	}
}

// A workflow whose first segment a worker dead-letters (a message on the
// segment's subject that no worker can use, published by another client in
// place of Start's) ends failed with the reason, found by the scheduler's
// repair sweep; its code never runs. Before, it stayed pending for good:
// the sweep saw that the segment had a record and looked no further.
func TestWorkflowWhoseFirstSegmentIsDeadLetteredFails(t *testing.T) {
	t.Parallel()
	e := setup(t)
	def := workflow.Define("test.deadseg", func(wf *workflow.Context, _ struct{}) (string, error) {
		e.inc("ran")
		return "ran", nil
	})
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, def, struct{}{})
	must(t, err)
	scfg := streams.Config{}.WithDefaults()
	fs, err := e.JS.Stream(ctx, scfg.FunctionStream())
	must(t, err)
	subject := scfg.FunctionSubject(workflow.SegmentFunction(def.Name()), workflow.SegmentID(id, 1))
	must(t, fs.Purge(ctx, jetstream.WithPurgeSubject(subject)))
	h := nats.Header{}
	h.Set(streams.HeaderAttempt, "not a number")
	_, err = e.JS.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: h, Data: []byte(`{}`)})
	must(t, err)
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	_, sjs := e.Connect()
	s, err := scheduler.New(ctx, sjs, scheduler.Config{LeaseTTL: time.Second, RepairInterval: 500 * time.Millisecond, RepairGrace: 500 * time.Millisecond})
	must(t, err)
	must(t, s.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Stop(sctx)
	})
	if _, err := workflow.Result(ctx, e.P, def, id); err == nil || !strings.Contains(err.Error(), "dead-lettered") {
		t.Fatalf("Result: %v; want the workflow failed, its first segment dead-lettered", err)
	}
	r, err := e.P.Get(ctx, id)
	must(t, err)
	if r.State != jetflow.Failed || !strings.Contains(r.Error, jetflow.ErrBadMessage.Error()) || !strings.Contains(r.Error, streams.HeaderAttempt) {
		t.Fatalf("workflow record: %s %q", r.State, r.Error)
	}
	if n := e.n("ran"); n != 0 {
		t.Fatalf("the workflow's code ran %d times", n)
	}
}
