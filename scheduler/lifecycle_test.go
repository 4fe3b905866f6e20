package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/scheduler"
)

// Start returns at once; the scheduler runs until Stop, StopAndCancel or
// the end of Start's ctx, and gives its lease up to a standby each time.
func TestLifecycleStartStopAndCancelContext(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	newS := func(id string) *scheduler.Scheduler {
		s, err := scheduler.New(context.Background(), ts.JS, scheduler.Config{ID: id, LeaseTTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	stops := map[string]func(s *scheduler.Scheduler, cancel context.CancelFunc) error{
		"ctx end":       func(_ *scheduler.Scheduler, cancel context.CancelFunc) error { cancel(); return nil },
		"Stop":          func(s *scheduler.Scheduler, _ context.CancelFunc) error { return s.Stop(context.Background()) },
		"StopAndCancel": func(s *scheduler.Scheduler, _ context.CancelFunc) error { return s.StopAndCancel(context.Background()) },
	}
	for _, how := range []string{"ctx end", "Stop", "StopAndCancel"} {
		a, b := newS(how+"-a"), newS(how+"-b")
		ctx, cancel := context.WithCancel(context.Background())
		if err := a.Start(ctx); err != nil {
			t.Fatal(err)
		}
		testserver.Eventually(t, 10*time.Second, how+": a leads", a.IsLeader)
		if err := b.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := stops[how](a, cancel); err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		select {
		case <-a.Stopped():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not stopped", how)
		}
		if a.IsLeader() {
			t.Fatalf("%s: still leader after stopping", how)
		}
		testserver.Eventually(t, 10*time.Second, how+": the standby takes over", b.IsLeader)
		if err := b.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
}
