package worker_test

import (
	"context"
	"log/slog"
	"os"
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
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// REVIEW: a takeover claim (of a run whose worker is gone) that lands
// unanswered is given back too. What does the run end as?
func TestReviewTakeoverClaimGivenBack(t *testing.T) {
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
	runs := engine.New(store)
	fn := jetflow.Define[string]("giveback.takeover")
	id := "takeover-1"
	old := time.Now().Add(-time.Hour).UTC()
	ghost := &jetflow.Run{ID: id, Name: fn.Name(), Kind: jetflow.Retryable, Args: []byte(`"x"`), State: jetflow.InProgress,
		ScheduledTime: old, CreationTime: old, Attempts: 1, StartedTime: old, Heartbeat: old, Owner: "ghost"}
	if _, err := runs.Write(ctx, engine.Open, engine.None, ghost, 0); err != nil {
		t.Fatal(err)
	}

	gate := testserver.NewGate(t, ts.Port)
	nc, err := nats.Connect(gate.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	logs := &testserver.Buffer{}
	w, err := worker.New(ctx, js, worker.Config{
		ID: "gated", AckWait: 2 * time.Second, LostAfter: 10 * time.Minute,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int32
	worker.Handle(w, fn, func(ctx context.Context, j *worker.Job[string]) error {
		ran.Add(1)
		t.Logf("handler attempt %d", j.Attempt())
		return nil
	}, worker.Options{ClaimAfter: -1})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})

	if os.Getenv("NOHOLD") == "" {
		gate.HoldRepliesAfter([]byte("PUB " + streams.KVSubject(scfg.RunsBucket(), id)))
	}
	// The lost attempt's message, redelivered: no revision, not new (reconcile).
	m := scfg.Message(streams.Envelope{Function: fn.Name(), ID: id, Attempt: 1, Scheduled: old, Created: old, Args: []byte(`"x"`)})
	if _, err := ts.JS.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("NOHOLD") != "" {
		testserver.Eventually(t, 40*time.Second, "ended", func() bool {
			r, err := p.Get(ctx, id)
			if err == nil && r.State.Terminal() {
				t.Logf("no fault: state %s attempts %d history %+v", r.State, r.Attempts, r.History)
			}
			return err == nil && r.State.Terminal()
		})
		return
	}
	testserver.Eventually(t, time.Minute, "the worker giving up its claim", func() bool {
		return strings.Contains(logs.String(), `msg="claim lost"`)
	})
	r, err := p.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("landed takeover claim: state %s owner %s attempts %d history %+v", r.State, r.Owner, r.Attempts, r.History)
	gate.Open()
	testserver.Eventually(t, time.Minute, "given back", func() bool {
		return strings.Contains(logs.String(), "given back")
	})
	r, _ = p.Get(ctx, id)
	t.Logf("after give-back: state %s attempts %d history %+v", r.State, r.Attempts, r.History)
	testserver.Eventually(t, 40*time.Second, "ended", func() bool {
		r, err = p.Get(ctx, id)
		return err == nil && r.State.Terminal()
	})
	t.Logf("end: state %s attempts %d ran %d history:", r.State, r.Attempts, ran.Load())
	for _, a := range r.History {
		t.Logf("  attempt %d worker %s outcome %s", a.Attempt, a.Worker, a.Outcome)
	}
}
