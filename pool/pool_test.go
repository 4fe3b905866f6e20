package pool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/pool"
	"github.com/jetflow-dev/jetflow/producer"
)

// Three workers, three dispatchers (one active), max parallelism 4: the
// handlers never run more than 4 at once, reach 4, and every item finishes.
func TestParallelismAcrossWorkers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const limit, n = 4, 40
	e.tr.gateAt = limit
	e.workers(t, 3)
	cfg := testConfig("par")
	cfg.MaxParallelism = limit
	var pools []*pool.Pool
	for range 3 {
		pl := e.newPool(t, cfg)
		startPool(t, pl)
		pools = append(pools, pl)
	}
	ids := make([]string, n)
	for i := range n {
		ids[i] = enqueue(t, pools[i%3], fmt.Sprintf("item-%d", i), WorkArgs{})
	}
	items := e.waitFinished(t, pools[0], ids)
	for id, it := range items {
		if it.State != jetflow.Success || it.Attempts != 1 {
			t.Errorf("item %s: %s after %d attempts: %s", id, it.State, it.Attempts, it.Error)
		}
	}
	if got := e.tr.max.Load(); got != limit {
		t.Fatalf("max concurrent handlers = %d, want %d", got, limit)
	}
	leaders := 0
	for _, pl := range pools {
		if pl.Stats().Leader {
			leaders++
		}
	}
	if leaders != 1 {
		t.Errorf("%d dispatchers lead, want 1", leaders)
	}
	e.waitIdle(t, pools[0])
	if got := e.tr.max.Load(); got != limit {
		t.Fatalf("max concurrent handlers = %d, want %d", got, limit)
	}
}

// Max parallelism 0 pauses the pool: nothing starts while the dispatcher
// passes over the queue; set to 2, the items run, at most 2 at once.
func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 1)
	ctx := context.Background()
	pl := e.newPool(t, testConfig("pause"))
	if err := pl.SetMaxParallelism(ctx, 0); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 6 {
		ids = append(ids, enqueue(t, pl, fmt.Sprintf("p-%d", i), WorkArgs{}))
	}
	startPool(t, pl)
	var passes int64
	testserver.Eventually(t, 10*time.Second, "queue loaded", func() bool {
		s := pl.Stats()
		passes = s.Passes
		return s.Loaded && s.Queued == len(ids)
	})
	testserver.Eventually(t, 10*time.Second, "three more dispatcher passes", func() bool {
		return pl.Stats().Passes >= passes+3
	})
	if got := len(e.tr.started()); got != 0 {
		t.Fatalf("%d items started in a paused pool", got)
	}
	for _, id := range ids {
		it, err := pl.Status(ctx, id)
		if err != nil || it.State != jetflow.Pending {
			t.Fatalf("item %s: %+v %v, want pending", id, it, err)
		}
	}
	if err := pl.SetMaxParallelism(ctx, 2); err != nil {
		t.Fatal(err)
	}
	e.waitFinished(t, pl, ids)
	if got := e.tr.max.Load(); got > 2 || got < 1 {
		t.Fatalf("max concurrent handlers = %d, want 1-2", got)
	}
	inf, err := pl.Info(ctx)
	if err != nil || inf.MaxParallelism != 2 {
		t.Fatalf("info %+v %v", inf, err)
	}
}

// Under saturation (parallelism 1, one item running) the waiting items
// start high, normal, low, whatever the order they were enqueued in.
func TestPriorityOrder(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 2)
	ctx := context.Background()
	cfg := testConfig("prio")
	cfg.MaxParallelism = 1
	pl := e.newPool(t, cfg)
	startPool(t, pl)
	ids := []string{enqueue(t, pl, "blocker", WorkArgs{Block: true})}
	testserver.Eventually(t, 10*time.Second, "blocker running", func() bool { return e.tr.startedKey("blocker") })
	ids = append(ids,
		enqueue(t, pl, "low", WorkArgs{}, pool.WithPriority(pool.Low)),
		enqueue(t, pl, "normal", WorkArgs{}),
		enqueue(t, pl, "high", WorkArgs{}, pool.WithPriority(pool.High)),
	)
	testserver.Eventually(t, 10*time.Second, "queue loaded", func() bool { return pl.Stats().Queued == 3 })
	if it, _ := pl.Status(ctx, "blocker"); it == nil || !it.Running() {
		t.Fatalf("blocker not running: %+v", it)
	}
	e.tr.unblock("blocker")
	e.waitFinished(t, pl, ids)
	var order []string
	for _, s := range e.tr.started() {
		order = append(order, s.key)
	}
	if want := []string{"blocker", "high", "normal", "low"}; !slices.Equal(order, want) {
		t.Fatalf("start order %v, want %v", order, want)
	}
	it, err := pl.Status(ctx, "low")
	if err != nil || it.Priority != pool.Low || it.RunID != pool.RunID("prio", "low", 1) {
		t.Fatalf("low: %+v %v", it, err)
	}
	if r, err := e.P.Get(ctx, it.RunID); err != nil || r.Pool != "prio" || r.Priority != int(pool.Low) {
		t.Fatalf("run of low: %+v %v", r, err)
	}
}

// Aging: a low item waiting while high items keep arriving (one new high
// item per start) still starts, once it has aged past them.
func TestLowPriorityNotStarved(t *testing.T) {
	t.Parallel()
	e := setup(t)
	cfg := testConfig("aging")
	cfg.MaxParallelism = 1
	cfg.Aging = 100 * time.Millisecond
	pl := e.newPool(t, cfg)
	var highs atomic.Int64
	var pendingHighsAtLow atomic.Int64
	pendingHighsAtLow.Store(-1)
	var enqErr atomic.Value
	e.tr.onStart = func(key string) {
		if key == "low" {
			started := 0
			for _, s := range e.tr.started() {
				if strings.HasPrefix(s.key, "high-") {
					started++
				}
			}
			pendingHighsAtLow.Store(highs.Load() - int64(started))
			return
		}
		if e.tr.startedKey("low") {
			return
		}
		// Another high item for every start, until the low one runs.
		n := highs.Add(1)
		if _, err := pl.Enqueue(context.Background(), Work.With(WorkArgs{Key: fmt.Sprintf("high-%d", n)}),
			pool.WithPriority(pool.High)); err != nil {
			enqErr.Store(err)
		}
	}
	e.workers(t, 1)
	for range 3 {
		n := highs.Add(1)
		enqueue(t, pl, fmt.Sprintf("high-%d", n), WorkArgs{}, pool.WithPriority(pool.High))
	}
	enqueue(t, pl, "low", WorkArgs{}, pool.WithPriority(pool.Low))
	startPool(t, pl)
	e.waitFinished(t, pl, []string{"low"})
	if err := enqErr.Load(); err != nil {
		t.Fatal(err)
	}
	st := e.tr.started()
	for _, s := range st[:3] {
		if !strings.HasPrefix(s.key, "high-") {
			t.Fatalf("start order %v: the first three high items must go first", st)
		}
	}
	if got := pendingHighsAtLow.Load(); got < 1 {
		t.Fatalf("high items pending when the low one started = %d, want >= 1", got)
	}
}

// CancelAll cancels pending and running items: the pending ones never
// start, the running ones see their context canceled, and each gets its
// on-complete callback with Canceled.
func TestCancelAll(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 2)
	ctx := context.Background()
	cfg := testConfig("cancel")
	cfg.MaxParallelism = 2
	pl := e.newPool(t, cfg)
	startPool(t, pl)
	ids := []string{enqueue(t, pl, "run-0", WorkArgs{Block: true}), enqueue(t, pl, "run-1", WorkArgs{Block: true})}
	testserver.Eventually(t, 10*time.Second, "two items running", func() bool { return len(e.tr.started()) == 2 })
	var batch []pool.Entry
	for i := range 20 {
		key := fmt.Sprintf("wait-%d", i)
		batch = append(batch, pool.Entry{Call: Work.With(WorkArgs{Key: key}), Options: []pool.Option{pool.WithID(key), onComplete(key)}})
	}
	bids, err := pl.EnqueueBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, bids...)
	n, err := pl.CancelAll(ctx)
	if err != nil || n != 22 {
		t.Fatalf("CancelAll = %d, %v; want 22", n, err)
	}
	items := e.waitFinished(t, pl, ids)
	for id, it := range items {
		if it.State != jetflow.Canceled {
			t.Errorf("item %s: %s", id, it.State)
		}
	}
	// A new item runs: the pool is free again, and nothing canceled started.
	sentinel := enqueue(t, pl, "after", WorkArgs{})
	e.waitFinished(t, pl, []string{sentinel})
	e.waitIdle(t, pl)
	var started []string
	for _, s := range e.tr.started() {
		started = append(started, s.key)
	}
	sort.Strings(started)
	if want := []string{"after", "run-0", "run-1"}; !slices.Equal(started, want) {
		t.Fatalf("started %v, want %v", started, want)
	}
	e.tr.mu.Lock()
	causes := map[string]error{"run-0": e.tr.causes["run-0"], "run-1": e.tr.causes["run-1"]}
	e.tr.mu.Unlock()
	for k, c := range causes {
		if !errors.Is(c, jetflow.ErrCanceled) {
			t.Errorf("%s: context cause %v, want jetflow.ErrCanceled", k, c)
		}
	}
	for id, cs := range e.tr.completions() {
		want := jetflow.Canceled
		if id == "after" {
			want = jetflow.Success
		}
		if len(cs) != 1 || cs[0].Run.State != want {
			t.Errorf("callbacks of %s: %d, state %s; want one, %s", id, len(cs), cs[0].Run.State, want)
		}
	}
	// Cancel of a finished item is a no-op; of an unknown one, ErrNotFound.
	if err := pl.Cancel(ctx, "after"); err != nil {
		t.Fatal(err)
	}
	if err := pl.Cancel(ctx, "nope"); !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("cancel unknown: %v", err)
	}
}

// Every item's callback runs exactly once, with its outcome: successes,
// successes after retries (the pool's retry policy), permanent failures
// (a panic: not retried) and retries exhausted.
func TestOnCompleteExactlyOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 3)
	ctx := context.Background()
	cfg := testConfig("once")
	cfg.MaxParallelism = 5
	cfg.Retry.MaxAttempts = 3
	pl := e.newPool(t, cfg)
	startPool(t, pl)
	type want struct {
		state    jetflow.State
		attempts int
	}
	wants := map[string]want{}
	var entries []pool.Entry
	for i := range 40 {
		key := fmt.Sprintf("k-%d", i)
		args := WorkArgs{Key: key}
		w := want{jetflow.Success, 1}
		switch i % 4 {
		case 1:
			args.Fail, w = 2, want{jetflow.Success, 3}
		case 2:
			args.Panic, w = true, want{jetflow.Failed, 1}
		case 3:
			args.Fail, w = 5, want{jetflow.Failed, 3}
		}
		wants[key] = w
		entries = append(entries, pool.Entry{Call: Work.With(args), Options: []pool.Option{pool.WithID(key), onComplete(key)}})
	}
	ids, err := pl.EnqueueBatch(ctx, entries)
	if err != nil {
		t.Fatal(err)
	}
	// The same id again is refused, and names the existing item.
	if id, err := pl.Enqueue(ctx, Work.With(WorkArgs{Key: "k-0"}), pool.WithID("k-0")); !errors.Is(err, pool.ErrAlreadyExists) ||
		!errors.Is(err, producer.ErrAlreadyExists) || id != "k-0" {
		t.Fatalf("enqueue of an existing id: %q, %v", id, err)
	}
	items := e.waitFinished(t, pl, ids)
	e.waitIdle(t, pl)
	done := e.tr.completions()
	for key, w := range wants {
		it := items[key]
		if it.State != w.state || it.Attempts != w.attempts {
			t.Errorf("item %s: %s after %d attempts (%s); want %s after %d", key, it.State, it.Attempts, it.Error, w.state, w.attempts)
		}
		cs := done[key]
		if len(cs) != 1 {
			t.Errorf("item %s: %d callbacks, want 1", key, len(cs))
			continue
		}
		c := cs[0]
		if c.Run.ID != key || c.Run.State != w.state || c.Run.Attempts != w.attempts || c.Run.Pool != "once" {
			t.Errorf("callback of %s: %+v", key, c.Run)
		}
		var cctx map[string]string
		if err := json.Unmarshal(c.Context, &cctx); err != nil || cctx["key"] != key {
			t.Errorf("callback context of %s: %s", key, c.Context)
		}
		if w.state == jetflow.Success {
			var res string
			if err := json.Unmarshal(c.Run.Result, &res); err != nil || res != key {
				t.Errorf("result of %s: %s", key, c.Run.Result)
			}
		}
	}
	pg, err := e.P.List(ctx, producer.Filter{Function: Complete.Name(), Limit: 1000})
	if err != nil || len(pg.Runs) != len(wants) {
		t.Fatalf("%d callback runs (%v), want %d", len(pg.Runs), err, len(wants))
	}
	if got := e.tr.max.Load(); got > 5 {
		t.Fatalf("max concurrent handlers = %d > 5", got)
	}
}

// A rate limit of 5 starts per second, held across three workers: no window
// of one second holds more than 5 grants, no handler starts before its
// grant, and every item finishes.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 3)
	const N, per, n = 5, time.Second, 16
	cfg := testConfig("rate")
	cfg.MaxParallelism = 10
	cfg.RateLimit = pool.RateLimit{N: N, Per: per}
	pl := e.newPool(t, cfg)
	var ids []string
	for i := range n {
		ids = append(ids, enqueue(t, pl, fmt.Sprintf("r-%d", i), WorkArgs{}))
	}
	startPool(t, pl)
	items := e.waitFinished(t, pl, ids)
	var grants []time.Time
	for _, it := range items {
		if it.State != jetflow.Success {
			t.Errorf("item %s: %s", it.ID, it.State)
		}
		grants = append(grants, it.Started)
	}
	sort.Slice(grants, func(i, j int) bool { return grants[i].Before(grants[j]) })
	for i := 0; i+N < len(grants); i++ {
		if d := grants[i+N].Sub(grants[i]); d <= per {
			t.Fatalf("grants %d and %d are %s apart: %d starts within %s", i, i+N, d, N+1, per)
		}
	}
	// Handler starts: each at or after its grant. With L the largest delay
	// between a grant and its handler start, no window of per-L holds more
	// than N handler starts.
	var lat time.Duration
	var starts []time.Time
	for _, s := range e.tr.started() {
		g := items[s.key].Started
		if s.at.Before(g) {
			t.Fatalf("item %s started at %s, before its grant at %s", s.key, s.at, g)
		}
		lat = max(lat, s.at.Sub(g))
		starts = append(starts, s.at)
	}
	if len(starts) != n {
		t.Fatalf("%d handler starts, want %d", len(starts), n)
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	for i := 0; i+N < len(starts); i++ {
		if d := starts[i+N].Sub(starts[i]); d <= per-lat {
			t.Fatalf("handler starts %d and %d are %s apart (largest grant-to-start delay %s)", i, i+N, d, lat)
		}
	}
	t.Logf("largest grant-to-handler delay %s", lat)
}

// The dispatcher stops mid-way and the server restarts; a new dispatcher (a
// new Pool value on another connection) carries on and every item finishes,
// each callback once. (A scheduler runs, as in production: its repair sweep
// publishes runs whose record was written while the server went away.)
func TestDispatcherRestart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.workers(t, 2)
	e.scheduler(t)
	ctx := context.Background()
	cfg := testConfig("restart")
	cfg.MaxParallelism = 2
	a := e.newPool(t, cfg)
	var ids []string
	for i := range 30 {
		ids = append(ids, enqueue(t, a, fmt.Sprintf("x-%d", i), WorkArgs{}))
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 20*time.Second, "some items done", func() bool { return e.tr.ncompleted() >= 5 })
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	<-a.Stopped()
	e.Restart()
	cfg.ID = "second"
	b := e.newPool(t, cfg)
	startPool(t, b)
	items := e.waitFinished(t, b, ids)
	for id, it := range items {
		if it.State != jetflow.Success {
			t.Errorf("item %s: %s (%s)", id, it.State, it.Error)
		}
	}
	e.waitIdle(t, b)
	for id, cs := range e.tr.completions() {
		if len(cs) != 1 {
			t.Errorf("item %s: %d callbacks", id, len(cs))
		}
	}
	// Terms may exceed 1 on a loaded machine (a renewal slower than 3/4 of
	// the lease's TTL ends a term; the next renewal starts another).
	if s := b.Stats(); s.Terms < 1 || s.Started == 0 {
		t.Errorf("second dispatcher stats %+v", s)
	}
	if got := e.tr.max.Load(); got > 2 {
		t.Fatalf("max concurrent handlers = %d > 2", got)
	}
}

// Bad configuration and options are refused with ErrInvalidConfig.
func TestInvalid(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	for _, cfg := range []pool.Config{
		{Name: ""}, {Name: "a.b"}, {Name: "a-b"}, {Name: "ok", MaxParallelism: -1},
		{Name: "ok", MaxParallelism: pool.MaxParallelismLimit + 1},
		{Name: "ok", RateLimit: pool.RateLimit{N: 0, Per: time.Second}},
		{Name: "ok", RateLimit: pool.RateLimit{N: 5}},
	} {
		if _, err := pool.New(ctx, e.P, cfg); !errors.Is(err, pool.ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
	pl, err := pool.New(ctx, e.P, pool.Config{Name: "ok"})
	if err != nil {
		t.Fatal(err)
	}
	if inf, err := pl.Info(ctx); err != nil || inf.MaxParallelism != pool.DefaultMaxParallelism {
		t.Fatalf("default info %+v %v", inf, err)
	}
	if err := pl.SetMaxParallelism(ctx, -1); !errors.Is(err, pool.ErrInvalidConfig) {
		t.Errorf("SetMaxParallelism(-1) = %v", err)
	}
	if _, err := pl.Enqueue(ctx, Work.With(WorkArgs{}), pool.WithPriority(99)); !errors.Is(err, pool.ErrInvalidConfig) {
		t.Errorf("priority 99: %v", err)
	}
	if _, err := pl.Enqueue(ctx, Work.With(WorkArgs{}), pool.WithID("a.b")); !errors.Is(err, jetflow.ErrInvalidRunID) {
		t.Errorf("bad id: %v", err)
	}
	if _, err := pl.EnqueueBatch(ctx, make([]pool.Entry, pool.MaxBatch+1)); !errors.Is(err, pool.ErrTooManyItems) {
		t.Errorf("too many: %v", err)
	}
	if _, err := pl.Status(ctx, "missing"); !errors.Is(err, jetflow.ErrNotFound) {
		t.Errorf("status of missing: %v", err)
	}
	// A second New keeps the stored max parallelism when its Config has none.
	if err := pl.SetMaxParallelism(ctx, 3); err != nil {
		t.Fatal(err)
	}
	again, err := pool.New(ctx, e.P, pool.Config{Name: "ok"})
	if err != nil {
		t.Fatal(err)
	}
	if inf, _ := again.Info(ctx); inf.MaxParallelism != 3 {
		t.Fatalf("max parallelism after a second New = %d, want 3", inf.MaxParallelism)
	}
}
