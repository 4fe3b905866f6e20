package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go"
)

// REVIEW: a message whose Jetflow-Rev is past an existing record's
// revision: the leader's read (revision below it) now counts as unread.
func TestReviewRevisionPastRecord(t *testing.T) {
	logs := &testserver.Buffer{}
	e := setup(t, worker.Config{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	var n atomic.Int32
	worker.Handle(e.W, hostileFn, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		n.Add(1)
		time.Sleep(500 * time.Millisecond)
		return nil
	})
	e.start(t)
	ctx := context.Background()
	scfg := streams.Config{}.WithDefaults()
	store, err := kv.Open(ctx, e.JS, scfg)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	id := "rev-past"
	r := &jetflow.Run{ID: id, Name: hostileFn.Name(), Kind: jetflow.Retryable, Args: []byte(`{"n":1}`), State: jetflow.Pending, ScheduledTime: now, CreationTime: now}
	if _, err := engine.New(store).Write(ctx, engine.Schedule, engine.None, r, 0); err != nil {
		t.Fatal(err)
	}
	h := nats.Header{}
	h.Set(streams.HeaderRev, "4242")
	h.Set("Nats-Msg-Id", id)
	if _, err := e.JS.PublishMsg(ctx, &nats.Msg{Subject: scfg.FunctionSubject(hostileFn.Name(), id), Header: h, Data: []byte(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(15 * time.Second)
	cur, _ := e.P.Get(ctx, id)
	t.Logf("after 15 s: handler ran %d times; record %s attempts %d; outcome retries logged %d; discarded %v",
		n.Load(), cur.State, cur.Attempts, strings.Count(logs.String(), "outcome write failed; retrying"),
		strings.Contains(logs.String(), "outcome discarded"))
}
