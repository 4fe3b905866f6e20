package worker_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
)

// A takeover's claim (of a run whose worker is gone) that lands unanswered
// is not given back: written back as pending, its message's attempt would
// look over and be acknowledged, leaving the run without a message. It
// waits LostAfter, as the lost worker's claim did, and the lost attempts
// keep counting: the run succeeds with the ghost's and the given-up claim's
// attempts lost in its history, its handler run once.
func TestTakeoverClaimLandedUnansweredIsNotGivenBack(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fn := jetflow.Define[string]("giveback.takeover")
	id := "takeover-1"
	ts, p, redeliver := lostWorkersRun(t, fn, id)

	var ran atomic.Int32
	gate, logs := gatedWorker(t, ts, 4*time.Second, func(w *worker.Worker) {
		worker.Handle(w, fn, func(ctx context.Context, j *worker.Job[string]) error {
			ran.Add(1)
			return nil
		}, worker.Options{ClaimAfter: -1})
	})

	gate.HoldRepliesAfter([]byte("PUB " + streams.KVSubject(streams.Config{}.RunsBucket(), id)))
	redeliver()
	testserver.Eventually(t, time.Minute, "the worker giving up its claim", func() bool {
		return strings.Contains(logs.String(), `msg="claim lost"`)
	})
	if r, err := p.Get(ctx, id); err != nil || r.Owner != "gated" {
		t.Fatalf("the takeover's claim did not land: %+v, %v", r, err)
	}
	gate.Open()
	r := waitTerminal(t, p, id, time.Minute)
	lost := lostAttempts(r)
	if r.State != jetflow.Success || ran.Load() != 1 || lost != 2 || r.Attempts < 2 {
		t.Fatalf("run %s at attempt %d, handler ran %d times, %d lost attempts in its history %+v; want success, run once, 2 lost\n%s",
			r.State, r.Attempts, ran.Load(), lost, r.History, logs.String())
	}
	if strings.Contains(logs.String(), "given back") {
		t.Fatalf("a takeover's claim was given back:\n%s", logs.String())
	}
}

// A run taken over from a lost worker keeps running on its first message
// (the lost attempt's), while its record counts the new attempt. That
// message, redelivered meanwhile (its worker's acks held up, a consumer
// leader change), is the run's only message: it is not acknowledged as
// "an older attempt's". Before, it was, and when the worker running the
// run died too the run stayed in progress with no message (for good
// without a scheduler's repair sweep).
func TestTakenOverRunKeepsItsMessage(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fn := jetflow.Define[string]("takeover.keeps")
	id := "takeover-keeps"
	ts, p, redeliver := lostWorkersRun(t, fn, id)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	gate, _ := gatedWorker(t, ts, 4*time.Second, func(w *worker.Worker) {
		worker.Handle(w, fn, func(ctx context.Context, j *worker.Job[string]) error {
			<-release // this worker dies first
			return nil
		})
	})
	redeliver()
	// Taken over, and heartbeating as attempt 2.
	testserver.Eventually(t, time.Minute, "the gated worker running attempt 2", func() bool {
		r, err := p.Get(ctx, id)
		return err == nil && r.State == jetflow.InProgress && r.Owner == "gated" && r.Attempts == 2
	})
	gate.Close() // the worker is cut off for good

	var ran atomic.Int32
	_, js := ts.Connect()
	w2, err := worker.New(ctx, js, worker.Config{ID: "second", AckWait: 2 * time.Second, LostAfter: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	worker.Handle(w2, fn, func(ctx context.Context, j *worker.Job[string]) error {
		ran.Add(1)
		return nil
	})
	if err := w2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w2.Stop(sctx)
	})
	// The second worker takes over once the first's heartbeat is LostAfter
	// old: attempt 3, both earlier attempts lost.
	r := waitTerminal(t, p, id, time.Minute)
	if r.State != jetflow.Success || ran.Load() != 1 || r.Attempts != 3 || lostAttempts(r) != 2 {
		t.Fatalf("run %s at attempt %d, the second worker ran it %d times, history %+v; want success at attempt 3, run once by the second worker, 2 lost",
			r.State, r.Attempts, ran.Load(), r.History)
	}
}

// lostWorkersRun stores run id of fn as a worker that is gone left it (in
// progress, attempt 1, its heartbeat an hour old) on a server of its own.
// redeliver publishes the lost attempt's message again, as a redelivery
// reads: no revision, not new, so the worker reads the record, finds the
// lost claim and takes over.
func lostWorkersRun(t *testing.T, fn jetflow.Function[string], id string) (*testserver.Env, *producer.Producer, func()) {
	t.Helper()
	ts := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	scfg := streams.Config{}.WithDefaults()
	store, err := kv.Open(ctx, ts.JS, scfg)
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour).UTC()
	ghost := &jetflow.Run{ID: id, Name: fn.Name(), Kind: jetflow.Retryable, Args: []byte(`"x"`), State: jetflow.InProgress,
		ScheduledTime: old, CreationTime: old, Attempts: 1, StartedTime: old, Heartbeat: old, Owner: "ghost"}
	if _, err := engine.New(store).Write(ctx, engine.Open, engine.None, ghost, 0); err != nil {
		t.Fatal(err)
	}
	return ts, p, func() {
		m := scfg.Message(streams.Envelope{Function: fn.Name(), ID: id, Attempt: 1, Scheduled: old, Created: old, Args: []byte(`"x"`)})
		if _, err := ts.JS.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
}

// lostAttempts counts the attempts r's history records as lost.
func lostAttempts(r *jetflow.Run) int {
	n := 0
	for _, a := range r.History {
		if a.Outcome == "lost" {
			n++
		}
	}
	return n
}
