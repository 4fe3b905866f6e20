package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A claim whose write lands but whose reply never comes (a runs leader
// killed mid-write) is given up by its worker, which never runs the
// handler. Once the record can be read again the worker gives the claim
// back, and the run starts on its next delivery: attempt 1, run once. Before,
// the landed claim held the run under a worker not running it until
// LostAfter, and then a retryable run counted a lost attempt and an
// at-most-once run failed as lost without ever having run.
func TestClaimLandedUnansweredIsGivenBack(t *testing.T) {
	t.Parallel()
	for _, kind := range []jetflow.Kind{jetflow.Retryable, jetflow.AtMostOnce} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			ts := testserver.Start(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			p, err := producer.New(ctx, ts.JS, producer.Config{})
			if err != nil {
				t.Fatal(err)
			}
			fn := jetflow.Define[string]("giveback."+string(kind), jetflow.WithKind(kind))
			var ran atomic.Int32
			gate, logs := gatedWorker(t, ts, 10*time.Minute, func(w *worker.Worker) {
				worker.Handle(w, fn, func(ctx context.Context, j *worker.Job[string]) error {
					ran.Add(1)
					return nil
				}, worker.Options{ClaimAfter: -1}) // claimed before it starts
			})

			id := "giveback-" + string(kind)
			// The claim reaches the server; nothing the server sends after
			// it reaches the worker.
			gate.HoldRepliesAfter([]byte("PUB " + streams.KVSubject(streams.Config{}.RunsBucket(), id)))
			if _, err := p.Enqueue(ctx, fn.With("x"), producer.WithID(id)); err != nil {
				t.Fatal(err)
			}
			testserver.Eventually(t, time.Minute, "the worker giving up its claim", func() bool {
				return strings.Contains(logs.String(), `msg="claim lost"`)
			})
			r, err := p.Get(ctx, id)
			if err != nil || r.State != jetflow.InProgress || r.Owner != "gated" {
				t.Fatalf("the claim did not land: %+v, %v", r, err)
			}
			gate.Open()

			r = waitTerminal(t, p, id, time.Minute)
			if r.State != jetflow.Success || r.Attempts != 1 || ran.Load() != 1 {
				t.Fatalf("run %s after attempts %d, handler ran %d times (%s); want success at attempt 1, run once\n%s",
					r.State, r.Attempts, ran.Load(), r.Error, logs.String())
			}
			if !strings.Contains(logs.String(), "claim landed after it was given up: given back") {
				t.Fatalf("no give-back in the log:\n%s", logs.String())
			}
		})
	}
}

// waitTerminal waits for run id to end and returns its record.
func waitTerminal(t *testing.T, p *producer.Producer, id string, within time.Duration) *jetflow.Run {
	t.Helper()
	var r *jetflow.Run
	testserver.Eventually(t, within, "run "+id+" ended", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		r, err = p.Get(ctx, id)
		return err == nil && r.State.Terminal()
	})
	return r
}

// gatedWorker starts a worker "gated" (AckWait 2 s, LostAfter lostAfter,
// its debug log in logs) connected to ts through a gate, with what
// register adds to it; it stops when the test ends.
func gatedWorker(t *testing.T, ts *testserver.Env, lostAfter time.Duration, register func(*worker.Worker)) (*testserver.Gate, *testserver.Buffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
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
		ID: "gated", AckWait: 2 * time.Second, LostAfter: lostAfter,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	register(w)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})
	return gate, logs
}
