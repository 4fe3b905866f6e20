package pool_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/pool"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
)

// WorkArgs drive the test handler.
type WorkArgs struct {
	Key string `json:"key"`
	// Fail makes the first Fail attempts fail (retryable).
	Fail int `json:"fail,omitempty"`
	// Panic makes every attempt panic: a permanent failure.
	Panic bool `json:"panic,omitempty"`
	// Block holds the handler until its context ends or the test releases it.
	Block bool `json:"block,omitempty"`
	// Group is the item's key in the keyed tests (Config.Key reads it); N
	// numbers the items of a group.
	Group string `json:"group,omitempty"`
	N     int    `json:"n,omitempty"`
	// Hold holds the handlers of the group until Hold of them run at once
	// (once reached, never again), or 10 s passed.
	Hold int64 `json:"hold,omitempty"`
}

var (
	Work     = jetflow.Define[WorkArgs]("test.pool.work")
	Complete = jetflow.Define[jetflow.Completion]("test.pool.complete")
)

type start struct {
	key   string
	group string
	n     int
	at    time.Time
}

// groupStat measures the concurrency of one group (key).
type groupStat struct {
	cur, max atomic.Int64
	hold     chan struct{}
	holdOnce sync.Once
}

// tracker is the test handler: it measures concurrency and records starts
// and completions.
type tracker struct {
	cur, max atomic.Int64
	// gate, when set, holds the first handlers until gateAt run at once.
	gateAt  int64
	gate    chan struct{}
	gateOne sync.Once
	onStart func(key string)

	mu       sync.Mutex
	groups   map[string]*groupStat
	starts   []start
	attempts map[string]int
	release  map[string]*gate
	causes   map[string]error
	done     map[string][]jetflow.Completion
}

func newTracker() *tracker {
	return &tracker{attempts: map[string]int{}, release: map[string]*gate{}, groups: map[string]*groupStat{},
		causes: map[string]error{}, done: map[string][]jetflow.Completion{}, gate: make(chan struct{})}
}

func (tr *tracker) handle(ctx context.Context, j *worker.Job[WorkArgs]) error {
	c := tr.cur.Add(1)
	defer tr.cur.Add(-1)
	for {
		m := tr.max.Load()
		if c <= m || tr.max.CompareAndSwap(m, c) {
			break
		}
	}
	g := tr.group(j.Args.Group)
	gc := g.cur.Add(1)
	defer g.cur.Add(-1)
	for {
		m := g.max.Load()
		if gc <= m || g.max.CompareAndSwap(m, gc) {
			break
		}
	}
	tr.mu.Lock()
	tr.starts = append(tr.starts, start{key: j.Args.Key, group: j.Args.Group, n: j.Args.N, at: time.Now()})
	tr.attempts[j.Args.Key]++
	n := tr.attempts[j.Args.Key]
	tr.mu.Unlock()
	rel := tr.gateOf(j.Args.Key).ch
	if tr.onStart != nil {
		tr.onStart(j.Args.Key)
	}
	// The gate and the hold wait for the other handlers to start, however
	// long a loaded machine takes to start them: a wait that gave up
	// after 10 s could let the first handlers end before the last one
	// started, and the test then found fewer at once than the limit
	// allows. The minute only bounds a test whose dispatcher never starts
	// that many (it then fails on the concurrency it counted, or in
	// waitFinished).
	if tr.gateAt > 0 {
		if c >= tr.gateAt {
			tr.gateOne.Do(func() { close(tr.gate) })
		}
		select {
		case <-tr.gate:
		case <-time.After(time.Minute):
		}
	}
	if j.Args.Hold > 0 {
		if gc >= j.Args.Hold {
			g.holdOnce.Do(func() { close(g.hold) })
		}
		select {
		case <-g.hold:
		case <-ctx.Done():
		case <-time.After(time.Minute):
		}
	}
	if j.Args.Block {
		select {
		case <-rel:
		case <-ctx.Done():
			tr.mu.Lock()
			tr.causes[j.Args.Key] = context.Cause(ctx)
			tr.mu.Unlock()
			return context.Cause(ctx)
		}
	}
	time.Sleep(time.Millisecond) // a little work, so that runs overlap
	if j.Args.Panic {
		panic("refused for good")
	}
	if n <= j.Args.Fail {
		return errors.New("flaky failure")
	}
	return j.SetResult(j.Args.Key)
}

func (tr *tracker) complete(_ context.Context, j *worker.Job[jetflow.Completion]) error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.done[j.Args.Run.ID] = append(tr.done[j.Args.Run.ID], j.Args)
	return nil
}

func (tr *tracker) group(name string) *groupStat {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	g := tr.groups[name]
	if g == nil {
		g = &groupStat{hold: make(chan struct{})}
		tr.groups[name] = g
	}
	return g
}

type gate struct {
	ch   chan struct{}
	once sync.Once
}

func (tr *tracker) gateOf(key string) *gate {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	g := tr.release[key]
	if g == nil {
		g = &gate{ch: make(chan struct{})}
		tr.release[key] = g
	}
	return g
}

// unblock lets the blocked handler of key return.
func (tr *tracker) unblock(key string) {
	g := tr.gateOf(key)
	g.once.Do(func() { close(g.ch) })
}

func (tr *tracker) started() []start {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]start(nil), tr.starts...)
}

func (tr *tracker) startedKey(key string) bool {
	for _, s := range tr.started() {
		if s.key == key {
			return true
		}
	}
	return false
}

func (tr *tracker) completions() map[string][]jetflow.Completion {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := make(map[string][]jetflow.Completion, len(tr.done))
	for k, v := range tr.done {
		out[k] = append([]jetflow.Completion(nil), v...)
	}
	return out
}

func (tr *tracker) ncompleted() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.done)
}

type env struct {
	*testserver.Env
	P  *producer.Producer
	tr *tracker
}

func setup(t *testing.T) *env {
	t.Helper()
	ts := testserver.Start(t)
	p, err := producer.New(context.Background(), ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return &env{Env: ts, P: p, tr: newTracker()}
}

// workers starts n workers, each on its own connection, serving the test
// function, the callback and the pool's done function.
func (e *env) workers(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	for range n {
		_, js := e.Connect()
		w, err := worker.New(ctx, js, worker.Config{Concurrency: 10})
		if err != nil {
			t.Fatal(err)
		}
		worker.Handle(w, Work, e.tr.handle)
		worker.Handle(w, Complete, e.tr.complete)
		if err := pool.Register(w); err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = w.Stop(sctx)
		})
	}
}

// scheduler starts a scheduler: its repair sweep publishes runs whose
// record was written while the server was away.
func (e *env) scheduler(t *testing.T) {
	t.Helper()
	_, js := e.Connect()
	s, err := scheduler.New(context.Background(), js, scheduler.Config{
		LeaseTTL: time.Second, RepairInterval: 300 * time.Millisecond, RepairGrace: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
}

// testConfig shortens the pool's periods for tests.
func testConfig(name string) pool.Config {
	return pool.Config{
		Name: name, LeaseTTL: time.Second, PollInterval: 50 * time.Millisecond,
		ReconcileInterval: 200 * time.Millisecond, ReconcileGrace: time.Second,
		Retry: pool.Retry{Backoff: jetflow.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}},
	}
}

// newPool opens the pool on a connection of its own (another "process").
func (e *env) newPool(t *testing.T, cfg pool.Config) *pool.Pool {
	t.Helper()
	ctx := context.Background()
	_, js := e.Connect()
	p, err := producer.New(ctx, js, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := pool.New(ctx, p, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

// startPool starts pl's dispatcher and stops it at cleanup.
func startPool(t *testing.T, pl *pool.Pool) {
	t.Helper()
	if err := pl.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = pl.Stop(ctx)
	})
}

func onComplete(key string) pool.Option {
	return pool.WithOnComplete(jetflow.Call{Name: Complete.Name(), Args: map[string]string{"key": key}})
}

func enqueue(t *testing.T, pl *pool.Pool, key string, args WorkArgs, opts ...pool.Option) string {
	t.Helper()
	args.Key = key
	opts = append([]pool.Option{pool.WithID(key), onComplete(key)}, opts...)
	id, err := pl.Enqueue(context.Background(), Work.With(args), opts...)
	if err != nil {
		t.Fatalf("enqueue %s: %v", key, err)
	}
	return id
}

// waitFinished waits until every item of ids is finished and its callback
// ran, and returns the items.
func (e *env) waitFinished(t *testing.T, pl *pool.Pool, ids []string) map[string]*pool.Item {
	t.Helper()
	ctx := context.Background()
	out := map[string]*pool.Item{}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		done := e.tr.completions()
		missing := 0
		for _, id := range ids {
			if out[id] != nil && len(done[id]) > 0 {
				continue
			}
			it, err := pl.Status(ctx, id)
			if err != nil || !it.Finished() || len(done[id]) == 0 {
				missing++
				continue
			}
			out[id] = it
		}
		if missing == 0 {
			return out
		}
		if time.Now().After(deadline) {
			inf, err := pl.Info(ctx)
			t.Logf("pool %+v %v; dispatcher %+v", inf, err, pl.Stats())
			for _, id := range ids {
				if out[id] != nil {
					continue
				}
				it, err := pl.Status(ctx, id)
				if err != nil {
					t.Logf("item %s: %v", id, err)
					continue
				}
				r, rerr := e.P.Get(ctx, it.RunID)
				t.Logf("item %s: %s attempts %d run %s callbacks %d; run %+v %v", id, it.State, it.Attempts, it.RunID, len(done[id]), r, rerr)
			}
			t.Fatalf("timed out waiting for %d of %d items to finish with their callbacks", missing, len(ids))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitIdle waits until the pool holds no slot and no done function run is
// left unfinished, so that counts can no longer change.
func (e *env) waitIdle(t *testing.T, pl *pool.Pool) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		inf, err := pl.Info(ctx)
		var busy []*jetflow.Run
		for _, st := range []jetflow.State{jetflow.Pending, jetflow.InProgress} {
			pg, lerr := e.P.List(ctx, producer.Filter{State: st})
			if lerr != nil {
				err = lerr
			}
			busy = append(busy, pg.Runs...)
		}
		if err == nil && len(inf.Running) == 0 && len(busy) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, r := range busy {
				t.Logf("run %s %s %s attempts %d created %s", r.ID, r.Name, r.State, r.Attempts, r.CreationTime)
			}
			t.Fatalf("pool not idle: %+v %v; dispatcher %+v", inf, err, pl.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
