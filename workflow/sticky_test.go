package workflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go/jetstream"
)

// codeRuns counts how often a workflow's code runs: entries to the top of
// its function, and awaits passed (replayed ones included).
type codeRuns struct {
	top, awaits atomic.Int64
	ended       atomic.Int64 // deferred calls run: executions ended
}

// ticks is a workflow that awaits event "tick" n times and returns the
// ticks joined, counting its code's runs in c.
func ticks(name string, c *codeRuns) *workflow.Workflow[int, string] {
	return workflow.Define(name, func(wf *workflow.Context, n int) (string, error) {
		c.top.Add(1)
		defer c.ended.Add(1)
		var got []string
		for range n {
			v, err := workflow.AwaitEvent[string](wf, "tick", 0)
			if err != nil {
				return "", err
			}
			c.awaits.Add(1)
			got = append(got, v)
		}
		return strings.Join(got, ","), nil
	})
}

// parkedAt waits until workflow id waits with k steps journaled (its k-th
// await waiting).
func (e *env) parkedAt(t *testing.T, id string, k int) {
	t.Helper()
	testserver.Eventually(t, 20*time.Second, fmt.Sprintf("workflow %s waiting at step %d", id, k), func() bool {
		st, err := workflow.Get(context.Background(), e.P, id)
		return err == nil && st.Waiting && len(st.Steps) == k && st.Steps[k-1].State == workflow.StepWaiting
	})
}

// tick sends ticks from..to-1 to workflow id, one each time it waits.
func (e *env) tick(t *testing.T, id string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		e.parkedAt(t, id, i+1)
		must(t, workflow.SendEvent(testCtx(t), e.P, id, "tick", fmt.Sprint(i)))
	}
}

func wantTicks(n int) string {
	var s []string
	for i := range n {
		s = append(s, fmt.Sprint(i))
	}
	return strings.Join(s, ",")
}

// A workflow of n waits on one worker runs its code once from the top
// and passes each await once with the cache (O(n)); without it (a
// negative CachedExecutions), every segment replays from the top: n+1
// entries and n(n+1)/2 awaits passed. The result is the same.
func TestStickyExecutionRunsTheCodeOnce(t *testing.T) {
	t.Parallel()
	const n = 12
	for _, tc := range []struct {
		name           string
		cache          int
		top, awaits    int64
		workflowSuffix string
	}{
		{"cached", 0, 1, n, "on"},
		{"off", -1, n + 1, n * (n + 1) / 2, "off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			var c codeRuns
			def := ticks("test.sticky.runs."+tc.workflowSuffix, &c)
			e.startWorker(t, func(w *worker.Worker) {
				must(t, workflow.Register(w, def, workflow.RegisterOptions{CachedExecutions: tc.cache}))
			})
			ctx := testCtx(t)
			id, err := workflow.Start(ctx, e.P, def, n)
			must(t, err)
			e.tick(t, id, 0, n)
			out, err := workflow.Result(ctx, e.P, def, id)
			must(t, err)
			if out != wantTicks(n) {
				t.Fatalf("result %q, want %q", out, wantTicks(n))
			}
			if top, awaits := c.top.Load(), c.awaits.Load(); top != tc.top || awaits != tc.awaits {
				t.Fatalf("code entered %d times, awaits passed %d times; want %d and %d", top, awaits, tc.top, tc.awaits)
			}
		})
	}
}

// A worker replaced mid-way: the new worker has nothing cached, replays
// once from the journal (the awaits before passed again), then resumes
// its own execution. The result is the same. The stopped worker ended
// its cached execution (the workflow's deferred call ran).
func TestStickyExecutionFallsBackToReplayOnAnotherWorker(t *testing.T) {
	t.Parallel()
	const n, k = 8, 4
	e := setup(t)
	var c codeRuns
	def := ticks("test.sticky.moved", &c)
	register := func(w *worker.Worker) { must(t, workflow.Register(w, def)) }
	a := e.startWorker(t, register)
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, def, n)
	must(t, err)
	e.tick(t, id, 0, k)
	e.parkedAt(t, id, k+1)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	must(t, a.Stop(sctx))
	testserver.Eventually(t, 10*time.Second, "the stopped worker's execution ended", func() bool { return c.ended.Load() == 1 })
	e.startWorker(t, register)
	e.tick(t, id, k, n)
	out, err := workflow.Result(ctx, e.P, def, id)
	must(t, err)
	if out != wantTicks(n) {
		t.Fatalf("result %q, want %q", out, wantTicks(n))
	}
	if top, awaits := c.top.Load(), c.awaits.Load(); top != 2 || awaits != n+k {
		t.Fatalf("code entered %d times, awaits passed %d times; want 2 and %d", top, awaits, n+k)
	}
}

// A cache of one execution and several workflows waiting in turn: each
// resume finds its execution evicted by another's park and replays; the
// results are the same.
func TestStickyExecutionEvictedReplays(t *testing.T) {
	t.Parallel()
	const n, wfs = 4, 3
	e := setup(t)
	var c codeRuns
	def := ticks("test.sticky.evicted", &c)
	e.startWorker(t, func(w *worker.Worker) {
		must(t, workflow.Register(w, def, workflow.RegisterOptions{CachedExecutions: 1}))
	})
	ctx := testCtx(t)
	var ids []string
	for range wfs {
		id, err := workflow.Start(ctx, e.P, def, n)
		must(t, err)
		ids = append(ids, id)
	}
	for i := range n {
		for _, id := range ids { // round robin: the others parked between
			e.tick(t, id, i, i+1)
		}
	}
	for _, id := range ids {
		out, err := workflow.Result(ctx, e.P, def, id)
		must(t, err)
		if out != wantTicks(n) {
			t.Fatalf("%s: result %q, want %q", id, out, wantTicks(n))
		}
	}
	// Each workflow's segments but the first replay (n each), except
	// those that ran while their execution was the last one parked.
	if top := c.top.Load(); top <= wfs {
		t.Fatalf("code entered %d times: no eviction replayed", top)
	}
}

// Parallel branches, a call, a sleep, a child workflow and an update, in
// one execution on one worker: every segment resumes it (the code entered
// once), the result is the same as a replay's; a query still answers from
// a read-only replay (which enters the code once more).
func TestStickyExecutionResumesEveryKindOfWait(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startScheduler(t)
	var top, childTop atomic.Int64
	child := workflow.Define("test.sticky.child", func(wf *workflow.Context, n int) (int, error) {
		childTop.Add(1)
		wf.Sleep(time.Millisecond)
		return n * n, nil
	})
	def := workflow.Define("test.sticky.mixed", func(wf *workflow.Context, n int) (string, error) {
		top.Add(1)
		ctx := wf.Context() // kept across waits: it follows the segments
		total := 0
		workflow.SetQueryHandler(wf, "total", func() (int, error) { return total, nil })
		a := workflow.Go(wf, func(wf *workflow.Context) (string, error) { return workflow.AwaitEvent[string](wf, "a", 0) })
		b := workflow.Go(wf, func(wf *workflow.Context) (int, error) { return workflow.Call[int](wf, Double.With(DoubleArgs{N: n})) })
		va, err := a.Get()
		if err != nil {
			return "", err
		}
		vb, err := b.Get()
		if err != nil {
			return "", err
		}
		total += vb
		wf.Sleep(10 * time.Millisecond)
		vc, err := workflow.RunChild(wf, child, n)
		if err != nil {
			return "", err
		}
		total += vc
		err = workflow.AwaitUpdate(wf, "add", 0, func(in int) (int, error) { total += in; return total, nil }, nil)
		if err != nil {
			return "", err
		}
		if _, err := workflow.AwaitEvent[string](wf, "done", 0); err != nil {
			return "", err
		}
		live, err := workflow.Step(wf, "ctx", func(context.Context) (bool, error) { return ctx.Err() == nil, nil })
		return fmt.Sprintf("%s %d %t", va, total, live), err
	})
	e.startWorker(t, func(w *worker.Worker) {
		must(t, workflow.Register(w, def))
		must(t, workflow.Register(w, child))
		worker.Handle(w, Double, double)
	})
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, def, 3)
	must(t, err)
	e.waiting(t, id)
	must(t, workflow.SendEvent(ctx, e.P, id, "a", "x"))
	testserver.Eventually(t, 20*time.Second, "the update awaited", func() bool {
		st, err := workflow.Get(ctx, e.P, id)
		return err == nil && st.Waiting && len(st.Steps) > 0 && st.Steps[len(st.Steps)-1].Kind == workflow.KindUpdate
	})
	got, err := workflow.Update[int, int](ctx, e.P, id, "add", 100)
	if err != nil || got != 115 {
		t.Fatalf("update: %d, %v; want 115", got, err)
	}
	e.parkedAt(t, id, 6) // the branches' event and call, the sleep, the child, the update, the await "done"
	if n := top.Load(); n != 1 {
		t.Fatalf("code entered %d times before the query, want 1", n)
	}
	if v, err := workflow.Query[int](ctx, e.P, id, "total"); err != nil || v != 115 {
		t.Fatalf("query: %d, %v; want 115", v, err)
	}
	must(t, workflow.SendEvent(ctx, e.P, id, "done", ""))
	out, err := workflow.Result(ctx, e.P, def, id)
	must(t, err)
	if out != "x 115 true" {
		t.Fatalf("result %q, want %q", out, "x 115 true")
	}
	if n, c := top.Load(), childTop.Load(); n != 2 || c != 1 {
		t.Fatalf("code entered %d times (the query's replay included), the child's %d; want 2 and 1", n, c)
	}
}

// A worker's Stop ends the executions it keeps: their deferred calls run
// and the goroutines they held are gone.
func TestWorkerStopEndsCachedExecutions(t *testing.T) {
	e := setup(t)
	const wfs = 20
	var ended atomic.Int64
	def := workflow.Define("test.sticky.stop", func(wf *workflow.Context, _ struct{}) (string, error) {
		defer ended.Add(1)
		return workflow.AwaitEvent[string](wf, "never", 0)
	})
	nc, js := e.Connect()
	w, err := worker.New(context.Background(), js, worker.Config{})
	must(t, err)
	must(t, workflow.Register(w, def))
	must(t, w.Start(context.Background()))
	ctx := testCtx(t)
	var ids []string
	for range wfs {
		id, err := workflow.Start(ctx, e.P, def, struct{}{})
		must(t, err)
		ids = append(ids, id)
	}
	for _, id := range ids {
		e.parkedAt(t, id, 1)
	}
	if n, g := ended.Load(), codeGoroutines(); n != 0 || g != wfs {
		t.Fatalf("%d executions ended while their workflows waited, %d goroutines of workflow code; want 0 and %d (kept)", n, g, wfs)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	must(t, w.Stop(sctx))
	testserver.Eventually(t, 10*time.Second, "every cached execution ended", func() bool { return ended.Load() == wfs })
	nc.Close()
	testserver.Eventually(t, 10*time.Second, "the executions' goroutines gone", func() bool { return codeGoroutines() == 0 })
}

// codeGoroutines counts the goroutines of workflow code (started by an
// execution's spawn) in this process.
func codeGoroutines() int {
	buf := make([]byte, 8<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "created by github.com/jetflow-dev/jetflow/workflow.(*execution).spawn")
}

// Events sent the moment the cursor says the workflow parked (as
// `jetflow bench --workflow` does): the next segment may run before the
// park that kept the execution has finished; it waits for it and resumes
// the execution, every time (before, it found nothing cached and
// replayed, a few times in a thousand waits).
func TestStickyExecutionWithEventsSentAtThePark(t *testing.T) {
	t.Parallel()
	const n = 200
	e := setup(t)
	var c codeRuns
	def := ticks("test.sticky.fast", &c)
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	ctx := testCtx(t)
	jkv, err := e.JS.KeyValue(ctx, streams.Config{}.WithDefaults().JournalBucket())
	must(t, err)
	id := "sticky-fast-1"
	watch, err := jkv.Watch(ctx, id+".wf")
	must(t, err)
	defer watch.Stop() //nolint:errcheck // the test ends either way
	sendErr := make(chan error, 1)
	go func() {
		sent := map[string]bool{} // by what the cursor says it waits for (the await)
		for en := range watch.Updates() {
			if en == nil || en.Operation() != jetstream.KeyValuePut {
				continue
			}
			var cur struct {
				Waiting bool     `json:"waiting"`
				Waits   []string `json:"waits"`
			}
			if err := json.Unmarshal(en.Value(), &cur); err != nil || !cur.Waiting || len(cur.Waits) != 1 || sent[cur.Waits[0]] {
				continue
			}
			sent[cur.Waits[0]] = true
			if err := workflow.SendEvent(ctx, e.P, id, "tick", fmt.Sprint(len(sent)-1)); err != nil {
				sendErr <- err
				return
			}
		}
	}()
	_, err = workflow.Start(ctx, e.P, def, n, workflow.WithID(id))
	must(t, err)
	out, err := workflow.Result(ctx, e.P, def, id)
	must(t, err)
	select {
	case err := <-sendErr:
		t.Fatal(err)
	default:
	}
	if out != wantTicks(n) {
		t.Fatalf("result %q, want %q", out, wantTicks(n))
	}
	if top, awaits := c.top.Load(), c.awaits.Load(); top != 1 || awaits != n {
		t.Fatalf("code entered %d times, awaits passed %d times; want 1 and %d", top, awaits, n)
	}
}
