package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/kv"
)

// A claim retried until its deadline whose record stayed unread (a replica
// behind answered every read) ends with an error that is not a conflict:
// the claim may have landed, so the worker gives it back (giveBackClaim)
// instead of taking the run as claimed by another worker. Before, the
// error wrapped the conflict, and the landed claim held the run for
// LostAfter under a worker not running it.
func TestClaimAgainUnreadIsNoConflict(t *testing.T) {
	env, w := provisionedWorker(t, Config{})
	w.cfg.AckWait = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	behind := behindStore(t, env)
	now := time.Now().UTC()
	r := &jetflow.Run{ID: "unread-1", Name: "x", Kind: jetflow.AtMostOnce, Args: []byte(`"x"`),
		State: jetflow.Pending, ScheduledTime: now, CreationTime: now}
	if _, err := behind.Write(ctx, r, 0, engine.None); err != nil {
		t.Fatal(err)
	}
	rev, err := w.runs.Write(ctx, engine.Schedule, engine.None, r, 0)
	if err != nil {
		t.Fatal(err)
	}
	claim := *r
	claim.State, claim.Attempts, claim.StartedTime, claim.Owner, claim.Heartbeat = jetflow.InProgress, 1, now, w.cfg.ID, now
	landed := claim
	if _, err := w.runs.Write(ctx, engine.Claim, jetflow.Pending, &landed, rev); err != nil {
		t.Fatal(err)
	}
	// Every read after a refusal is answered by the replica behind.
	readsBehind(w, behind)
	again := claim
	_, err = w.claimAgain(ctx, jetflow.Pending, &again, rev, errors.New("timeout"))
	if err == nil || errors.Is(err, kv.ErrConflict) {
		t.Fatalf("claim retried with its record unread: %v; want an error that is not kv.ErrConflict", err)
	}
}
