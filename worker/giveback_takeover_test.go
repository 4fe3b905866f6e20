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
	ts := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
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
	fn := jetflow.Define[string]("giveback.takeover")
	id := "takeover-1"
	old := time.Now().Add(-time.Hour).UTC()
	ghost := &jetflow.Run{ID: id, Name: fn.Name(), Kind: jetflow.Retryable, Args: []byte(`"x"`), State: jetflow.InProgress,
		ScheduledTime: old, CreationTime: old, Attempts: 1, StartedTime: old, Heartbeat: old, Owner: "ghost"}
	if _, err := engine.New(store).Write(ctx, engine.Open, engine.None, ghost, 0); err != nil {
		t.Fatal(err)
	}

	var ran atomic.Int32
	gate, logs := gatedWorker(t, ts, 4*time.Second, func(w *worker.Worker) {
		worker.Handle(w, fn, func(ctx context.Context, j *worker.Job[string]) error {
			ran.Add(1)
			return nil
		}, worker.Options{ClaimAfter: -1})
	})

	gate.HoldRepliesAfter([]byte("PUB " + streams.KVSubject(scfg.RunsBucket(), id)))
	// The lost attempt's message, redelivered: no revision, not new, so
	// the worker reads the record, finds the ghost's claim and takes over.
	m := scfg.Message(streams.Envelope{Function: fn.Name(), ID: id, Attempt: 1, Scheduled: old, Created: old, Args: []byte(`"x"`)})
	if _, err := ts.JS.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, time.Minute, "the worker giving up its claim", func() bool {
		return strings.Contains(logs.String(), `msg="claim lost"`)
	})
	if r, err := p.Get(ctx, id); err != nil || r.Owner != "gated" {
		t.Fatalf("the takeover's claim did not land: %+v, %v", r, err)
	}
	gate.Open()
	var r *jetflow.Run
	testserver.Eventually(t, time.Minute, "the run ended", func() bool {
		r, err = p.Get(ctx, id)
		return err == nil && r.State.Terminal()
	})
	lost := 0
	for _, a := range r.History {
		if a.Outcome == "lost" {
			lost++
		}
	}
	if r.State != jetflow.Success || ran.Load() != 1 || lost != 2 || r.Attempts < 2 {
		t.Fatalf("run %s at attempt %d, handler ran %d times, %d lost attempts in its history %+v; want success, run once, 2 lost\n%s",
			r.State, r.Attempts, ran.Load(), lost, r.History, logs.String())
	}
	if strings.Contains(logs.String(), "given back") {
		t.Fatalf("a takeover's claim was given back:\n%s", logs.String())
	}
}
