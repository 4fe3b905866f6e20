package worker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
)

// claimEnv starts a worker with one at-most-once function (its runs are
// claimed first), logging at debug level into the returned buffer.
func claimEnv(t *testing.T) (*testserver.Env, *Worker, *testserver.Buffer) {
	t.Helper()
	env := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := streams.Provision(ctx, env.JS, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	logs := &testserver.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w, err := New(ctx, env.JS, Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	fn := jetflow.Define[struct{}]("claim.fn", jetflow.WithKind(jetflow.AtMostOnce))
	Handle(w, fn, func(context.Context, *Job[struct{}]) error { return nil })
	if err := w.Start(context.Background()); err != nil { // runs until the test stops it
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = w.Stop(sctx)
	})
	return env, w, logs
}

// claimOf is the claim this worker writes for a first attempt of run id.
func claimOf(w *Worker, id string) jetflow.Run {
	now := time.Now().UTC()
	return jetflow.Run{
		ID: id, Name: "claim.fn", Kind: jetflow.AtMostOnce, State: jetflow.InProgress, Args: []byte("null"),
		ScheduledTime: now, CreationTime: now, Attempts: 1, StartedTime: now, Owner: w.cfg.ID, Heartbeat: now,
	}
}

// A claim written while the server is down is written again until the
// server is back, and stored once: its run starts when the server returns
// instead of waiting for its message's redelivery (before, the claim gave
// up after DefaultTimeout, 5 s, and the message was handed back). Whether
// the first write landed (nats.go sends what it buffered on reconnecting)
// or not, the claim is this worker's.
func TestClaimRidesOutAServerOutage(t *testing.T) {
	env, w, logs := claimEnv(t)
	r := claimOf(w, "claim-outage")
	env.S.Stop()
	type result struct {
		rev uint64
		err error
	}
	done := make(chan result, 1)
	go func() {
		rev, err := w.claim(context.Background(), jetflow.Pending, &r, 0)
		done <- result{rev, err}
	}()
	testserver.Eventually(t, 30*time.Second, "the claim written again", func() bool {
		return strings.Contains(logs.String(), "claim write failed; retrying")
	})
	env.Restart()
	var got result
	select {
	case got = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the claim did not end a minute after the server came back")
	}
	if got.err != nil {
		t.Fatalf("claim through an outage: %v", got.err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cur, _, err := w.store.Decide(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cur.State != jetflow.InProgress || cur.Owner != w.cfg.ID || cur.Revision != got.rev || !cur.StartedTime.Equal(r.StartedTime) {
		t.Fatalf("stored %s owner %q rev %d started %v; want in progress, owner %q, rev %d, started %v",
			cur.State, cur.Owner, cur.Revision, cur.StartedTime, w.cfg.ID, got.rev, r.StartedTime)
	}
}

// A claim written again after a write that landed unseen finds its own
// claim stored and counts it as claimed; another claim in its place is a
// conflict (the run is not this worker's to start).
func TestClaimLandedUnseenIsOurs(t *testing.T) {
	_, w, _ := claimEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lost := errors.New("reply lost with its server")

	r := claimOf(w, "claim-landed")
	stored, err := w.runs.Write(ctx, engine.Claim, engine.None, &r, 0) // the write that landed
	if err != nil {
		t.Fatal(err)
	}
	again := r
	rev, err := w.claimAgain(ctx, jetflow.Pending, &again, 0, lost)
	if err != nil || rev != stored {
		t.Fatalf("claim that landed unseen: rev %d, %v; want rev %d, no error", rev, err, stored)
	}

	other := claimOf(w, "claim-other")
	other.Owner = "another-worker"
	if _, err := w.runs.Write(ctx, engine.Claim, engine.None, &other, 0); err != nil {
		t.Fatal(err)
	}
	mine := claimOf(w, "claim-other")
	if _, err := w.claimAgain(ctx, jetflow.Pending, &mine, 0, lost); !errors.Is(err, kv.ErrConflict) {
		t.Fatalf("claim of a run another worker claimed: %v; want kv.ErrConflict", err)
	}
}
