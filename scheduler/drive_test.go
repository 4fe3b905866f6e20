package scheduler_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
)

// A scheduler that is not started dispatches what is due by its clock when
// asked: DispatchDue, with NextDue saying when the next run is due.
func TestDispatchDueOnAFakeClock(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	set := func(t time.Time) { mu.Lock(); now = t; mu.Unlock() }
	p, err := producer.New(ctx, ts.JS, producer.Config{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New(ctx, ts.JS, scheduler.Config{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	fn := jetflow.Define[struct{}]("drive.later")
	t0 := clock()
	id, err := p.RunAfter(ctx, time.Hour+250*time.Millisecond, fn.With(struct{}{}))
	if err != nil {
		t.Fatal(err)
	}
	due, ok, err := s.NextDue(ctx)
	if err != nil || !ok || !due.Equal(t0.Add(time.Hour+250*time.Millisecond)) {
		t.Fatalf("NextDue = %s %v %v, want %s", due, ok, err, t0.Add(time.Hour+250*time.Millisecond))
	}
	set(t0.Add(time.Hour)) // the run's second, not yet its time
	if n, err := s.DispatchDue(ctx); n != 0 || err != nil {
		t.Fatalf("DispatchDue before due = %d, %v", n, err)
	}
	set(due)
	if n, err := s.DispatchDue(ctx); n != 1 || err != nil {
		t.Fatalf("DispatchDue when due = %d, %v", n, err)
	}
	if _, ok, err := s.NextDue(ctx); ok || err != nil {
		t.Fatalf("NextDue after dispatch: ok %v, %v", ok, err)
	}
	if n, err := s.DispatchDue(ctx); n != 0 || err != nil {
		t.Fatalf("DispatchDue again = %d, %v", n, err)
	}
	// Its message waits on the function stream (no worker serves it here).
	if r, err := p.Get(ctx, id); err != nil || r.State != jetflow.Pending {
		t.Fatalf("run = %+v, %v", r, err)
	}
	if got := s.Stats().Dispatched; got != 1 {
		t.Fatalf("Dispatched = %d, want 1", got)
	}
}
