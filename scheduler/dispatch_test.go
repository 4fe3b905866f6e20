package scheduler_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
)

type tick struct{ N int }

var ticked = jetflow.Define[tick]("sched.tick")

// counter counts handler invocations per run id.
type counter struct {
	mu sync.Mutex
	m  map[string]int
	n  atomic.Int64
}

func (c *counter) add(id string) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[id]++
	c.mu.Unlock()
	c.n.Add(1)
}

func (c *counter) dupes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var d []string
	for id, n := range c.m {
		if n > 1 {
			d = append(d, id)
		}
	}
	return d
}

func startWorker(t *testing.T, ts *testserver.Env, c *counter) {
	t.Helper()
	_, js := ts.Connect()
	w, err := worker.New(context.Background(), js, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	worker.Handle(w, ticked, func(ctx context.Context, j *worker.Job[tick]) error { c.add(j.ID()); return nil },
		worker.Options{Concurrency: 50})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
}

func newScheduler(t *testing.T, ts *testserver.Env, id string) *scheduler.Scheduler {
	t.Helper()
	_, js := ts.Connect()
	s, err := scheduler.New(context.Background(), js, scheduler.Config{ID: id, LeaseTTL: time.Second,
		RepairInterval: 300 * time.Millisecond, RepairGrace: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}

func TestTwoSchedulersOneLeaderNoDoubleRuns(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	var c counter
	startWorker(t, ts, &c)
	a := newScheduler(t, ts, "a")
	b := newScheduler(t, ts, "b")
	testserver.Eventually(t, 10*time.Second, "one leader", func() bool { return a.IsLeader() != b.IsLeader() })
	p, err := producer.New(context.Background(), ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const n = 300
	for i := 0; i < n; i++ {
		if _, err := p.RunAfter(ctx, time.Duration(i%30)*50*time.Millisecond, ticked.With(tick{N: i})); err != nil {
			t.Fatal(err)
		}
	}
	// Stop the leader half-way; the standby takes over.
	leader, standby := a, b
	if b.IsLeader() {
		leader, standby = b, a
	}
	testserver.Eventually(t, 20*time.Second, "half the runs", func() bool { return c.n.Load() >= n/2 })
	if err := leader.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := p.RunAfter(ctx, time.Duration(i%10)*50*time.Millisecond, ticked.With(tick{N: n + i})); err != nil {
			t.Fatal(err)
		}
	}
	testserver.Eventually(t, 30*time.Second, "all runs", func() bool { return c.n.Load() >= 2*n })
	if !standby.IsLeader() {
		t.Fatal("standby did not take over")
	}
	if d := c.dupes(); len(d) > 0 {
		t.Fatalf("%d runs handled twice: %v", len(d), d[:min(5, len(d))])
	}
	if got := c.n.Load(); got != 2*n {
		t.Fatalf("handled %d, want %d", got, 2*n)
	}
}

func TestRepairPublishesRecordWithoutMessage(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	var c counter
	p, err := producer.New(context.Background(), ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// What a producer that crashed between writing the record and publishing
	// the message leaves behind.
	ctx := context.Background()
	past := time.Now().Add(-time.Minute).UTC()
	orphan := &jetflow.Run{ID: "orphan-1", Name: ticked.Name(), Kind: jetflow.Retryable, Args: []byte(`{"N":1}`),
		State: jetflow.Pending, ScheduledTime: past, CreationTime: past}
	if _, err := engine.Of(p).Store().Create(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	// And one whose due time is later (its delayed entry was never written).
	soon := time.Now().Add(200 * time.Millisecond).UTC()
	orphan2 := &jetflow.Run{ID: "orphan-2", Name: ticked.Name(), Kind: jetflow.Retryable, Args: []byte(`{"N":2}`),
		State: jetflow.Pending, ScheduledTime: soon, CreationTime: past}
	if _, err := engine.Of(p).Store().Create(ctx, orphan2); err != nil {
		t.Fatal(err)
	}
	startWorker(t, ts, &c)
	s := newScheduler(t, ts, "repairer")
	for _, id := range []string{"orphan-1", "orphan-2"} {
		r, err := p.Wait(ctxWithin(t, 20*time.Second), id)
		if err != nil || r.State != jetflow.Success {
			t.Fatalf("%s: %+v %v", id, r, err)
		}
	}
	// The sweep counts a repair once its publish returned: a run may end
	// before that.
	testserver.Eventually(t, 10*time.Second, "both repairs counted", func() bool { return s.Stats().Repaired >= 2 })
	if c.n.Load() != 2 {
		t.Fatalf("handled %d, want 2", c.n.Load())
	}
}

func TestOverdueRunsFireAfterDowntime(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	var c counter
	startWorker(t, ts, &c)
	p, err := producer.New(context.Background(), ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var ids []string
	for i := 0; i < 50; i++ {
		// Some due within the horizon, some far beyond it.
		d := 100 * time.Millisecond
		if i%2 == 0 {
			d = 12 * time.Second
		}
		id, err := p.RunAt(ctx, time.Now().Add(d), ticked.With(tick{N: i}))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// No scheduler ran while they came due; one starts late.
	testserver.Eventually(t, 5*time.Second, "short runs overdue", func() bool {
		r, _ := p.Get(ctx, ids[1])
		return time.Now().After(r.ScheduledTime.Add(300 * time.Millisecond))
	})
	newScheduler(t, ts, "late")
	for _, id := range ids {
		r, err := p.Wait(ctxWithin(t, 30*time.Second), id)
		if err != nil || r.State != jetflow.Success {
			t.Fatalf("%s: %+v %v", id, r, err)
		}
		if r.StartedTime.Before(r.ScheduledTime) {
			t.Fatalf("%s started before its time", id)
		}
	}
	if c.n.Load() != 50 {
		t.Fatalf("handled %d", c.n.Load())
	}
}

func TestTerminalRecordsExpirePendingDoNot(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	cfg := streams.Config{Retention: time.Second}
	p, err := producer.New(context.Background(), ts.JS, producer.Config{Streams: cfg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	waiting, err := p.RunAfter(ctx, 24*time.Hour, ticked.With(tick{}))
	if err != nil {
		t.Fatal(err)
	}
	done, err := p.RunAfter(ctx, 24*time.Hour, ticked.With(tick{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Cancel(ctx, done); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 15*time.Second, "terminal record removed by its TTL", func() bool {
		_, err := p.Get(ctx, done)
		return err != nil
	})
	if r, err := p.Get(ctx, waiting); err != nil || r.State != jetflow.Pending {
		t.Fatalf("pending run: %+v %v", r, err)
	}
}

func ctxWithin(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestIDReusableAfterItsRecordExpired(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	p, err := producer.New(context.Background(), ts.JS, producer.Config{Streams: streams.Config{Retention: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := p.RunAfter(ctx, time.Hour, ticked.With(tick{}), producer.WithID("reused")); err != nil {
		t.Fatal(err)
	}
	if err := p.Cancel(ctx, "reused"); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 15*time.Second, "record expired", func() bool {
		_, err := p.Get(ctx, "reused")
		return err != nil
	})
	// The expiry marker remains for a while; the id is free all the same.
	if _, err := p.RunAfter(ctx, time.Hour, ticked.With(tick{N: 2}), producer.WithID("reused")); err != nil {
		t.Fatalf("reuse after expiry: %v", err)
	}
	if r, err := p.Get(ctx, "reused"); err != nil || r.State != jetflow.Pending || string(r.Args) != `{"N":2}` {
		t.Fatalf("reused record: %+v %v", r, err)
	}
}

// The repair sweep republishes a claimed run whose worker stopped
// heartbeating and whose message is gone, but leaves alone a record in
// progress that no worker claimed (a workflow's: its segments are runs of
// their own), which no worker would consume.
func TestRepairSkipsInProgressRecordsWithoutOwner(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	ctx := context.Background()
	p, err := producer.New(ctx, ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New(ctx, ts.JS, scheduler.Config{StaleAfter: time.Millisecond, RepairGrace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour).UTC()
	for _, r := range []*jetflow.Run{
		{ID: "lost-claim", Owner: "gone-worker"},
		{ID: "workflow-like"},
	} {
		r.Name, r.Kind, r.Args, r.State = ticked.Name(), jetflow.Retryable, []byte(`{"N":1}`), jetflow.InProgress
		r.ScheduledTime, r.CreationTime, r.StartedTime, r.Heartbeat, r.Attempts = old, old, old, old, 1
		if _, err := engine.Of(p).Runs().Write(ctx, engine.Open, engine.None, r, 0); err != nil {
			t.Fatal(err)
		}
	}
	// The sweep counts a worker lost once it has seen its run's record
	// unchanged for StaleAfter on its own clock: the first sweep sees it,
	// a later one settles it.
	store := engine.Of(p).Store()
	testserver.Eventually(t, time.Minute, "the lost worker's run republished", func() bool {
		if _, err := s.Repair(ctx); err != nil {
			t.Fatal(err)
		}
		q, err := store.Queued(ctx, ticked.Name(), "lost-claim")
		return err == nil && q
	})
	if q, err := store.Queued(ctx, ticked.Name(), "workflow-like"); err != nil || q {
		t.Fatalf("owner-less record: queued %v %v, want left alone", q, err)
	}
}

// A delayed entry without a record (engine.DelayNew) is published when due
// as a new run and runs once; when its message is already waiting (a
// publish whose ack was lost, a second leader), the scheduler's second
// publish is refused by the stream, and the entry goes.
func TestDelayedEntryWithoutRecordRunsOnce(t *testing.T) {
	t.Parallel()
	ts := testserver.Start(t)
	p, err := producer.New(context.Background(), ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	eng := engine.Of(p)
	due := time.Now().Add(300 * time.Millisecond).UTC()
	run := func(id string) *jetflow.Run {
		return &jetflow.Run{ID: id, Name: ticked.Name(), Kind: jetflow.Retryable, Args: []byte(`{"N":1}`),
			State: jetflow.Pending, ScheduledTime: due, CreationTime: time.Now().UTC()}
	}
	if err := eng.DelayNew(ctx, run("new-once")); err != nil {
		t.Fatal(err)
	}
	// The second one's message is in the stream already.
	twice := run("new-twice")
	if err := eng.DelayNew(ctx, twice); err != nil {
		t.Fatal(err)
	}
	e := engine.Envelope(twice)
	e.New = true
	if _, err := ts.JS.PublishMsg(ctx, eng.Streams().Message(e)); err != nil {
		t.Fatal(err)
	}
	newScheduler(t, ts, "a")
	delayedGone := func(id string) bool {
		_, ok, err := eng.Store().FindDelayed(ctx, due, id)
		return err == nil && !ok
	}
	testserver.Eventually(t, 20*time.Second, "both delayed entries published or dropped", func() bool {
		return delayedGone("new-once") && delayedGone("new-twice")
	})
	if n := fnMessages(t, ts); n != 2 {
		t.Fatalf("%d messages in the function stream, want 2 (one per run)", n)
	}
	var c counter
	startWorker(t, ts, &c)
	// The handler counts before its outcome is written: wait for both.
	testserver.Eventually(t, 20*time.Second, "both runs recorded success", func() bool {
		for _, id := range []string{"new-once", "new-twice"} {
			if r, err := p.Get(ctx, id); err != nil || r.State != jetflow.Success {
				return false
			}
		}
		return true
	})
	if n := c.n.Load(); n != 2 {
		t.Fatalf("%d handler calls, want 2", n)
	}
	if d := c.dupes(); len(d) > 0 {
		t.Fatalf("runs handled twice: %v", d)
	}
}
