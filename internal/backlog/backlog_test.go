package backlog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/backlog"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
)

type args struct{ N int }

var (
	busy    = jetflow.Define[args]("bk.busy")
	failing = jetflow.Define[args]("bk.failing")
	nobody  = jetflow.Define[args]("bk.nobody")
)

// known sets up a backlog whose every figure is known: bk.busy has 2 runs
// in flight (its handler holds them) and 3 ready; bk.failing 2 runs ended
// failed; bk.nobody 4 runs no worker serves; the delayed store 3 runs due
// in 30 s, 4 in 5 minutes and 2 in an hour. release lets the held runs end.
func known(t *testing.T) (ts *testserver.Env, release func()) {
	t.Helper()
	ts = testserver.Start(t)
	ctx := context.Background()
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(ctx, ts.JS, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	started := make(chan struct{}, 10)
	worker.Handle(w, busy, func(ctx context.Context, _ *worker.Job[args]) error {
		started <- struct{}{}
		select {
		case <-hold:
		case <-ctx.Done():
		}
		return nil
	}, worker.Options{MaxParallel: 2, Concurrency: 2})
	worker.Handle(w, failing, func(context.Context, *worker.Job[args]) error {
		return jetflow.Permanent(errors.New("no"))
	})
	s, err := scheduler.New(ctx, ts.JS, scheduler.Config{LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var once bool
	release = func() {
		if !once {
			once = true
			close(hold)
		}
	}
	t.Cleanup(func() {
		release()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
		_ = s.Stop(sctx)
	})
	enqueue := func(fn jetflow.Function[args], n int, after time.Duration) {
		for i := range n {
			var err error
			if after > 0 {
				_, err = p.RunAfter(ctx, after, fn.With(args{i}))
			} else {
				_, err = p.Enqueue(ctx, fn.With(args{i}))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	enqueue(busy, 5, 0)
	<-started
	<-started
	enqueue(failing, 2, 0)
	enqueue(nobody, 4, 0)
	enqueue(nobody, 3, 30*time.Second)
	enqueue(nobody, 4, 5*time.Minute)
	enqueue(nobody, 2, time.Hour)
	return ts, release
}

func TestFiguresOfAKnownBacklog(t *testing.T) {
	t.Parallel()
	ts, _ := known(t)
	r := backlog.New(ts.JS, streams.Config{})
	ctx := context.Background()
	var f *backlog.Figures
	testserver.Eventually(t, 20*time.Second, "the failed runs counted by the run index", func() bool {
		var err error
		f, err = r.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fl, ok := f.Function(failing.Name())
		return ok && fl.Failed == 2
	})
	b, ok := f.Function(busy.Name())
	if !ok {
		t.Fatalf("no figures of %s: %+v", busy.Name(), f)
	}
	if b.Ready != 3 || b.InFlight != 2 || b.Waiting != 5 || b.Failed != 0 {
		t.Errorf("%s: %+v, want 3 ready, 2 in flight, 0 failed", busy.Name(), b)
	}
	if b.OldestReadyAge <= 0 || b.OldestReadyAge > 60 {
		t.Errorf("%s: oldest ready run's age %v s", busy.Name(), b.OldestReadyAge)
	}
	if _, ok := f.Function(nobody.Name()); ok {
		t.Errorf("figures of a function without a consumer: %+v", f)
	}
	if f.Unserved != 4 {
		t.Errorf("unserved %d, want 4", f.Unserved)
	}
	if f.Due1m != 3 || f.Due10m != 7 {
		t.Errorf("due within 1 min %d, 10 min %d; want 3 and 7", f.Due1m, f.Due10m)
	}
	if f.FailedSource != "index" {
		t.Errorf("failed counts from %q", f.FailedSource)
	}
	// Desired workers at 2 runs per worker: (5 waiting + 3 due in a
	// minute) / 2 for the deployment, 5/2 for bk.busy.
	g := f.WithTarget(2)
	if g.DesiredWorkers != 4 {
		t.Errorf("desired workers %d, want 4", g.DesiredWorkers)
	}
	if b, _ := g.Function(busy.Name()); b.DesiredWorkers != 3 {
		t.Errorf("%s: desired workers %d, want 3", busy.Name(), b.DesiredWorkers)
	}
	// A read leaves no consumer behind on the delayed bucket (the
	// scheduler's watch is one of its own).
	consumers := func() int {
		st, err := ts.JS.Stream(ctx, streams.KVStream(streams.Config{}.DelayedBucket()))
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().State.Consumers
	}
	before := consumers()
	if _, err := r.Read(ctx); err != nil {
		t.Fatal(err)
	}
	if after := consumers(); after != before {
		t.Errorf("consumers on the delayed bucket: %d before a read, %d after", before, after)
	}
}

// An idle deployment reads as all zeros: what lets an autoscaler scale to
// zero.
func TestFiguresOfAnIdleDeployment(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	if err := streams.Provision(ctx, ts.JS, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	f, err := backlog.New(ts.JS, streams.Config{}).Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f.Waiting != 0 || f.Due1m != 0 || f.Due10m != 0 || f.DesiredWorkers != 0 || f.Unserved != 0 || len(f.Functions) != 0 {
		t.Fatalf("idle: %+v", f)
	}
	if f.FailedSource != "none" {
		t.Errorf("failed counts from %q without an indexer", f.FailedSource)
	}
}
