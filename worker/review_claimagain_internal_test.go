package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/streams"
)

// REVIEW: a claim that landed unseen, whose later writes conflict and
// whose reads stay unread (a replica behind), ends with an error that
// matches kv.ErrConflict: process then skips giveBackClaim.
func TestReviewClaimAgainUnreadEndsAsConflict(t *testing.T) {
	env, w := provisionedWorker(t)
	w.cfg.AckWait = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	behindCfg := streams.Config{Prefix: "behind"}
	if err := streams.Provision(ctx, env.JS, behindCfg); err != nil {
		t.Fatal(err)
	}
	behind, err := kv.Open(ctx, env.JS, behindCfg)
	if err != nil {
		t.Fatal(err)
	}
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
	w.store = behind
	again := claim
	_, err = w.claimAgain(ctx, jetflow.Pending, &again, rev, errors.New("timeout"))
	t.Logf("claimAgain: %v; matches kv.ErrConflict: %v", err, errors.Is(err, kv.ErrConflict))
}
