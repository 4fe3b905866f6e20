package scheduler_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
)

var longFn = jetflow.Define[cronArgs]("crontest.long")

// A cron run that outlasts many intervals is never overlapped by the next
// fire, across the death of the scheduler leader (its connection closed,
// no lease given up): the new leader skips the fires that come while the
// run is in progress, and the next one after it ended runs.
func TestCronNoOverlapAcrossLeaderDeath(t *testing.T) {
	t.Parallel()
	ts := cronServer(t)
	ctx := context.Background()
	var (
		mu              sync.Mutex
		running, maxRun int
		started         = map[string]bool{}
		release         = make(chan struct{})
	)
	_, wjs := ts.Connect()
	w, err := worker.New(ctx, wjs, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	worker.Handle(w, longFn, func(ctx context.Context, j *worker.Job[cronArgs]) error {
		mu.Lock()
		running++
		maxRun = max(maxRun, running)
		started[j.ID()] = true
		mu.Unlock()
		defer func() { mu.Lock(); running--; mu.Unlock() }()
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})
	startedRuns := func() int { mu.Lock(); defer mu.Unlock(); return len(started) }

	defs := []scheduler.CronDef{{Name: "long", Schedule: scheduler.Interval(time.Second), Call: longFn.With(cronArgs{})}}
	type replica struct {
		s    *scheduler.Scheduler
		c    *scheduler.Crons
		kill func()
	}
	start := func() *replica {
		nc, js := ts.Connect()
		s, err := scheduler.New(ctx, js, scheduler.Config{LeaseTTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		c, err := s.ConfigureCrons(scheduler.CronConfig{Crons: defs})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		lctx, cancel := context.WithCancel(ctx)
		loops := scheduler.RunCronsWhileLeader(lctx, s)
		var once sync.Once
		r := &replica{s: s, c: c, kill: func() {
			once.Do(func() { nc.Close(); cancel(); <-loops })
		}}
		t.Cleanup(func() {
			r.kill()
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = s.Stop(sctx)
		})
		return r
	}
	rs := []*replica{start(), start()}
	leader := func() *replica {
		for _, r := range rs {
			if r.s.IsLeader() {
				return r
			}
		}
		return nil
	}
	skipped := func(r *replica) int64 {
		ci, err := r.c.Get(ctx, "long")
		if err != nil {
			return -1
		}
		return ci.Skipped
	}
	testserver.Eventually(t, 20*time.Second, "the first run started and 2 fires skipped", func() bool {
		return startedRuns() == 1 && skipped(rs[0]) >= 2
	})
	var dead, next *replica
	testserver.Eventually(t, 10*time.Second, "a leader", func() bool { dead = leader(); return dead != nil })
	dead.kill()
	for _, r := range rs {
		if r != dead {
			next = r
		}
	}
	before := skipped(next)
	testserver.Eventually(t, 20*time.Second, "the other scheduler leads and skips 3 more fires", func() bool {
		return next.s.IsLeader() && skipped(next) >= before+3
	})
	if n := startedRuns(); n != 1 {
		t.Fatalf("%d runs started while the first was in progress, want 1", n)
	}
	close(release)
	testserver.Eventually(t, 20*time.Second, "a run after the long one ended", func() bool { return startedRuns() >= 3 })
	mu.Lock()
	defer mu.Unlock()
	if maxRun != 1 {
		t.Fatalf("%d runs of the cron at once, want 1", maxRun)
	}
}
