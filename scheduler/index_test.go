package scheduler_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/runindex"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
)

type idxArgs struct{ N int }

var (
	idxOK    = jetflow.Define[idxArgs]("idx.ok")
	idxFail  = jetflow.Define[idxArgs]("idx.fail")
	idxBlock = jetflow.Define[idxArgs]("idx.block")
	idxIdle  = jetflow.Define[idxArgs]("idx.idle") // no worker: its runs wait without a record
)

func startIndexScheduler(t *testing.T, ts *testserver.Env, id string) *scheduler.Scheduler {
	t.Helper()
	s, err := scheduler.New(context.Background(), ts.JS, scheduler.Config{ID: id, LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}

// sameCounts waits until the index's counts are exact: equal to a scan of
// every record, for every function and all.
func sameCounts(t *testing.T, p *producer.Producer, fns ...string) {
	t.Helper()
	rd := runindex.NewReader(engine.Of(p).Store())
	testserver.Eventually(t, 30*time.Second, "index counts equal to a scan", func() bool {
		for _, fn := range append([]string{""}, fns...) {
			got, err := p.Counts(context.Background(), fn)
			if err != nil || got.Source != "index" || got.Rebuilding {
				return false
			}
			want, err := rd.CountsScan(context.Background(), fn)
			if err != nil || got.Counts != want.Counts {
				return false
			}
		}
		return true
	})
}

// TestIndexCountsExactAcrossSchedulers: runs of every kind (succeeded,
// failed, canceled, running, delayed, waiting without a record), counted
// by one scheduler's indexer; it stops mid-way, more runs go by, another
// scheduler takes over: its counts agree with a full scan.
func TestIndexCountsExactAcrossSchedulers(t *testing.T) {
	ts := testserver.Start(t)
	ctx := context.Background()
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, wjs := ts.Connect()
	w, err := worker.New(ctx, wjs, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	worker.Handle(w, idxOK, func(ctx context.Context, j *worker.Job[idxArgs]) error { return nil })
	worker.Handle(w, idxFail, func(ctx context.Context, j *worker.Job[idxArgs]) error {
		return jetflow.Permanent(errors.New("no"))
	})
	worker.Handle(w, idxBlock, func(ctx context.Context, j *worker.Job[idxArgs]) error {
		<-ctx.Done()
		return ctx.Err()
	}, worker.Options{Concurrency: 8})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })
	fns := []string{idxOK.Name(), idxFail.Name(), idxBlock.Name(), idxIdle.Name()}

	var ended []string
	batch := func(n int) {
		for i := range n {
			for _, c := range []jetflow.Call{idxOK.With(idxArgs{i}), idxFail.With(idxArgs{i})} {
				id, err := p.Enqueue(ctx, c)
				if err != nil {
					t.Fatal(err)
				}
				ended = append(ended, id)
			}
			if _, err := p.Enqueue(ctx, idxIdle.With(idxArgs{i})); err != nil { // waits without a record
				t.Fatal(err)
			}
			if _, err := p.RunAfter(ctx, time.Hour, idxOK.With(idxArgs{i})); err != nil { // delayed: pending record
				t.Fatal(err)
			}
			late, err := p.RunAfter(ctx, time.Hour, idxOK.With(idxArgs{i}))
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Cancel(ctx, late); err != nil {
				t.Fatal(err)
			}
		}
		for _, id := range ended {
			if _, err := p.Wait(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	var blocked []string
	for i := range 4 {
		id, err := p.Enqueue(ctx, idxBlock.With(idxArgs{i}))
		if err != nil {
			t.Fatal(err)
		}
		blocked = append(blocked, id)
	}
	s1 := startIndexScheduler(t, ts, "s1")
	batch(15)
	testserver.Eventually(t, 30*time.Second, "the blocked runs running", func() bool {
		for _, id := range blocked {
			if r, err := p.Get(ctx, id); err != nil || r.State != jetflow.InProgress {
				return false
			}
		}
		return true
	})
	sameCounts(t, p, fns...)
	c, err := p.Counts(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Success != 15 || c.Failed != 15 || c.Canceled != 15 || c.InProgress != 4 || c.Pending != 30 {
		t.Fatalf("counts %+v", c.Counts)
	}

	// The first scheduler stops; runs go on; a second takes over.
	if err := s1.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	batch(10)
	for _, id := range blocked[:2] {
		if err := p.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	startIndexScheduler(t, ts, "s2")
	sameCounts(t, p, fns...)
	if c, _ = p.Counts(ctx, ""); c.Success != 25 || c.Failed != 25 || c.Canceled != 27 || c.InProgress != 2 || c.Pending != 50 {
		t.Fatalf("counts after the takeover %+v", c.Counts)
	}

	// List from the index: failed runs newest first, both ways.
	var got []string
	f := producer.Filter{State: jetflow.Failed, Limit: 7}
	var pages []producer.Page
	for {
		pg, err := p.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if !pg.Indexed {
			t.Fatal("List did not read the index")
		}
		pages = append(pages, pg)
		for _, r := range pg.Runs {
			got = append(got, r.ID)
		}
		if pg.Next == "" {
			break
		}
		f.After = pg.Next
	}
	var wantFailed []string
	for _, id := range ended {
		if r, err := p.Get(ctx, id); err == nil && r.State == jetflow.Failed {
			wantFailed = append(wantFailed, id)
		}
	}
	slices.SortFunc(wantFailed, func(a, b string) int {
		ra, _ := p.Get(ctx, a)
		rb, _ := p.Get(ctx, b)
		return int(rb.Revision) - int(ra.Revision)
	})
	if !slices.Equal(got, wantFailed) {
		t.Fatalf("failed runs listed %v, want %v (newest first)", got, wantFailed)
	}
	back, err := p.List(ctx, producer.Filter{State: jetflow.Failed, Limit: 7, Before: pages[1].Prev})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(back.Runs), ids(pages[0].Runs)) {
		t.Fatalf("back to the first page: %v, want %v", ids(back.Runs), ids(pages[0].Runs))
	}
	// By function: the waiting runs without a record, newest first.
	pg, err := p.List(ctx, producer.Filter{Function: idxIdle.Name(), Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(pg.Runs) != 25 || pg.Runs[0].State != jetflow.Pending {
		t.Fatalf("runs of %s: %d", idxIdle.Name(), len(pg.Runs))
	}
}

func ids(rs []*jetflow.Run) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}
