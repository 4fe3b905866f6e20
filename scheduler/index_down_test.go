package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
)

// A run index that stops following the record writes (its stream refuses
// them: here sealed; in the paused-leader fault scenario, its term marker
// timed out for minutes) is not caught up any more, so the repair sweep
// reads every record again: a record left without its message while the
// index is down is repaired. Before, the index kept saying it was caught
// up from its last term, the sweep read its stale candidates, and such a
// run stayed pending for up to an hour.
func TestRepairSweepReadsEveryRecordWhileTheIndexIsDown(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	var c counter
	startWorker(t, ts, &c)
	s := newScheduler(t, ts, "sweeper")
	p, err := producer.New(context.Background(), ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	testserver.Eventually(t, 20*time.Second, "index caught up", func() bool { return scheduler.IndexCaughtUp(s) })
	idx, err := ts.JS.Stream(ctx, streams.Config{}.WithDefaults().IndexStream())
	if err != nil {
		t.Fatal(err)
	}
	cfg := idx.CachedInfo().Config
	cfg.Sealed = true
	if _, err := ts.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// A record write the index cannot store an entry for ends its term;
	// its next terms fail at their start.
	if _, err := p.Enqueue(ctx, ticked.With(tick{N: 0})); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 20*time.Second, "index no longer caught up", func() bool { return !scheduler.IndexCaughtUp(s) })
	// What a producer that crashed between writing the record and
	// publishing the message leaves behind, while the index is down.
	past := time.Now().Add(-time.Minute).UTC()
	orphan := &jetflow.Run{ID: "orphan-idx", Name: ticked.Name(), Kind: jetflow.Retryable, Args: []byte(`{"N":1}`),
		State: jetflow.Pending, ScheduledTime: past, CreationTime: past}
	if _, err := engine.Of(p).Store().Create(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	r, err := p.Wait(ctxWithin(t, 30*time.Second), orphan.ID)
	if err != nil || r.State != jetflow.Success {
		t.Fatalf("%+v %v", r, err)
	}
}
