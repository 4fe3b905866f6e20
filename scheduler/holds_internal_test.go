package scheduler

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
)

// A dispatch asks whether its term still holds the lease after its record
// read, and publishes nothing when it does not (a process paused there
// past its lease while a standby led): the entry is tried again, with a
// new read. A stand-in for elect.Holds answers "no" to the first question:
// the run starts only after a later one answered "yes". (elect's own tests
// show when a term holds.)
func TestDispatchPublishesOnlyWhileTheTermHolds(t *testing.T) {
	env := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := streams.Provision(ctx, env.JS, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, env.JS, Config{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var asked []time.Time
	s.holds = func(context.Context) bool {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, time.Now())
		return len(asked) > 1
	}
	fn := jetflow.Define[struct{}]("holds.fn")
	started := make(chan time.Time, 4)
	w, err := worker.New(ctx, env.JS, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	worker.Handle(w, fn, func(context.Context, *worker.Job[struct{}]) error {
		started <- time.Now()
		return nil
	})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	testserver.Eventually(t, 10*time.Second, "the scheduler leads", s.IsLeader)

	p, err := producer.New(ctx, env.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.RunAfter(ctx, 200*time.Millisecond, fn.With(struct{}{}))
	if err != nil {
		t.Fatal(err)
	}
	var at time.Time
	select {
	case at = <-started:
	case <-ctx.Done():
		t.Fatal("the delayed run never started")
	}
	mu.Lock()
	seen := append([]time.Time(nil), asked...)
	mu.Unlock()
	if len(seen) < 2 {
		t.Fatalf("the dispatch asked whether its term holds %d times before the run started; want a refusal, then a yes", len(seen))
	}
	if at.Before(seen[1]) {
		t.Fatalf("the run started at %s, before its dispatch was told its term holds (%s)", at.Format("15:04:05.000000"), seen[1].Format("15:04:05.000000"))
	}
	// Nothing lost on the way: the entry tried again is the run, which
	// ends in success at its first attempt.
	testserver.Eventually(t, 10*time.Second, "the run recorded success", func() bool {
		r, err := s.store.Show(ctx, id)
		return err == nil && r.State == jetflow.Success && r.Attempts == 1
	})
}
