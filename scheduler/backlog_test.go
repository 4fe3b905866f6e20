package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
)

// startScheduler starts a scheduler whose clock is the real one moved by
// skew, with a repair sweep that leaves delayed entries to the
// dispatcher (StaleAfter of a day): only the dispatcher can start the
// runs of these tests.
func startScheduler(t *testing.T, ts *testserver.Env, id string, skew time.Duration) *scheduler.Scheduler {
	t.Helper()
	_, js := ts.Connect()
	s, err := scheduler.New(context.Background(), js, scheduler.Config{ID: id, LeaseTTL: time.Second,
		StaleAfter: 24 * time.Hour, Now: func() time.Time { return time.Now().Add(skew) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}

// waitDispatched waits until run id's message is queued and its delayed
// entry (due at due) is gone: the dispatcher's doing, not the repair
// sweep's (which leaves the entry).
func waitDispatched(t *testing.T, p *producer.Producer, id string, due time.Time) {
	t.Helper()
	st := engine.Of(p).Store()
	ctx := context.Background()
	testserver.Eventually(t, 20*time.Second, "the run dispatched and its delayed entry removed", func() bool {
		q, err := st.Queued(ctx, ticked.Name(), id)
		if err != nil || !q {
			return false
		}
		_, ok, err := st.FindDelayed(ctx, due, id)
		return err == nil && !ok
	})
}

// A scheduler that starts with no checkpoint (the first term of a
// deployment) reads the last minute and the horizon at once, and the rest
// of the delayed bucket in the background: a run overdue by two hours
// (written while no scheduler ran) is dispatched all the same.
func TestAFirstTermDispatchesRunsOverdueLongAgo(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	past := time.Now().Add(-2 * time.Hour)
	p, err := producer.New(ctx, ts.JS, producer.Config{Now: func() time.Time { return past }})
	if err != nil {
		t.Fatal(err)
	}
	due := past.Add(time.Minute)
	id, err := p.RunAt(ctx, due, ticked.With(tick{1}))
	if err != nil {
		t.Fatal(err)
	}
	startScheduler(t, ts, "s1", 0)
	waitDispatched(t, p, id, due)
	if n := fnMessages(t, ts); n != 1 {
		t.Fatalf("%d messages in the function stream, want 1: the run dispatched once", n)
	}
}

// fnMessages is the number of messages in the function stream.
func fnMessages(t *testing.T, ts *testserver.Env) uint64 {
	t.Helper()
	return ts.StreamMsgs(t, streams.Config{}.WithDefaults().FunctionStream())
}

// A term that follows another reads from the checkpoint the last one
// stored: a run the last leader held in memory but did not fire, overdue
// by ten minutes when the next leader starts (more than the minute a term
// without a checkpoint reads at once), is dispatched by the next term.
func TestANewTermReadsFromTheLastCheckpoint(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	leases, err := ts.JS.KeyValue(ctx, streams.Config{}.WithDefaults().LeasesBucket())
	if err != nil {
		t.Fatal(err)
	}
	a := startScheduler(t, ts, "a", 0)
	testserver.Eventually(t, 10*time.Second, "a leads", a.IsLeader)
	// Due well after a's term ends (its checkpoint comes within 2 s), so
	// that only b can start it.
	due := time.Now().Add(40 * time.Second)
	id, err := p.RunAt(ctx, due, ticked.With(tick{2}))
	if err != nil {
		t.Fatal(err)
	}
	// A checkpoint stored after the run was written.
	first := uint64(0)
	if e, err := leases.Get(ctx, "scheduler-delayed-low"); err == nil {
		first = e.Revision()
	}
	testserver.Eventually(t, 10*time.Second, "a checkpoint after the run was written", func() bool {
		e, err := leases.Get(ctx, "scheduler-delayed-low")
		return err == nil && e.Revision() > first
	})
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Get(ctx, "scheduler-delayed-low"); err != nil {
		t.Fatalf("no checkpoint after the leader stopped: %v", err)
	}
	st := engine.Of(p).Store()
	if q, err := st.Queued(ctx, ticked.Name(), id); err != nil || q {
		t.Fatalf("run queued before b leads (%v): a dispatched it, so b is not tested", err)
	}
	if _, ok, err := st.FindDelayed(ctx, due, id); err != nil || !ok {
		t.Fatalf("delayed entry before b leads: found %v, %v", ok, err)
	}
	// The next leader's clock is ten minutes ahead: the run is overdue.
	startScheduler(t, ts, "b", 10*time.Minute)
	waitDispatched(t, p, id, due)
}
