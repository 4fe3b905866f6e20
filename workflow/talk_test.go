package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var errNegative = errors.New("cart: negative quantity")

func init() {
	if err := workflow.RegisterError("cart.negative", errNegative); err != nil {
		panic(err)
	}
}

type cartState struct {
	Items int    `json:"items"`
	Phase string `json:"phase"`
}

// cartDef is an entity workflow: it answers query "state", takes updates
// "add" (validated: a positive quantity) until one is "checkout" (0), and
// sleeps a little between: queries work while it waits; an update is
// answered once journaled, and replays rebuild the state.
var cartDef = workflow.Define("test.cart", func(wf *workflow.Context, _ struct{}) (int, error) {
	st := cartState{Phase: "open"}
	workflow.SetQueryHandler(wf, "state", func() (cartState, error) { return st, nil })
	workflow.SetQueryHandler(wf, "fail", func() (int, error) { return 0, fmt.Errorf("asked: %w", errNegative) })
	for {
		n := -1
		err := workflow.AwaitUpdate(wf, "add", 0, func(q int) (int, error) {
			n = q
			st.Items += q
			return st.Items, nil
		}, func(q int) error {
			if q < 0 {
				return errNegative
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
		if n == 0 {
			break
		}
	}
	st.Phase = "checkout"
	if _, err := workflow.AwaitEvent[string](wf, "paid", 0); err != nil {
		return 0, err
	}
	return st.Items, nil
})

func TestQueryAndUpdate(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, cartDef)) })
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, cartDef, struct{}{})
	must(t, err)
	e.waiting(t, id)
	if st, err := workflow.Query[cartState](ctx, e.P, id, "state"); err != nil || st != (cartState{Phase: "open"}) {
		t.Fatalf("query before updates: %+v, %v", st, err)
	}
	for i, q := range []int{2, 3} {
		got, err := workflow.Update[int, int](ctx, e.P, id, "add", q)
		if want := []int{2, 5}[i]; err != nil || got != want {
			t.Fatalf("update add %d: %d, %v; want %d", q, got, err, want)
		}
	}
	// Through the producer, bytes in and out.
	raw, err := e.P.UpdateWorkflow(ctx, id, "add", []byte("4"))
	if err != nil || string(raw) != "9" {
		t.Fatalf("producer update: %s, %v", raw, err)
	}
	// Rejected by the validator: nothing changes, and the error keeps its
	// identity.
	if _, err := workflow.Update[int, int](ctx, e.P, id, "add", -1); !errors.Is(err, workflow.ErrUpdateRejected) {
		t.Fatalf("negative add: %v, want ErrUpdateRejected", err)
	}
	// The state, while the workflow waits: rebuilt by a read-only replay.
	e.waiting(t, id)
	if st, err := workflow.Query[cartState](ctx, e.P, id, "state"); err != nil || st != (cartState{Items: 9, Phase: "open"}) {
		t.Fatalf("query after updates: %+v, %v", st, err)
	}
	raw, err = e.P.QueryWorkflow(ctx, id, "state")
	if err != nil || string(raw) != `{"items":9,"phase":"open"}` {
		t.Fatalf("producer query: %s, %v", raw, err)
	}
	if _, err := workflow.Query[int](ctx, e.P, id, "fail"); !errors.Is(err, errNegative) {
		t.Errorf("failing query: %v, want errNegative", err)
	}
	if _, err := workflow.Query[int](ctx, e.P, id, "nope"); !errors.Is(err, workflow.ErrNoQueryHandler) {
		t.Errorf("unknown query: %v, want ErrNoQueryHandler", err)
	}
	if got, err := workflow.Update[int, int](ctx, e.P, id, "add", 0); err != nil || got != 9 {
		t.Fatalf("checkout: %d, %v", got, err)
	}
	testserver.Eventually(t, 20*time.Second, "state checkout", func() bool {
		st, err := workflow.Query[cartState](ctx, e.P, id, "state")
		return err == nil && st == cartState{Items: 9, Phase: "checkout"}
	})
	// An update nobody takes in time: ErrUpdateTimeout.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := workflow.Update[int, int](short, e.P, id, "add", 1); !errors.Is(err, workflow.ErrUpdateTimeout) {
		t.Errorf("update never awaited: %v, want ErrUpdateTimeout", err)
	}
	must(t, workflow.SendEvent(ctx, e.P, id, "paid", "ok"))
	if n, err := workflow.Result(ctx, e.P, cartDef, id); err != nil || n != 9 {
		t.Fatalf("result %d, %v", n, err)
	}
	// After the end, the query replays the whole run.
	if st, err := workflow.Query[cartState](ctx, e.P, id, "state"); err != nil || st.Items != 9 {
		t.Errorf("query after the end: %+v, %v", st, err)
	}
}

// An update whose store met a server that answered nothing (its reply
// lost, as across a server restart) is stored once: the store is tried
// again on the same key within the caller's ctx, and the refusal of the
// try again is its first try, found stored; the caller gets its answer,
// and the update is applied once. One whose caller's ctx ends while its
// store is unanswered gets ErrUpdateTimeout (it may be stored, so sending
// it again could apply it twice), not an error saying nothing was stored:
// it was, and is applied.
func TestUpdateWhoseStoreReplyIsLost(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, cartDef)) })
	gate, gp := gatedProducer(t, e.Port)
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, cartDef, struct{}{})
	must(t, err)
	e.waiting(t, id)
	lose := func() { loseRepliesFor(gate, id+".up.add.") }

	lose()
	if got, err := workflow.Update[int, int](ctx, gp, id, "add", 2); err != nil || got != 2 {
		t.Fatalf("update whose first store went unanswered: %d, %v; want 2", got, err)
	}
	testserver.Eventually(t, 20*time.Second, "gate open", func() bool { return !gate.Holding() })

	lose()
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := workflow.Update[int, int](short, gp, id, "add", 3); !errors.Is(err, workflow.ErrUpdateTimeout) {
		t.Fatalf("update whose store went unanswered until its ctx ended: %v, want ErrUpdateTimeout", err)
	}
	testserver.Eventually(t, 20*time.Second, "the unanswered update applied", func() bool {
		st, err := workflow.Query[cartState](ctx, e.P, id, "state")
		return err == nil && st.Items == 5
	})
	// Each applied once: checkout answers the total.
	if got, err := workflow.Update[int, int](ctx, e.P, id, "add", 0); err != nil || got != 5 {
		t.Fatalf("checkout: %d, %v; want 5 (2 and 3, each once)", got, err)
	}
}

// pingsDef counts the events "ping" it takes until one says "end".
var pingsDef = workflow.Define("test.pings", func(wf *workflow.Context, _ struct{}) (int, error) {
	n := 0
	for {
		s, err := workflow.AwaitEvent[string](wf, "ping", 0)
		if err != nil || s == "end" {
			return n, err
		}
		n++
	}
})

// An event whose store met a server that answered nothing is stored once
// (its store made again on the same key, the refusal of the try again
// found to be its first try), and one whose caller's ctx ended while its
// store was unanswered gets producer.ErrEventUnconfirmed, not an error
// saying nothing was stored: it was, and is taken once.
func TestEventWhoseStoreReplyIsLost(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, pingsDef)) })
	gate, gp := gatedProducer(t, e.Port)
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, pingsDef, struct{}{})
	must(t, err)
	e.waiting(t, id)
	lose := func() { loseRepliesFor(gate, id+".ev.ping.") }
	lose()
	if err := gp.SendEvent(ctx, id, "ping", "one"); err != nil {
		t.Fatalf("event whose first store went unanswered: %v", err)
	}
	testserver.Eventually(t, 20*time.Second, "gate open", func() bool { return !gate.Holding() })
	lose()
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := workflow.SendEvent(short, gp, id, "ping", "two"); !errors.Is(err, producer.ErrEventUnconfirmed) {
		t.Fatalf("event whose store went unanswered until its ctx ended: %v, want ErrEventUnconfirmed", err)
	}
	testserver.Eventually(t, 20*time.Second, "gate open", func() bool { return !gate.Holding() })
	must(t, e.P.SendEvent(ctx, id, "ping", "end"))
	if n, err := workflow.Result(ctx, e.P, pingsDef, id); err != nil || n != 2 {
		t.Fatalf("result %d, %v; want 2 (each ping taken once)", n, err)
	}
}

// SendEventWithStart whose event store, on the call that starts the
// workflow, goes unanswered until the caller's ctx ends returns
// ErrEventUnconfirmed (the event may be stored), as SendEvent does, and
// the event is taken once. Before, that store was one create and its
// failure read as ErrNotPublished ("recorded, the repair sweep publishes
// it"), which a caller takes as accepted, whether the event was stored or
// not.
func TestSendEventWithStartWhoseEventReplyIsLost(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, pingsDef)) })
	e.startRepairingScheduler(t) // publishes a first segment a caller's ctx left unpublished
	gate, gp := gatedProducer(t, e.Port)
	ctx := testCtx(t)
	id := "with-start-lost-reply"
	// The event's store reaches the server; its reply is held until after
	// the caller's ctx ended.
	loseRepliesFor(gate, id+".ev.ping.")
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := workflow.SendEventWithStart(short, gp, pingsDef, id, struct{}{}, "ping", "one")
	if !errors.Is(err, workflow.ErrEventUnconfirmed) {
		t.Fatalf("send with start whose event store went unanswered until its ctx ended: %v, want ErrEventUnconfirmed", err)
	}
	testserver.Eventually(t, 20*time.Second, "gate open", func() bool { return !gate.Holding() })
	must(t, e.P.SendEvent(ctx, id, "ping", "end"))
	if n, err := workflow.Result(ctx, e.P, pingsDef, id); err != nil || n != 1 {
		t.Fatalf("result %d, %v; want 1 (the ping taken once)", n, err)
	}
}

// gatedProducer is a producer whose connection goes through a gate in
// front of the server on port: the test holds the server's replies.
func gatedProducer(t *testing.T, port int) (*testserver.Gate, *producer.Producer) {
	t.Helper()
	gate := testserver.NewGate(t, port)
	nc, err := nats.Connect(gate.URL(), nats.MaxReconnects(-1))
	must(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	must(t, err)
	gp, err := producer.New(context.Background(), js, producer.Config{})
	must(t, err)
	return gate, gp
}

// loseRepliesFor holds the replies to what gate carries after a message
// naming subject, for 3 s (past one try of a store), as a server restart
// loses them.
func loseRepliesFor(gate *testserver.Gate, subject string) {
	gate.HoldRepliesAfter([]byte(subject))
	go func() {
		time.Sleep(3 * time.Second)
		gate.Open()
	}()
}
