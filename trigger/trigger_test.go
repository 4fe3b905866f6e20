package trigger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/trigger"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Each message on the stream's filtered subjects makes exactly one run,
// its id derived from the stream and sequence, its args the message's
// JSON; messages on other subjects make none.
func TestStreamTriggerMakesOneRunPerMessage(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.ordersStream()
	e.publish("orders.created", 0, 40, nil)
	e.publish("orders.canceled", 100, 5, nil) // not on the filter
	e.worker()
	r := e.runner(trigger.Config{}, func(r *trigger.Runner) {
		if err := trigger.Bind(r, trigger.Func(Ship), trigger.Spec[Order]{Name: "ship", Stream: "ORDERS", Subjects: []string{"orders.created"}}); err != nil {
			t.Fatal(err)
		}
	})
	e.publish("orders.created", 40, 10, nil) // after Start
	recs := e.waitRecords(Ship.Name(), 50, jetflow.Success)
	if len(recs) != 50 {
		t.Fatalf("%d records of %s, want 50", len(recs), Ship.Name())
	}
	epoch := e.streamEpoch("ORDERS")
	// Sequences 1-40: o0-o39 (before Start); 41-45: orders.canceled (no
	// run); 46-55: o40-o49 (after Start).
	for seq := uint64(1); seq <= 55; seq++ {
		id := trigger.StreamRunID("ship", "ORDERS", epoch, seq)
		if seq >= 41 && seq <= 45 {
			if recs[id] != nil {
				t.Fatalf("run %s for sequence %d, on orders.canceled (not on the filter)", id, seq)
			}
			continue
		}
		order := seq - 1
		if seq > 45 {
			order = seq - 6
		}
		if recs[id] == nil {
			t.Fatalf("no run %s for sequence %d", id, seq)
		}
		var o Order
		if err := json.Unmarshal(recs[id].Args, &o); err != nil || o.ID != fmt.Sprintf("o%d", order) || o.Amount != int(order) {
			t.Fatalf("run %s (sequence %d) args %s, want order o%d", id, seq, recs[id].Args, order)
		}
	}
	runs, execs := e.executed()
	if runs != 50 || execs != 50 {
		t.Fatalf("handler ran %d runs in %d executions, want 50 in 50", runs, execs)
	}
	testserver.Eventually(t, 10*time.Second, "counters", func() bool {
		st := r.Stats("ship")
		return st.Messages == 50 && st.Runs == 50
	})
}

// A redelivery never makes a second run, also long after the message was
// first handled (beyond any duplicate window): the trigger's consumer is
// deleted and made again, so every message comes again, and each finds
// its run.
func TestRedeliveryThroughFreshConsumerMakesNoSecondRun(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.ordersStream()
	e.publish("orders.created", 0, 30, nil)
	// One failed record too: a message that is not an Order.
	e.publishRaw("orders.created", []byte(`{"id": 7}`), nil)
	e.worker()
	bind := func(r *trigger.Runner) {
		if err := trigger.Bind(r, trigger.Func(Ship), trigger.Spec[Order]{Name: "ship", Stream: "ORDERS"}); err != nil {
			t.Fatal(err)
		}
	}
	r1 := e.runner(trigger.Config{}, bind)
	e.waitRecords(Ship.Name(), 30, jetflow.Success)
	e.waitRecords(Ship.Name(), 1, jetflow.Failed)
	if err := r1.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if err := e.js.DeleteConsumer(ctx, "ORDERS", kv.TriggerConsumer(streams.Config{}, "ship")); err != nil {
		t.Fatal(err)
	}
	r2 := e.runner(trigger.Config{}, bind)
	testserver.Eventually(t, 30*time.Second, "every message delivered again", func() bool {
		st := r2.Stats("ship")
		return st.Messages == 31
	})
	st := r2.Stats("ship")
	if st.Runs != 0 || st.Existing != 31 || st.Failed != 0 {
		t.Fatalf("second pass: %+v, want 31 existing, no run, no failure", st)
	}
	recs := e.records(Ship.Name())
	if len(recs) != 31 || countState(recs, jetflow.Success) != 30 || countState(recs, jetflow.Failed) != 1 {
		t.Fatalf("%d records (%d success, %d failed), want 31 (30, 1)", len(recs), countState(recs, jetflow.Success), countState(recs, jetflow.Failed))
	}
	if runs, execs := e.executed(); runs != 30 || execs != 30 {
		t.Fatalf("handler ran %d runs in %d executions, want 30 in 30", runs, execs)
	}
}

// With an id header, the run id comes from its value: the same event
// published three times is one run; a message without the header is a
// failed run saying so.
func TestHeaderIDMakesOneRunPerEvent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.ordersStream()
	for i := 0; i < 3; i++ {
		e.publishRaw("orders.created", []byte(`{"id":"a","amount":1}`), nats.Header{"Order-Id": {"A-1"}})
	}
	e.publishRaw("orders.created", []byte(`{"id":"b","amount":2}`), nats.Header{"Order-Id": {"B-2"}})
	e.publishRaw("orders.created", []byte(`{"id":"c","amount":3}`), nil)
	e.worker()
	e.runner(trigger.Config{}, func(r *trigger.Runner) {
		if err := trigger.Bind(r, trigger.Func(Ship), trigger.Spec[Order]{Name: "byorder", Stream: "ORDERS", IDHeader: "Order-Id"}); err != nil {
			t.Fatal(err)
		}
	})
	e.waitRecords(Ship.Name(), 2, jetflow.Success)
	recs := e.waitRecords(Ship.Name(), 1, jetflow.Failed)
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3: %v", len(recs), recs)
	}
	for _, id := range []string{trigger.HeaderRunID("byorder", "A-1"), trigger.HeaderRunID("byorder", "B-2")} {
		if r := recs[id]; r == nil || r.State != jetflow.Success {
			t.Fatalf("run %s: %+v", id, r)
		}
	}
	failed := recs[trigger.StreamRunID("byorder", "ORDERS", e.streamEpoch("ORDERS"), 5)]
	if failed == nil || failed.State != jetflow.Failed {
		t.Fatalf("no failed record for the message without Order-Id: %v", recs)
	}
	mustContain(t, failed.Error, trigger.ErrNoID.Error(), "Order-Id", "ORDERS #5")
	if runs, execs := e.executed(); runs != 2 || execs != 2 {
		t.Fatalf("handler ran %d runs in %d executions, want 2 in 2", runs, execs)
	}
}

// A typed mapping makes the args; a message it refuses, one that panics
// it, and one whose JSON is not the function's are failed runs with the
// reason; the filter skips messages (acked, counted, no run); the
// trigger keeps going after each.
func TestBadMappingsAndFiltersLeaveFailedRecords(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.ordersStream()
	e.worker()
	var epoch int64
	r := e.runner(trigger.Config{Batch: 4}, func(r *trigger.Runner) {
		err := trigger.Bind(r, trigger.Func(Ship), trigger.Spec[Order]{
			Name: "mapped", Stream: "ORDERS",
			Filter: func(m jetstream.Msg) bool { return m.Headers().Get("Skip") == "" },
			Map: func(m jetstream.Msg) (Order, error) {
				switch string(m.Data()) {
				case "panic":
					panic("mapping exploded")
				case "refuse":
					return Order{}, errors.New("no customer")
				}
				n, err := strconv.Atoi(string(m.Data()))
				if err != nil {
					return Order{}, fmt.Errorf("amount %q: %w", m.Data(), err)
				}
				return Order{ID: "n" + string(m.Data()), Amount: n}, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	epoch = e.streamEpoch("ORDERS")
	bodies := []string{"1", "refuse", "2", "panic", "3", "x", "4"}
	for _, b := range bodies {
		e.publishRaw("orders.created", []byte(b), nil)
	}
	e.publishRaw("orders.created", []byte("5"), nats.Header{"Skip": {"yes"}})
	e.publishRaw("orders.created", []byte("6"), nil)
	e.waitRecords(Ship.Name(), 5, jetflow.Success)
	recs := e.waitRecords(Ship.Name(), 3, jetflow.Failed)
	if len(recs) != 8 {
		t.Fatalf("%d records, want 8 (5 runs, 3 failed)", len(recs))
	}
	want := map[uint64]string{2: "no customer", 4: "mapping exploded", 6: `amount "x"`}
	for seq, reason := range want {
		r := recs[trigger.StreamRunID("mapped", "ORDERS", epoch, seq)]
		if r == nil || r.State != jetflow.Failed || !r.Permanent {
			t.Fatalf("sequence %d: %+v", seq, r)
		}
		mustContain(t, r.Error, "trigger mapped", trigger.ErrMapping.Error(), reason)
	}
	if recs[trigger.StreamRunID("mapped", "ORDERS", epoch, 8)] != nil {
		t.Fatal("the skipped message made a record")
	}
	if a := e.argsOf(trigger.StreamRunID("mapped", "ORDERS", epoch, 9)); a.Amount != 6 || a.ID != "n6" {
		t.Fatalf("mapped args: %+v", a)
	}
	testserver.Eventually(t, 10*time.Second, "counters", func() bool {
		st := r.Stats("mapped")
		return st.Messages == 9 && st.Runs == 5 && st.Failed == 3 && st.Skipped == 1
	})
	// The default mapping: JSON that is not an Order is a failed run.
	e.publishRaw("orders.created", []byte(`["not","an","order"]`), nil)
	r2 := e.runner(trigger.Config{}, func(r *trigger.Runner) {
		if err := trigger.Bind(r, trigger.Func(Ship), trigger.Spec[Order]{Name: "plainjson", Stream: "ORDERS", DeliverNew: true}); err != nil {
			t.Fatal(err)
		}
	})
	e.publishRaw("orders.created", []byte(`{"id":`), nil)
	e.publishRaw("orders.created", []byte(`{"id":"ok","amount":1}`), nil)
	testserver.Eventually(t, 30*time.Second, "default mapping handled", func() bool {
		st := r2.Stats("plainjson")
		return st.Messages == 2 && st.Failed == 1 && st.Runs == 1
	})
	bad := e.records(Ship.Name())[trigger.StreamRunID("plainjson", "ORDERS", epoch, 11)]
	if bad == nil || bad.State != jetflow.Failed {
		t.Fatalf("invalid JSON: %+v", bad)
	}
	mustContain(t, bad.Error, jetflow.ErrBadArgs.Error(), "Order")
}

// A trigger on plain subjects: jetflow captures them into a stream of its
// own, and each message published (core NATS) after Start is one run.
func TestPlainSubjectTriggerCapturesMessages(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.worker()
	e.runner(trigger.Config{}, func(r *trigger.Runner) {
		if err := trigger.Bind(r, trigger.Func(Ship), trigger.Spec[Order]{Name: "signup", Subjects: []string{"events.signup", "events.vip.>"}}); err != nil {
			t.Fatal(err)
		}
	})
	for i := 0; i < 10; i++ {
		subj := "events.signup"
		if i%2 == 1 {
			subj = "events.vip.gold"
		}
		if err := e.nc.Publish(subj, []byte(fmt.Sprintf(`{"id":"s%d","amount":%d}`, i, i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.nc.Publish("events.other", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	recs := e.waitRecords(Ship.Name(), 10, jetflow.Success)
	if len(recs) != 10 {
		t.Fatalf("%d records, want 10", len(recs))
	}
	epoch := e.streamEpoch(kv.CaptureStream(streams.Config{}, "signup"))
	for seq := uint64(1); seq <= 10; seq++ {
		if recs[trigger.StreamRunID("signup", "JETFLOW_TRIGGER_signup", epoch, seq)] == nil {
			t.Fatalf("no run for captured message %d: %v", seq, recs)
		}
	}
	// Work queue: a message leaves the capture stream once its run is accepted.
	testserver.Eventually(t, 10*time.Second, "capture stream emptied", func() bool {
		st, err := e.js.Stream(testCtx(t), "JETFLOW_TRIGGER_signup")
		return err == nil && st.CachedInfo().State.Msgs == 0
	})
}

// Backpressure: with no worker serving the function, the trigger makes
// window runs and holds off; a worker then drains them, and the trigger
// the rest: exactly one run per message.
func TestWindowBoundsUnstartedRuns(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.ordersStream()
	e.publish("orders.created", 0, 100, nil)
	r := e.runner(trigger.Config{Batch: 8}, func(r *trigger.Runner) {
		if err := trigger.Bind(r, trigger.Func(Ship), trigger.Spec[Order]{Name: "windowed", Stream: "ORDERS", Window: 20}); err != nil {
			t.Fatal(err)
		}
	})
	testserver.Eventually(t, 30*time.Second, "trigger held at its window", func() bool {
		st := r.Stats("windowed")
		return st.Held && st.Runs == 20
	})
	if recs := e.records(Ship.Name()); len(recs) != 20 || countState(recs, jetflow.Pending) != 20 {
		t.Fatalf("%d records (%d pending) while held, want 20 pending", len(recs), countState(recs, jetflow.Pending))
	}
	if st := r.Stats("windowed"); st.Runs != 20 || st.Messages != 20 {
		t.Fatalf("held trigger: %+v", st)
	}
	e.worker()
	recs := e.waitRecords(Ship.Name(), 100, jetflow.Success)
	if len(recs) != 100 {
		t.Fatalf("%d records, want 100", len(recs))
	}
	if runs, execs := e.executed(); runs != 100 || execs != 100 {
		t.Fatalf("handler ran %d runs in %d executions, want 100 in 100", runs, execs)
	}
}

// Several runners of one trigger share its durable consumer: each message
// is handled by one of them, one run each, and both take part.
//
// Both runners wait on the consumer (a pull request each) before the
// messages come, and the messages outnumber what one runner handles while
// the other re-issues its pull: each gets some.
func TestRunnersShareTheConsumer(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.ordersStream()
	e.worker()
	const n = 400
	bind := func(r *trigger.Runner) {
		if err := trigger.Bind(r, trigger.Func(Ship), trigger.Spec[Order]{Name: "shared", Stream: "ORDERS"}); err != nil {
			t.Fatal(err)
		}
	}
	r1 := e.runner(trigger.Config{Batch: 5}, bind)
	r2 := e.runner(trigger.Config{Batch: 5}, bind)
	ctx := testCtx(t)
	testserver.Eventually(t, 20*time.Second, "both runners waiting on the shared consumer", func() bool {
		if len(r1.Running()) != 1 || len(r2.Running()) != 1 {
			return false
		}
		c, err := e.js.Consumer(ctx, "ORDERS", kv.TriggerConsumer(streams.Config{}, "shared"))
		if err != nil {
			return false
		}
		ci, err := c.Info(ctx)
		return err == nil && ci.NumWaiting >= 2
	})
	e.publish("orders.created", 0, n, nil)
	recs := e.waitRecords(Ship.Name(), n, jetflow.Success)
	if len(recs) != n {
		t.Fatalf("%d records, want %d", len(recs), n)
	}
	testserver.Eventually(t, 10*time.Second, "both runners' counters", func() bool {
		return r1.Stats("shared").Messages+r2.Stats("shared").Messages == n
	})
	s1, s2 := r1.Stats("shared"), r2.Stats("shared")
	if s1.Runs+s2.Runs != n || s1.Existing+s2.Existing != 0 {
		t.Fatalf("runners: %+v %+v", s1, s2)
	}
	t.Logf("runners handled %d and %d messages", s1.Messages, s2.Messages)
	if s1.Messages == 0 || s2.Messages == 0 {
		t.Fatalf("one runner handled every message: %d and %d", s1.Messages, s2.Messages)
	}
	if runs, execs := e.executed(); runs != n || execs != n {
		t.Fatalf("handler ran %d runs in %d executions, want %d in %d", runs, execs, n, n)
	}
}

// A run-time trigger (Add): runners running run-time triggers start it
// without a restart, pause and resume it, and stop it when it is deleted.
func TestRuntimeTriggerAddPauseResumeDelete(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.ordersStream()
	e.worker()
	r := e.runner(trigger.Config{}, nil)
	ctx := testCtx(t)
	def, err := trigger.Add(ctx, e.p, trigger.Def{Name: "rt", Function: Ship.Name(), Stream: "ORDERS", Subjects: []string{"orders.created"}})
	if err != nil {
		t.Fatal(err)
	}
	if def.Window != trigger.DefaultWindow || def.Origin != kv.TriggerOriginRuntime {
		t.Fatalf("stored: %+v", def)
	}
	if _, err := trigger.Add(ctx, e.p, trigger.Def{Name: "rt", Function: Ship.Name(), Stream: "ORDERS"}); !errors.Is(err, trigger.ErrExists) {
		t.Fatalf("add twice: %v", err)
	}
	e.publish("orders.created", 0, 5, nil)
	e.waitRecords(Ship.Name(), 5, jetflow.Success)

	if _, err := trigger.Pause(ctx, e.p, "rt"); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 10*time.Second, "runner sees the pause", func() bool { return r.Stats("rt").Paused })
	e.publish("orders.created", 5, 5, nil)
	testserver.Eventually(t, 10*time.Second, "paused messages wait in the consumer", func() bool {
		infos, err := trigger.List(ctx, e.p)
		return err == nil && len(infos) == 1 && infos[0].Waiting == 5 && infos[0].Paused
	})
	if n := len(e.records(Ship.Name())); n != 5 {
		t.Fatalf("%d records while paused, want 5", n)
	}
	if _, err := trigger.Resume(ctx, e.p, "rt"); err != nil {
		t.Fatal(err)
	}
	e.waitRecords(Ship.Name(), 10, jetflow.Success)

	if err := trigger.Delete(ctx, e.p, "rt"); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 10*time.Second, "runner stops the deleted trigger", func() bool { return len(r.Running()) == 0 })
	if _, err := e.js.Consumer(ctx, "ORDERS", kv.TriggerConsumer(streams.Config{}, "rt")); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("consumer after delete: %v", err)
	}
	if _, err := trigger.Pause(ctx, e.p, "rt"); !errors.Is(err, trigger.ErrNotFound) || !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("pause deleted: %v", err)
	}
	if err := trigger.Delete(ctx, e.p, "rt"); !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	// Two triggers cannot capture one plain subject.
	if _, err := trigger.Add(ctx, e.p, trigger.Def{Name: "cap1", Function: Ship.Name(), Subjects: []string{"signals.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := trigger.Add(ctx, e.p, trigger.Def{Name: "cap2", Function: Ship.Name(), Subjects: []string{"signals.red"}}); !errors.Is(err, trigger.ErrSubjectsTaken) {
		t.Fatalf("a second capture of signals.red: %v, want ErrSubjectsTaken", err)
	}
	if _, err := trigger.Get(ctx, e.p, "cap2"); !errors.Is(err, trigger.ErrNotFound) {
		t.Fatalf("the refused trigger was stored: %v", err)
	}
	// A run-time trigger with invalid JSON on its subject: a failed run.
	if _, err := trigger.Add(ctx, e.p, trigger.Def{Name: "rt2", Function: Ship.Name(), Stream: "ORDERS", DeliverNew: true}); err != nil {
		t.Fatal(err)
	}
	e.publishRaw("orders.created", []byte("not json"), nil)
	recs := e.waitRecords(Ship.Name(), 1, jetflow.Failed)
	for _, rec := range recs {
		if rec.State == jetflow.Failed {
			mustContain(t, rec.Error, "trigger rt2", "not JSON")
		}
	}
}

// A code trigger paused at run time stays paused when its program starts
// again; a runner that runs only code triggers ignores run-time ones.
func TestCodeTriggerKeepsItsPauseAcrossRestarts(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.ordersStream()
	bind := func(r *trigger.Runner) {
		if err := trigger.Bind(r, trigger.Func(Ship), trigger.Spec[Order]{Name: "code", Stream: "ORDERS"}); err != nil {
			t.Fatal(err)
		}
	}
	r1 := e.runner(trigger.Config{CodeOnly: true}, bind)
	ctx := testCtx(t)
	if _, err := trigger.Pause(ctx, e.p, "code"); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 10*time.Second, "pause seen", func() bool { return r1.Stats("code").Paused })
	if _, err := trigger.Add(ctx, e.p, trigger.Def{Name: "other", Function: Ship.Name(), Stream: "ORDERS"}); err != nil {
		t.Fatal(err)
	}
	if err := r1.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	r2 := e.runner(trigger.Config{CodeOnly: true}, bind)
	testserver.Eventually(t, 10*time.Second, "restarted runner runs its trigger, paused", func() bool {
		return len(r2.Running()) == 1 && r2.Stats("code").Paused
	})
	if got := r2.Running(); got[0] != "code" {
		t.Fatalf("running %v, want only the code trigger", got)
	}
	def, err := trigger.Get(ctx, e.p, "code")
	if err != nil || !def.Paused || def.Origin != kv.TriggerOriginCode {
		t.Fatalf("definition %+v %v", def, err)
	}
	// Messages on the source wait: the code trigger is paused, and the
	// run-time one ("other", same stream) has no runner, the runners being
	// code only. No run is made for them.
	const n = 3
	e.publish("orders.created", 0, n, nil)
	var infos map[string]trigger.Info
	testserver.Eventually(t, 10*time.Second, "both triggers' messages waiting", func() bool {
		list, err := trigger.List(ctx, e.p)
		if err != nil {
			return false
		}
		infos = map[string]trigger.Info{}
		for _, ti := range list {
			infos[ti.Name] = ti
		}
		return infos["code"].Waiting == n && infos["other"].Waiting == n
	})
	if c := infos["code"]; !c.Paused || c.State() != "paused" || c.InFlight != 0 {
		t.Fatalf("code trigger: %+v (state %s), want paused, nothing in flight", c, c.State())
	}
	if o := infos["other"]; o.Paused || len(o.Runners) != 0 || o.State() != "no runner" || o.InFlight != 0 {
		t.Fatalf("run-time trigger: %+v (state %s), want no runner among the code-only runners", o, o.State())
	}
	if recs := e.records(Ship.Name()); len(recs) != 0 {
		t.Fatalf("%d runs made while paused / not run", len(recs))
	}
	if st := r2.Stats("code"); st.Messages != 0 || st.Runs != 0 {
		t.Fatalf("paused trigger handled messages: %+v", st)
	}
	if st := r2.Stats("other"); st.Messages != 0 || st.Runs != 0 {
		t.Fatalf("code-only runner handled the run-time trigger: %+v", st)
	}
}

type Signup struct {
	Email string `json:"email"`
}

// A trigger can start a workflow: each message one workflow, id
// workflow.TriggeredID(<run id>).
func TestTriggerStartsWorkflows(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.ordersStream()
	flow := workflow.Define("test.trigger.flow", func(wf *workflow.Context, in Signup) (string, error) {
		return workflow.Step(wf, "greet", func(ctx context.Context) (string, error) { return "hi " + in.Email, nil })
	})
	e.worker(func(w *worker.Worker) {
		if err := workflow.Register(w, flow); err != nil {
			t.Fatal(err)
		}
	})
	e.runner(trigger.Config{}, func(r *trigger.Runner) {
		if err := trigger.Bind(r, trigger.Workflow(flow), trigger.Spec[Signup]{Name: "flows", Stream: "ORDERS"}); err != nil {
			t.Fatal(err)
		}
	})
	e.publishRaw("orders.created", []byte(`{"email":"a@b.c"}`), nil)
	id := workflow.TriggeredID(trigger.StreamRunID("flows", "ORDERS", e.streamEpoch("ORDERS"), 1))
	ctx := testCtx(t)
	var out string
	testserver.Eventually(t, 60*time.Second, "workflow started", func() bool {
		_, err := e.p.Get(ctx, id)
		return err == nil
	})
	out, err := workflow.Result(ctx, e.p, flow, id)
	if err != nil || out != "hi a@b.c" {
		t.Fatalf("workflow %s: %q %v", id, out, err)
	}
}

func TestInvalidDefinitionsAreRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := trigger.New(e.p, trigger.Config{})
	cases := []trigger.Spec[Order]{
		{Name: "", Stream: "ORDERS"},
		{Name: "has.dot", Stream: "ORDERS"},
		{Name: "nosource"},
		{Name: "badsubj", Subjects: []string{"a..b"}},
		{Name: "badwild", Subjects: []string{"a.>.b"}},
		{Name: "badstream", Stream: "a.b"},
		{Name: "window", Stream: "S", Window: trigger.MaxWindow + 1},
		{Name: "hdr", Stream: "S", IDHeader: "a b"},
	}
	for _, c := range cases {
		if err := trigger.Bind(r, trigger.Func(Ship), c); !errors.Is(err, trigger.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", c, err)
		}
	}
	ok := trigger.Spec[Order]{Name: "ok", Stream: "S"}
	if err := trigger.Bind(r, trigger.Func(Ship), ok); err != nil {
		t.Fatal(err)
	}
	if err := trigger.Bind(r, trigger.Func(Ship), ok); !errors.Is(err, trigger.ErrBound) {
		t.Fatalf("bind twice: %v", err)
	}
	if _, err := trigger.Add(testCtx(t), e.p, trigger.Def{Name: "nofn", Stream: "S"}); !errors.Is(err, trigger.ErrInvalid) {
		t.Fatalf("add without function: %v", err)
	}
	// A stream that does not exist: Start says so.
	if err := r.Start(testCtx(t)); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("start on a missing stream: %v", err)
	}
}

// Args too large for a run record (the message fits the user's stream) go
// to the payloads bucket (docs/wire-format.md, "Large payloads"): the run
// succeeds like any other.
func TestLargeArgsFromATriggerAreOffloaded(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.ordersStream()
	e.worker()
	r := e.runner(trigger.Config{}, func(r *trigger.Runner) {
		if err := trigger.Bind(r, trigger.Func(Ship), trigger.Spec[Order]{Name: "big", Stream: "ORDERS",
			Map: func(m jetstream.Msg) (Order, error) { return Order{ID: string(m.Data())}, nil }}); err != nil {
			t.Fatal(err)
		}
	})
	big := make([]byte, e.nc.MaxPayload()-3000)
	for i := range big {
		big[i] = 'x'
	}
	e.publishRaw("orders.created", big, nil)
	e.publishRaw("orders.created", []byte("small"), nil)
	recs := e.waitRecords(Ship.Name(), 2, jetflow.Success)
	if bad := recs[trigger.StreamRunID("big", "ORDERS", e.streamEpoch("ORDERS"), 1)]; bad == nil || bad.State != jetflow.Success {
		t.Fatalf("big message: %+v", bad)
	}
	testserver.Eventually(t, 10*time.Second, "counters", func() bool {
		st := r.Stats("big")
		return st.Failed == 0 && st.Runs == 2
	})
}

// A stream deleted and created again starts its sequences over: its
// messages still make runs of their own, not the old stream's runs.
func TestStreamMadeAgainMakesNewRuns(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.ordersStream()
	e.worker()
	r := e.runner(trigger.Config{}, func(r *trigger.Runner) {
		if err := trigger.Bind(r, trigger.Func(Ship), trigger.Spec[Order]{Name: "again", Stream: "ORDERS"}); err != nil {
			t.Fatal(err)
		}
	})
	e.publish("orders.created", 0, 3, nil)
	e.waitRecords(Ship.Name(), 3, jetflow.Success)
	ctx := testCtx(t)
	if err := e.js.DeleteStream(ctx, "ORDERS"); err != nil {
		t.Fatal(err)
	}
	e.ordersStream()
	e.publish("orders.created", 10, 3, nil)
	recs := e.waitRecords(Ship.Name(), 6, jetflow.Success)
	if len(recs) != 6 {
		t.Fatalf("%d records, want 6", len(recs))
	}
	testserver.Eventually(t, 10*time.Second, "counters", func() bool {
		st := r.Stats("again")
		return st.Runs == 6 && st.Existing == 0
	})
	if a := e.argsOf(trigger.StreamRunID("again", "ORDERS", e.streamEpoch("ORDERS"), 1)); a.ID != "o10" {
		t.Fatalf("first message of the new stream ran with %+v", a)
	}
}
