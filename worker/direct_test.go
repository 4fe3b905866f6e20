package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/kv"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// Tests of runs published without a record first (direct runs) and of late
// claims (Options.ClaimAfter).

// calls counts handler calls per run id.
type calls struct{ m sync.Map }

func (c *calls) add(id string) {
	v, _ := c.m.LoadOrStore(id, new(atomic.Int32))
	v.(*atomic.Int32).Add(1)
}

func (c *calls) of(id string) int32 {
	v, ok := c.m.Load(id)
	if !ok {
		return 0
	}
	return v.(*atomic.Int32).Load()
}

func (c *calls) total() int32 {
	var n int32
	c.m.Range(func(_, v any) bool { n += v.(*atomic.Int32).Load(); return true })
	return n
}

// revisions records the state of every revision written to the runs bucket,
// per run id, from a watcher started before anything is enqueued.
type revisions struct {
	mu     sync.Mutex
	states map[string][]jetflow.State
}

func watchRevisions(t *testing.T, e *env) *revisions {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := engine.Of(e.P).Store().Runs().WatchAll(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	rv := &revisions{states: map[string][]jetflow.State{}}
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		live := false
		for {
			select {
			case <-ctx.Done():
				return
			case en, ok := <-w.Updates():
				if !ok {
					return
				}
				if en == nil {
					if !live {
						live = true
						close(ready)
					}
					continue
				}
				if en.Operation() != jetstream.KeyValuePut {
					continue
				}
				r, err := kv.Decode(en.Value(), en.Revision())
				if err != nil {
					continue
				}
				rv.mu.Lock()
				rv.states[en.Key()] = append(rv.states[en.Key()], r.State)
				rv.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); _ = w.Stop(); <-done })
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("runs bucket watcher not live")
	}
	return rv
}

// until waits for run id to have a terminal revision and returns the states
// of all its revisions.
func (rv *revisions) until(t *testing.T, id string) []jetflow.State {
	t.Helper()
	var got []jetflow.State
	testserver.Eventually(t, 20*time.Second, "terminal revision of "+id, func() bool {
		rv.mu.Lock()
		defer rv.mu.Unlock()
		got = slices.Clone(rv.states[id])
		return len(got) > 0 && got[len(got)-1].Terminal()
	})
	return got
}

// queuedMsgs is the number of messages in the function stream.
func queuedMsgs(t *testing.T, e *env) uint64 {
	t.Helper()
	return e.StreamMsgs(t, streams.Config{}.WithDefaults().FunctionStream())
}

// recv receives from ch or fails after a deadline.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func noRecord(t *testing.T, e *env, id string) {
	t.Helper()
	if r, err := engine.Of(e.P).Store().Show(context.Background(), id); !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("run %s has a record before any worker ran it: %+v %v", id, r, err)
	}
}

var directGet = jetflow.Define[echoArgs]("direct.get")

func TestDirectRunIsPendingInItsMessageThenRecorded(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	var n calls
	got := make(chan echoArgs, 8)
	worker.Handle(e.W, directGet, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		n.add(j.ID())
		got <- j.Args
		return nil
	})
	ctx := context.Background()
	// Enqueue, RunAt now or in the past and RunAfter(0) are all direct.
	var ids []string
	id, err := e.P.Enqueue(ctx, directGet.With(echoArgs{N: 7, Text: "x"}))
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, id)
	id, err = e.P.RunAt(ctx, time.Now().Add(-time.Minute), directGet.With(echoArgs{N: 8}))
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, id)
	id, err = e.P.RunAfter(ctx, 0, directGet.With(echoArgs{N: 9}))
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, id)
	want := map[string]string{ids[0]: `{"n":7,"text":"x"}`, ids[1]: `{"n":8,"text":""}`, ids[2]: `{"n":9,"text":""}`}
	for _, id := range ids {
		noRecord(t, e, id)
		r, err := e.P.Get(ctx, id)
		if err != nil || r.ID != id || r.State != jetflow.Pending || r.Name != directGet.Name() || string(r.Args) != want[id] {
			t.Fatalf("Get before any worker: %+v %v", r, err)
		}
		if r.CreationTime.IsZero() || r.ScheduledTime.IsZero() || r.Attempts != 0 {
			t.Fatalf("pending run from its message: %+v", r)
		}
	}
	// A run with an idempotency key is written first.
	keyed, err := e.P.Enqueue(ctx, directGet.With(echoArgs{N: 10}), producer.WithID("direct-get-keyed"))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := engine.Of(e.P).Store().Show(ctx, keyed); err != nil || r.State != jetflow.Pending {
		t.Fatalf("keyed run has no pending record: %+v %v", r, err)
	}
	if q := queuedMsgs(t, e); q != 4 {
		t.Fatalf("function stream holds %d messages, want 4", q)
	}

	e.start(t)
	for _, id := range append(ids, keyed) {
		e.wait(t, id)
	}
	for _, id := range ids {
		r, err := engine.Of(e.P).Store().Show(ctx, id)
		if err != nil {
			t.Fatalf("no record after the run: %v", err)
		}
		if r.State != jetflow.Success || r.Attempts != 1 || r.Name != directGet.Name() || string(r.Args) != want[id] ||
			r.Kind != jetflow.Retryable {
			t.Fatalf("record %+v", r)
		}
		if r.CreationTime.IsZero() || r.ScheduledTime.IsZero() || r.StartedTime.IsZero() || r.CompletedTime.IsZero() ||
			r.CompletedTime.Before(r.StartedTime) {
			t.Fatalf("record times %+v", r)
		}
		if c := n.of(id); c != 1 {
			t.Fatalf("handler ran %d times for %s", c, id)
		}
	}
	seen := map[int]bool{}
	for range 4 {
		seen[recv(t, got, "handler args").N] = true
	}
	if !seen[7] || !seen[8] || !seen[9] || !seen[10] {
		t.Fatalf("handler args %v", seen)
	}
}

var (
	directList  = jetflow.Define[echoArgs]("direct.list")
	directOther = jetflow.Define[echoArgs]("direct.other")
)

func TestDirectRunListedExactlyOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	worker.Handle(e.W, directList, func(ctx context.Context, j *worker.Job[echoArgs]) error { return nil })
	worker.Handle(e.W, directOther, func(ctx context.Context, j *worker.Job[echoArgs]) error { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var direct []string
	for i := range 3 {
		id, err := e.P.Enqueue(ctx, directList.With(echoArgs{N: i}))
		if err != nil {
			t.Fatal(err)
		}
		direct = append(direct, id)
	}
	// Recorded and queued: listed from its record, not twice.
	keyed, err := e.P.Enqueue(ctx, directList.With(echoArgs{}), producer.WithID("list-keyed"))
	if err != nil {
		t.Fatal(err)
	}
	// Recorded only (delayed).
	later, err := e.P.RunAfter(ctx, time.Hour, directList.With(echoArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	other, err := e.P.Enqueue(ctx, directOther.With(echoArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	listIDs := append(slices.Clone(direct), keyed, later)
	all := append(slices.Clone(listIDs), other)

	check := func(what string, f producer.Filter, want []string, st jetflow.State) {
		t.Helper()
		page, err := e.P.List(ctx, f)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var got []string
		for _, r := range page.Runs {
			got = append(got, r.ID)
			if st != "" && r.State != st {
				t.Errorf("%s: %s is %s, want %s", what, r.ID, r.State, st)
			}
		}
		// Newest first: the order is List's (docs/runindex.md); what
		// matters here is that each run is listed, once.
		w := slices.Sorted(slices.Values(want))
		if g := slices.Sorted(slices.Values(got)); !slices.Equal(g, w) {
			t.Fatalf("%s: listed %v, want %v (each once)", what, got, w)
		}
		if page.Next != "" {
			t.Fatalf("%s: next %q on the only page", what, page.Next)
		}
	}
	check("pending", producer.Filter{State: jetflow.Pending}, all, jetflow.Pending)
	check("all", producer.Filter{}, all, jetflow.Pending)
	check("function", producer.Filter{Function: directList.Name()}, listIDs, jetflow.Pending)
	check("other function", producer.Filter{Function: directOther.Name()}, []string{other}, jetflow.Pending)
	check("pending of function", producer.Filter{State: jetflow.Pending, Function: directList.Name()}, listIDs, jetflow.Pending)
	check("success", producer.Filter{State: jetflow.Success}, nil, "")

	// Pages of 2: every run once across pages.
	for _, f := range []producer.Filter{{Limit: 2}, {State: jetflow.Pending, Limit: 2}, {Function: directList.Name(), Limit: 2}} {
		var got []string
		pages := 0
		for {
			page, err := e.P.List(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, r := range page.Runs {
				got = append(got, r.ID)
			}
			if page.Next == "" {
				break
			}
			if pages > 10 {
				t.Fatalf("%+v: more pages than runs", f)
			}
			f.After = page.Next
		}
		want := all
		if f.Function != "" {
			want = listIDs
		}
		if w, g := slices.Sorted(slices.Values(want)), slices.Sorted(slices.Values(got)); !slices.Equal(g, w) {
			t.Fatalf("paged %+v: %v, want %v (each once)", f, got, w)
		}
	}

	// Once run, the same runs are listed once from their records.
	e.start(t)
	for _, id := range append(slices.Clone(direct), keyed, other) {
		e.wait(t, id)
	}
	check("success after", producer.Filter{State: jetflow.Success}, append(slices.Clone(direct), keyed, other), jetflow.Success)
	check("pending after", producer.Filter{State: jetflow.Pending}, []string{later}, jetflow.Pending)
	check("function after", producer.Filter{Function: directList.Name()}, listIDs, "")
}

var directWatch = jetflow.Define[echoArgs]("direct.watch")

func TestDirectWatchPendingThenSuccess(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	worker.Handle(e.W, directWatch, func(ctx context.Context, j *worker.Job[echoArgs]) error { return j.SetResult(j.Args.N) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := e.P.Enqueue(ctx, directWatch.With(echoArgs{N: 3}))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := e.P.Watch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	first, ok := <-ch
	if !ok || first.State != jetflow.Pending || first.ID != id || first.Name != directWatch.Name() || string(first.Args) != `{"n":3,"text":""}` {
		t.Fatalf("first watched value %+v (open %v)", first, ok)
	}
	e.start(t)
	var rest []*jetflow.Run
	for r := range ch {
		rest = append(rest, r)
	}
	if len(rest) == 0 {
		t.Fatalf("watch closed after the pending run (ctx %v)", ctx.Err())
	}
	last := rest[len(rest)-1]
	if last.State != jetflow.Success || string(last.Result) != "3" || last.Attempts != 1 {
		t.Fatalf("last watched value %+v", last)
	}
	for _, r := range rest[:len(rest)-1] {
		if r.State != jetflow.InProgress && r.State != jetflow.Pending {
			t.Fatalf("watched %s before success", r.State)
		}
	}
}

var directCancel = jetflow.Define[echoArgs]("direct.cancel")

func TestDirectCancelPendingNeverRuns(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	var n calls
	worker.Handle(e.W, directCancel, func(ctx context.Context, j *worker.Job[echoArgs]) error { n.add(j.ID()); return nil })
	ctx := context.Background()
	id, err := e.P.Enqueue(ctx, directCancel.With(echoArgs{N: 1}))
	if err != nil {
		t.Fatal(err)
	}
	noRecord(t, e, id)
	if err := e.P.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	r, err := e.P.Get(ctx, id)
	if err != nil || r.State != jetflow.Canceled || r.Name != directCancel.Name() {
		t.Fatalf("after cancel: %+v %v", r, err)
	}
	if err := e.P.Cancel(ctx, id); err != nil {
		t.Fatalf("second cancel: %v", err)
	}
	e.start(t)
	marker, err := e.P.Enqueue(ctx, directCancel.With(echoArgs{N: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if r := e.wait(t, marker); r.State != jetflow.Success {
		t.Fatalf("marker %s", r.State)
	}
	if c := n.of(id); c != 0 {
		t.Fatalf("canceled run's handler ran %d times", c)
	}
	if n.total() != 1 {
		t.Fatalf("handler ran %d times, want 1 (the marker)", n.total())
	}
	if r, err := e.P.Get(ctx, id); err != nil || r.State != jetflow.Canceled {
		t.Fatalf("canceled run became %+v %v", r, err)
	}
}

var directBatch = jetflow.Define[echoArgs]("direct.batch")

func TestDirectBatchAllOrNone(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	var n calls
	worker.Handle(e.W, directBatch, func(ctx context.Context, j *worker.Job[echoArgs]) error { n.add(j.ID()); return nil })
	ctx := context.Background()
	items := make([]producer.Item, 10)
	for i := range items {
		items[i] = producer.Item{Call: directBatch.With(echoArgs{N: i})}
	}
	ids, err := e.P.Batch(ctx, items)
	if err != nil || len(ids) != 10 {
		t.Fatalf("batch: %v %v", ids, err)
	}
	if len(slices.Compact(slices.Sorted(slices.Values(ids)))) != 10 {
		t.Fatalf("ids not distinct: %v", ids)
	}
	for i, id := range ids {
		noRecord(t, e, id)
		r, err := e.P.Get(ctx, id)
		if err != nil || r.State != jetflow.Pending || string(r.Args) != string(mustJSON(t, echoArgs{N: i})) {
			t.Fatalf("item %d: %+v %v", i, r, err)
		}
	}
	before := queuedMsgs(t, e)
	if before != 10 {
		t.Fatalf("function stream holds %d messages, want 10", before)
	}

	// One bad item: nothing is written.
	bad := slices.Clone(items)
	bad[5] = producer.Item{Call: jetflow.RawCall("direct.batch bad", json.RawMessage(`{}`))}
	if _, err := e.P.Batch(ctx, bad); !errors.Is(err, jetflow.ErrInvalidName) {
		t.Fatalf("invalid name: %v", err)
	}
	bad[5] = producer.Item{Call: jetflow.RawCall(directBatch.Name(), json.RawMessage(`{"n":`))}
	if _, err := e.P.Batch(ctx, bad); !errors.Is(err, jetflow.ErrBadArgs) {
		t.Fatalf("bad args: %v", err)
	}
	bad[5] = producer.Item{Call: directBatch.With(echoArgs{}), Options: []producer.Option{producer.WithID("bad id")}}
	if _, err := e.P.Batch(ctx, bad); !errors.Is(err, jetflow.ErrInvalidRunID) {
		t.Fatalf("bad id: %v", err)
	}
	if q := queuedMsgs(t, e); q != before {
		t.Fatalf("refused batches wrote %d messages", q-before)
	}

	e.start(t)
	for _, id := range ids {
		if r := e.wait(t, id); r.State != jetflow.Success || r.Attempts != 1 {
			t.Fatalf("%s: %+v", id, r)
		}
		if c := n.of(id); c != 1 {
			t.Fatalf("%s ran %d times", id, c)
		}
	}
	testserver.Eventually(t, 10*time.Second, "function stream drained", func() bool { return queuedMsgs(t, e) == 0 })
	if n.total() != 10 {
		t.Fatalf("handler ran %d times, want 10", n.total())
	}
}

func TestDirectBatchOfMaxBatchRuns(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	var n calls
	worker.Handle(e.W, directBatch, func(ctx context.Context, j *worker.Job[echoArgs]) error { n.add(j.ID()); return nil })
	e.start(t)
	ctx := context.Background()
	items := make([]producer.Item, producer.MaxBatch)
	for i := range items {
		items[i] = producer.Item{Call: directBatch.With(echoArgs{N: i})}
	}
	ids, err := e.P.Batch(ctx, items)
	if err != nil || len(ids) != producer.MaxBatch {
		t.Fatalf("batch of %d: %d ids, %v", producer.MaxBatch, len(ids), err)
	}
	testserver.Eventually(t, 60*time.Second, "all runs succeeded", func() bool {
		for _, id := range ids {
			r, err := engine.Of(e.P).Store().Show(ctx, id)
			if err != nil || r.State != jetflow.Success {
				return false
			}
		}
		return true
	})
	testserver.Eventually(t, 10*time.Second, "function stream drained", func() bool { return queuedMsgs(t, e) == 0 })
	for _, id := range ids {
		if c := n.of(id); c != 1 {
			t.Fatalf("%s ran %d times", id, c)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var asyncFn = jetflow.Define[echoArgs]("async.enqueue")

func TestEnqueueAsyncWaitThenRuns(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	var n calls
	worker.Handle(e.W, asyncFn, func(ctx context.Context, j *worker.Job[echoArgs]) error { n.add(j.ID()); return j.SetResult(j.Args.N) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pf, err := e.P.EnqueueAsync(ctx, asyncFn.With(echoArgs{N: 5}))
	if err != nil || pf == nil || pf.ID() == "" {
		t.Fatalf("EnqueueAsync: %v %v", pf, err)
	}
	if err := pf.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	noRecord(t, e, pf.ID())
	if r, err := e.P.Get(ctx, pf.ID()); err != nil || r.State != jetflow.Pending || string(r.Args) != `{"n":5,"text":""}` {
		t.Fatalf("Get after Wait: %+v %v", r, err)
	}
	e.start(t)
	r := e.wait(t, pf.ID())
	if r.State != jetflow.Success || r.Attempts != 1 || string(r.Result) != "5" || n.of(pf.ID()) != 1 {
		t.Fatalf("record %+v, calls %d", r, n.of(pf.ID()))
	}
	// Refused before anything is sent.
	if pf, err := e.P.EnqueueAsync(ctx, jetflow.RawCall("async.*", nil)); !errors.Is(err, jetflow.ErrInvalidName) || pf != nil {
		t.Fatalf("invalid name: %v %v", pf, err)
	}
}

func TestEnqueueAsyncExistingIDIsAlreadyExists(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := e.P.Enqueue(ctx, asyncFn.With(echoArgs{N: 1}), producer.WithID("async-dup")); err != nil {
		t.Fatal(err)
	}
	pf, err := e.P.EnqueueAsync(ctx, asyncFn.With(echoArgs{N: 2}), producer.WithID("async-dup"))
	if err != nil || pf == nil {
		t.Fatalf("EnqueueAsync with an existing id: %v %v (want a Pending whose Wait fails)", pf, err)
	}
	if pf.ID() != "async-dup" {
		t.Fatalf("id %q", pf.ID())
	}
	if err := pf.Wait(ctx); !errors.Is(err, producer.ErrAlreadyExists) {
		t.Fatalf("Wait: %v, want ErrAlreadyExists", err)
	}
	if r, err := e.P.Get(ctx, "async-dup"); err != nil || string(r.Args) != `{"n":1,"text":""}` {
		t.Fatalf("existing run changed: %+v %v", r, err)
	}
	// A fresh id is written first (synchronously) and Wait is nil.
	pf, err = e.P.EnqueueAsync(ctx, asyncFn.With(echoArgs{N: 3}), producer.WithID("async-fresh"))
	if err != nil || pf.Wait(ctx) != nil || pf.ID() != "async-fresh" {
		t.Fatalf("fresh id: %v %v", pf, err)
	}
	if r, err := engine.Of(e.P).Store().Show(ctx, "async-fresh"); err != nil || r.State != jetflow.Pending {
		t.Fatalf("keyed async run has no record: %+v %v", r, err)
	}
}

func TestEnqueueAsyncManyRunExactlyOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	var n calls
	worker.Handle(e.W, asyncFn, func(ctx context.Context, j *worker.Job[echoArgs]) error { n.add(j.ID()); return nil })
	e.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const runs = 500
	pending := make([]*producer.Pending, 0, runs)
	for i := range runs {
		pf, err := e.P.EnqueueAsync(ctx, asyncFn.With(echoArgs{N: i}))
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, pf)
	}
	ids := map[string]bool{}
	for _, pf := range pending {
		if err := pf.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		ids[pf.ID()] = true
	}
	if len(ids) != runs {
		t.Fatalf("%d distinct ids, want %d", len(ids), runs)
	}
	testserver.Eventually(t, 60*time.Second, "all runs succeeded", func() bool {
		for id := range ids {
			r, err := engine.Of(e.P).Store().Show(ctx, id)
			if err != nil || r.State != jetflow.Success || r.Attempts != 1 {
				return false
			}
		}
		return true
	})
	testserver.Eventually(t, 10*time.Second, "function stream drained", func() bool { return queuedMsgs(t, e) == 0 })
	for id := range ids {
		if c := n.of(id); c != 1 {
			t.Fatalf("%s ran %d times", id, c)
		}
	}
	if n.total() != runs {
		t.Fatalf("handler ran %d times, want %d", n.total(), runs)
	}
}

var claimBlock = jetflow.Define[echoArgs]("claim.block")

func TestLateClaimShowsOwnerWhileRunning(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{ID: "w1"})
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	worker.Handle(e.W, claimBlock, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		<-release
		return nil
	})
	e.start(t)
	rv := watchRevisions(t, e)
	ctx := context.Background()
	id, err := e.P.Enqueue(ctx, claimBlock.With(echoArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	r := e.waitState(t, id, jetflow.InProgress)
	if r.Owner != "w1" || r.Heartbeat.IsZero() || r.StartedTime.IsZero() || r.Attempts != 1 || r.Revision == 0 {
		t.Fatalf("claim %+v", r)
	}
	if s, err := engine.Of(e.P).Store().Show(ctx, id); err != nil || s.State != jetflow.InProgress || s.Owner != "w1" {
		t.Fatalf("stored claim %+v %v", s, err)
	}
	unblock()
	if r := e.wait(t, id); r.State != jetflow.Success || r.Attempts != 1 {
		t.Fatalf("final %+v", r)
	}
	if st := rv.until(t, id); !slices.Equal(st, []jetflow.State{jetflow.InProgress, jetflow.Success}) {
		t.Fatalf("revisions %v, want [inProgress success]", st)
	}
}

var claimFast = jetflow.Define[echoArgs]("claim.fast")

func TestClaimFastRunWritesOnlyItsOutcome(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	worker.Handle(e.W, claimFast, func(ctx context.Context, j *worker.Job[echoArgs]) error { return nil }, worker.Options{})
	e.start(t)
	rv := watchRevisions(t, e)
	id, err := e.P.Enqueue(context.Background(), claimFast.With(echoArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	if st := rv.until(t, id); !slices.Equal(st, []jetflow.State{jetflow.Success}) {
		t.Fatalf("revisions %v, want [success]", st)
	}
	if r := e.wait(t, id); r.Attempts != 1 || r.StartedTime.IsZero() {
		t.Fatalf("record %+v", r)
	}
}

var claimFirst = jetflow.Define[echoArgs]("claim.first")

func TestClaimFirstWhenClaimAfterNegative(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{ID: "w-first"})
	seen := make(chan *jetflow.Run, 1)
	worker.Handle(e.W, claimFirst, storedWhileRunning(e, seen), worker.Options{ClaimAfter: -1})
	e.start(t)
	id, err := e.P.Enqueue(context.Background(), claimFirst.With(echoArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	if r := recv(t, seen, "the handler's look at its record"); r == nil || r.State != jetflow.InProgress || r.Owner != "w-first" {
		t.Fatalf("record while the handler ran: %+v, want claimed by w-first", r)
	}
	if r := e.wait(t, id); r.State != jetflow.Success {
		t.Fatalf("final %+v", r)
	}
}

// storedWhileRunning is a handler that sends the stored record of its run
// (nil if none) as it starts: a run claimed first is inProgress by then.
func storedWhileRunning(e *env, seen chan<- *jetflow.Run) func(ctx context.Context, j *worker.Job[echoArgs]) error {
	return func(ctx context.Context, j *worker.Job[echoArgs]) error {
		r, err := engine.Of(e.P).Store().Show(ctx, j.ID())
		if err != nil {
			r = nil
		}
		seen <- r
		return nil
	}
}

var claimAMO = jetflow.Define[echoArgs]("claim.amo", jetflow.WithKind(jetflow.AtMostOnce))

func TestClaimFirstForAtMostOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{ID: "w-amo"})
	seen := make(chan *jetflow.Run, 1)
	// Neither the default nor NoClaim nor a long ClaimAfter delays the claim.
	worker.Handle(e.W, claimAMO, storedWhileRunning(e, seen), worker.Options{NoClaim: true, ClaimAfter: time.Hour})
	e.start(t)
	id, err := e.P.Enqueue(context.Background(), claimAMO.With(echoArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	if r := recv(t, seen, "the handler's look at its record"); r == nil || r.State != jetflow.InProgress || r.Owner != "w-amo" {
		t.Fatalf("record while the handler ran: %+v, want claimed by w-amo", r)
	}
	if r := e.wait(t, id); r.State != jetflow.Success {
		t.Fatalf("final %+v", r)
	}
}

var (
	claimNone  = jetflow.Define[echoArgs]("claim.none")
	claimProbe = jetflow.Define[echoArgs]("claim.probe")
)

func TestClaimNeverWithNoClaim(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	releaseA, releaseB := make(chan struct{}), make(chan struct{})
	var onceA, onceB sync.Once
	unblockA := func() { onceA.Do(func() { close(releaseA) }) }
	unblockB := func() { onceB.Do(func() { close(releaseB) }) }
	t.Cleanup(unblockA)
	t.Cleanup(unblockB)
	startedA := make(chan struct{}, 1)
	worker.Handle(e.W, claimNone, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		startedA <- struct{}{}
		<-releaseA
		return nil
	}, worker.Options{NoClaim: true})
	// Runs of a function with the default ClaimAfter prove that the late
	// claim pass has looked at the NoClaim run once it had run ClaimAfter.
	worker.Handle(e.W, claimProbe, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		<-releaseB
		return nil
	})
	e.start(t)
	rv := watchRevisions(t, e)
	ctx := context.Background()
	a, err := e.P.Enqueue(ctx, claimNone.With(echoArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	recv(t, startedA, "NoClaim handler start")
	// b1 starts after a, so the pass that claims b1 found a due as well;
	// b2 starts after b1's claim, so the pass that claims b2 comes after
	// that pass ended.
	b1, err := e.P.Enqueue(ctx, claimProbe.With(echoArgs{N: 1}))
	if err != nil {
		t.Fatal(err)
	}
	e.waitState(t, b1, jetflow.InProgress)
	b2, err := e.P.Enqueue(ctx, claimProbe.With(echoArgs{N: 2}))
	if err != nil {
		t.Fatal(err)
	}
	e.waitState(t, b2, jetflow.InProgress)
	noRecord(t, e, a)
	if r, err := e.P.Get(ctx, a); err != nil || r.State != jetflow.Pending {
		t.Fatalf("NoClaim run while running: %+v %v", r, err)
	}
	unblockA()
	if r := e.wait(t, a); r.State != jetflow.Success || r.Attempts != 1 {
		t.Fatalf("final %+v", r)
	}
	if st := rv.until(t, a); !slices.Equal(st, []jetflow.State{jetflow.Success}) {
		t.Fatalf("revisions %v, want [success]", st)
	}
	unblockB()
	e.wait(t, b1)
	e.wait(t, b2)
}

var claimCancel = jetflow.Define[echoArgs]("claim.cancel")

func TestLateClaimCancelBeforeClaim(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	var n calls
	started := make(chan string, 1)
	causes := make(chan error, 1)
	worker.Handle(e.W, claimCancel, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		n.add(j.ID())
		if j.Args.N == 0 {
			return nil // the marker
		}
		started <- j.ID()
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil // a success that must be discarded
	}, worker.Options{ClaimAfter: time.Hour, Concurrency: 1})
	e.start(t)
	rv := watchRevisions(t, e)
	ctx := context.Background()
	id, err := e.P.Enqueue(ctx, claimCancel.With(echoArgs{N: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if got := recv(t, started, "handler start"); got != id {
		t.Fatalf("started %s", got)
	}
	// Running, not claimed: no record, pending in its message.
	noRecord(t, e, id)
	if r, err := e.P.Get(ctx, id); err != nil || r.State != jetflow.Pending {
		t.Fatalf("running unclaimed run: %+v %v", r, err)
	}
	if err := e.P.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if cause := recv(t, causes, "handler context canceled"); !errors.Is(cause, jetflow.ErrCanceled) {
		t.Fatalf("cause %v, want ErrCanceled", cause)
	}
	if r := e.wait(t, id); r.State != jetflow.Canceled {
		t.Fatalf("final %+v", r)
	}
	// A later run proves the worker went past the canceled one.
	marker, err := e.P.Enqueue(ctx, claimCancel.With(echoArgs{N: 0}))
	if err != nil {
		t.Fatal(err)
	}
	e.wait(t, marker)
	// One runner: the marker ran after the canceled run's outcome was
	// handled, and its record was written after any write of that outcome.
	rv.until(t, marker)
	testserver.Eventually(t, 10*time.Second, "function stream drained", func() bool { return queuedMsgs(t, e) == 0 })
	if st := rv.until(t, id); !slices.Equal(st, []jetflow.State{jetflow.Canceled}) {
		t.Fatalf("revisions %v, want [canceled]", st)
	}
	if r, err := e.P.Get(ctx, id); err != nil || r.State != jetflow.Canceled {
		t.Fatalf("canceled run became %+v %v", r, err)
	}
	if c := n.of(id); c != 1 {
		t.Fatalf("canceled run's handler ran %d times, want 1", c)
	}
}

var directRace = jetflow.Define[echoArgs]("direct.race")

// Get and Cancel never answer ErrNotFound for a direct run while a worker
// takes it (writes its record, then acks its message).
func TestDirectGetAndCancelNeverMissARunBeingTaken(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	gate := make(chan struct{})
	worker.Handle(e.W, directRace, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		<-gate
		return nil
	}, worker.Options{Concurrency: 50})
	ctx := context.Background()
	const n = 100
	ids := make([]string, n)
	for i := range ids {
		id, err := e.P.Enqueue(ctx, directRace.With(echoArgs{N: i}))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	e.start(t)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) {
				if i%2 == 1 {
					// Cancel races the worker: never ErrNotFound.
					if err := e.P.Cancel(ctx, id); err != nil {
						t.Errorf("cancel %s: %v", id, err)
					}
					return
				}
				r, err := e.P.Get(ctx, id)
				if err != nil {
					t.Errorf("get %s: %v", id, err)
					return
				}
				if r.State.Terminal() {
					return
				}
			}
			t.Errorf("run %s not terminal within 30s", id)
		})
	}
	close(gate)
	wg.Wait()
	for _, id := range ids {
		if r := e.wait(t, id); r.State != jetflow.Success && r.State != jetflow.Canceled {
			t.Errorf("run %s ended %s", id, r.State)
		}
	}
}

var directDeep = jetflow.Define[echoArgs]("a.b.c.d.e.f.g.h.i")

// A function name of more tokens than Get looks for in the function stream
// gets its record first: Get and Cancel find its pending run.
func TestDirectDeepFunctionNameIsRecordedFirst(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	ctx := context.Background()
	id, err := e.P.Enqueue(ctx, directDeep.With(echoArgs{N: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := engine.Of(e.P).Store().Show(ctx, id); err != nil || r.State != jetflow.Pending {
		t.Fatalf("record %+v, %v: want a pending record", r, err)
	}
	if err := e.P.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if r, err := e.P.Get(ctx, id); err != nil || r.State != jetflow.Canceled {
		t.Fatalf("after Cancel: %+v, %v", r, err)
	}
}

// EnqueueAsync waits while the JetStream context's async window is full
// instead of failing: with a window of 2, 200 runs are all accepted.
func TestEnqueueAsyncWaitsForAFullWindow(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	js, err := jetstream.New(e.NC, jetstream.WithPublishAsyncMaxPending(2))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := producer.New(ctx, js, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const runs = 200
	pending := make([]*producer.Pending, 0, runs)
	for i := range runs {
		pf, err := p.EnqueueAsync(ctx, asyncFn.With(echoArgs{N: i}))
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		pending = append(pending, pf)
	}
	for _, pf := range pending {
		if err := pf.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := queuedMsgs(t, e); got != runs {
		t.Fatalf("%d runs queued, want %d", got, runs)
	}
}

var directDup = jetflow.Define[echoArgs]("direct.dup")

// A second message for a run that is running here, not yet claimed (a
// duplicate publish, a redelivery), does not start a second handler; both
// messages end acknowledged and the run has one outcome.
func TestDuplicateOfUnclaimedRunningRunIsFolded(t *testing.T) {
	t.Parallel()
	folded := make(chan struct{}, 16)
	log := slog.New(&onMessage{msg: "duplicate delivery of a run running here", ch: folded})
	e := setup(t, worker.Config{AckWait: time.Second, Logger: log})
	var n calls
	started, release := make(chan string, 4), make(chan struct{})
	worker.Handle(e.W, directDup, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		n.add(j.ID())
		started <- j.ID()
		<-release
		return nil
	}, worker.Options{ClaimAfter: time.Hour, Concurrency: 4})
	e.start(t)
	ctx := context.Background()
	id, err := e.P.Enqueue(ctx, directDup.With(echoArgs{N: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if got := recv(t, started, "first start"); got != id {
		t.Fatalf("started %s, want %s", got, id)
	}
	// The same run's message again, as jetflow's producer publishes it.
	now := time.Now().UTC()
	msg := streams.Config{}.WithDefaults().Message(streams.Envelope{
		Function: directDup.Name(), ID: id, Attempt: 1, Created: now, Scheduled: now,
		Args: mustJSON(t, echoArgs{N: 1}), New: true,
	})
	if _, err := e.JS.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	// The duplicate is delivered to this worker (concurrency 4, idle
	// runners) and folded: wait until nothing is left to deliver.
	testserver.Eventually(t, 20*time.Second, "duplicate delivered", func() bool {
		c, err := e.JS.Consumer(ctx, streams.Config{}.WithDefaults().FunctionStream(), worker.ConsumerName("jetflow", directDup.Name()))
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 2
	})
	// Delivered to the client is not yet handled: wait until the worker
	// has folded it into the running run.
	recv(t, folded, "duplicate folded")
	close(release)
	r := e.wait(t, id)
	if r.State != jetflow.Success || r.Attempts != 1 {
		t.Fatalf("run %+v, want one successful attempt", r)
	}
	testserver.Eventually(t, 20*time.Second, "both messages acknowledged", func() bool { return queuedMsgs(t, e) == 0 })
	if c := n.of(id); c != 1 {
		t.Fatalf("handler ran %d times, want 1", c)
	}
}

// onMessage is a slog handler that signals ch for each record whose
// message is msg (at any level).
type onMessage struct {
	msg string
	ch  chan struct{}
}

func (h *onMessage) Enabled(context.Context, slog.Level) bool { return true }
func (h *onMessage) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.ch <- struct{}{}:
		default:
		}
	}
	return nil
}
func (h *onMessage) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *onMessage) WithGroup(string) slog.Handler      { return h }

var freshFn = jetflow.Define[echoArgs]("direct.fresh")

// freshSeen is what a handler of freshFn saw.
type freshSeen struct {
	attempt int
	fresh   bool
}

// Fresh is true for the first delivery of a run's first attempt, and false
// for the retry of a failed attempt. (A redelivery is never fresh: the
// worker reconciles it with its record before it runs; integration's
// worker-kill and workflow-kill faults run redeliveries.)
func TestFreshOnlyOnTheFirstDeliveryOfTheFirstAttempt(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	got := make(chan freshSeen, 8)
	worker.Handle(e.W, freshFn, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		got <- freshSeen{j.Attempt(), j.Fresh()}
		if j.Attempt() == 1 {
			return jetflow.RetryAfter(10*time.Millisecond, errors.New("once more"))
		}
		return nil
	}, worker.Options{MaxAttempts: 3})
	e.start(t)
	ctx := context.Background()
	if _, err := e.P.Enqueue(ctx, freshFn.With(echoArgs{N: 1})); err != nil {
		t.Fatal(err)
	}
	if s := recv(t, got, "first attempt"); s.attempt != 1 || !s.fresh {
		t.Fatalf("first attempt: %+v, want attempt 1 fresh", s)
	}
	if s := recv(t, got, "second attempt"); s.attempt != 2 || s.fresh {
		t.Fatalf("second attempt: %+v, want attempt 2 not fresh", s)
	}
}

// A redelivery of a first attempt is not fresh: its first delivery may have
// started the handler elsewhere (a worker that died before it claimed the
// run), so the worker reconciles it with its record, and a segment told it
// is fresh would skip reading a journal the first delivery may have written.
func TestRedeliveryOfTheFirstAttemptIsNotFresh(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{AckWait: time.Second})
	ctx := context.Background()

	// The first worker takes the run and dies inside its handler before
	// it claims it (ClaimAfter an hour): its connection closes, the
	// message is never acked.
	dnc, djs := e.Connect()
	dying, err := worker.New(ctx, djs, worker.Config{AckWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan bool, 1)
	release := make(chan struct{})
	defer close(release)
	worker.Handle(dying, freshFn, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		first <- j.Fresh()
		<-release
		return nil
	}, worker.Options{ClaimAfter: time.Hour})
	if err := dying.Start(ctx); err != nil {
		t.Fatal(err)
	}
	id, err := e.P.Enqueue(ctx, freshFn.With(echoArgs{N: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if fresh := recv(t, first, "first delivery"); !fresh {
		t.Fatal("first delivery of attempt 1: Fresh() false, want true")
	}
	dnc.Close()

	got := make(chan freshSeen, 4)
	worker.Handle(e.W, freshFn, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		got <- freshSeen{j.Attempt(), j.Fresh()}
		return nil
	})
	e.start(t)
	if s := recv(t, got, "redelivery"); s.attempt != 1 || s.fresh {
		t.Fatalf("redelivery: %+v, want attempt 1, not fresh", s)
	}
	if r := e.wait(t, id); r.State != jetflow.Success || r.Attempts != 1 {
		t.Fatalf("run %s: %s after %d attempts, want success after 1", id, r.State, r.Attempts)
	}
}
