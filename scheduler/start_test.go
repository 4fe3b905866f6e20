package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
)

// A term reads at its start only the seconds due now (from its checkpoint,
// or the last minute and, in the background, the keys of the whole bucket
// when it has none); its first tick reads the rest of the horizon at once,
// and later ticks the seconds that come within it. Runs waiting in every
// one of those places (overdue by two hours with no checkpoint, due in
// each second of the horizon and past it) each start once, across a
// standby's takeover half-way. The repair sweep leaves delayed entries to
// the dispatcher here (startScheduler): only the dispatcher starts them.
func TestRunsWaitingAnywhereStartOnceAcrossATakeover(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	var c counter
	startWorker(t, ts, &c)
	past := time.Now().Add(-2 * time.Hour)
	old, err := producer.New(ctx, ts.JS, producer.Config{Now: func() time.Time { return past }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.RunAt(ctx, past.Add(time.Minute), ticked.With(tick{-1})); err != nil {
		t.Fatal(err)
	}
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// Three runs in each half second from 1 s to 14 s ahead: the
	// horizon is 10 s.
	const n = 3 * 27
	now := time.Now()
	for i := range n {
		due := now.Add(time.Second + time.Duration(i/3)*500*time.Millisecond)
		if _, err := p.RunAt(ctx, due, ticked.With(tick{i})); err != nil {
			t.Fatal(err)
		}
	}
	a := startScheduler(t, ts, "a", 0)
	testserver.Eventually(t, 10*time.Second, "a leads", a.IsLeader)
	b := startScheduler(t, ts, "b", 0)
	testserver.Eventually(t, 20*time.Second, "the overdue run and a third of the others", func() bool { return c.n.Load() >= 1+n/3 })
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 40*time.Second, "every run", func() bool { return c.n.Load() >= 1+n })
	if !b.IsLeader() {
		t.Fatal("the standby did not take over")
	}
	// A run published twice would start again within moments; none may.
	time.Sleep(time.Second)
	if d := c.dupes(); len(d) > 0 {
		t.Fatalf("%d runs started twice: %v", len(d), d[:min(5, len(d))])
	}
	if got := c.n.Load(); got != 1+n {
		t.Fatalf("%d runs started, want %d", got, 1+n)
	}
}
