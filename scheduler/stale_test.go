package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// newServer starts a server and a producer on it (which provisions).
func newServer(t *testing.T) (*testserver.Env, *producer.Producer) {
	t.Helper()
	ts := testserver.Start(t)
	p, err := producer.New(context.Background(), ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return ts, p
}

// staleServer is newServer with a replica of the runs bucket that is
// behind (testserver.StaleRuns).
func staleServer(t *testing.T) (*testserver.Env, *producer.Producer) {
	t.Helper()
	ts, p := newServer(t)
	ts.StaleRuns(t)
	return ts, p
}

// A delayed entry whose record a direct get found missing is not dropped on
// that word: the scheduler asks the runs stream's leader, finds the record
// pending and starts the run on time. The repair sweep is kept out
// (StaleAfter of a day), so only the dispatcher can start these runs:
// without the leader's read about half of them would never start.
func TestDispatchAsksTheLeaderWhenAReplicaIsBehind(t *testing.T) {
	t.Parallel()
	ts, p := staleServer(t)
	ctx := context.Background()
	var c counter
	startWorker(t, ts, &c)
	s := startScheduler(t, ts, "s1", 0)
	const n = 40
	for i := range n {
		if _, err := p.RunAfter(ctx, 300*time.Millisecond, ticked.With(tick{N: i})); err != nil {
			t.Fatal(err)
		}
	}
	testserver.Eventually(t, 60*time.Second, "every delayed run handled", func() bool { return c.n.Load() >= n })
	if d := c.dupes(); len(d) > 0 {
		t.Fatalf("%d runs handled twice: %v", len(d), d)
	}
	if got := c.n.Load(); got != n {
		t.Fatalf("handled %d, want %d", got, n)
	}
	// The dispatcher counts a run once its entry is removed, which may come
	// after the handler ran.
	testserver.Eventually(t, 30*time.Second, "every run counted as dispatched", func() bool { return s.Stats().Dispatched >= n })
	// A dispatch whose entry's removal failed is made again (its second
	// publish refused or deduplicated) and counted again: the count is at
	// least n; that no run ran twice is the check above.
	if st := s.Stats(); st.Dispatched < n || st.Repaired != 0 {
		t.Fatalf("dispatched %d, repaired %d, want at least %d and 0", st.Dispatched, st.Repaired, n)
	}
}

// A cron that does not overlap asks the runs stream's leader whether its
// previous run has ended: a replica that is behind, which lacks the run's
// record, must not make it fire a second run while the first waits.
func TestCronDoesNotOverlapWhenAReplicaIsBehind(t *testing.T) {
	t.Parallel()
	t0 := cronBase()
	ts, c, _, clk := cronSetup(t, t0, scheduler.CronConfig{})
	cronRegister(t, c, scheduler.CronDef{Name: "single", Schedule: scheduler.Interval(10 * time.Second)})
	if st := cronTick(t, c); st.Fired != 1 {
		t.Fatalf("first tick: %+v, want 1 fired", st)
	}
	ts.StaleRuns(t)
	// No worker: the first run stays pending, so every later time skips.
	for i := range 20 {
		clk.Add(10 * time.Second)
		if st := cronTick(t, c); st.Fired != 0 || st.Skipped != 1 {
			t.Fatalf("tick %d: %+v, want 0 fired and 1 skipped", i, st)
		}
	}
}

// A cron whose previous run ended fires on time even where a replica that
// is behind still shows that run pending: the leader's answer decides.
// Here a mirror answers about half of the direct gets of the runs bucket
// with a pending copy of each previous run (a record under another key,
// moved onto the run's key by the mirror's subject transform).
func TestCronFiresWhenAReplicaShowsItsPreviousRunUnended(t *testing.T) {
	t.Parallel()
	t0 := cronBase()
	ts, c, p, clk := cronSetup(t, t0, scheduler.CronConfig{})
	ctx := context.Background()
	const n = 10
	for i := range n {
		cronRegister(t, c, scheduler.CronDef{Name: fmt.Sprintf("single-%d", i), Schedule: scheduler.Interval(10 * time.Second)})
	}
	if st := cronTick(t, c); st.Fired != n {
		t.Fatalf("first tick: %+v, want %d fired", st, n)
	}
	cfg := streams.Config{}.WithDefaults()
	st := engine.Of(p).Store()
	var moves []jetstream.SubjectTransformConfig
	for i := range n {
		id := scheduler.CronRunID(fmt.Sprintf("single-%d", i), t0)
		if err := p.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
		copyID := fmt.Sprintf("stale-%d", i)
		if _, err := st.Create(ctx, &jetflow.Run{ID: copyID, Name: cronFn.Name(), State: jetflow.Pending,
			ScheduledTime: t0, CreationTime: t0}); err != nil {
			t.Fatal(err)
		}
		moves = append(moves, jetstream.SubjectTransformConfig{
			Source: streams.KVSubject(cfg.RunsBucket(), copyID), Destination: streams.KVSubject(cfg.RunsBucket(), id)})
	}
	ts.StaleMirror(t, streams.KVStream(cfg.RunsBucket()), "STALE_RUNS", jetstream.StreamSource{SubjectTransforms: moves}, n)
	first := scheduler.CronRunID("single-0", t0)
	testserver.Eventually(t, 20*time.Second, "a direct get answered by the stale mirror", func() bool {
		r, err := st.Show(ctx, first)
		return err == nil && r.State == jetflow.Pending
	})
	clk.Add(10 * time.Second)
	if st := cronTick(t, c); st.Fired != n || st.Skipped != 0 {
		t.Fatalf("after the previous runs ended: %+v, want %d fired, 0 skipped", st, n)
	}
}

// Cancel of a delayed run cancels it, and the run never starts, while a
// replica that is behind answers half of the direct gets without its record:
// Cancel asks the leader before it says there is no such run. Only a cancel
// that returned before its run was due is held to that (on a loaded
// machine some may come after it), and most must.
func TestCancelWhenAReplicaIsBehind(t *testing.T) {
	t.Parallel()
	ts, p := staleServer(t)
	ctx := context.Background()
	var c counter
	startWorker(t, ts, &c)
	startScheduler(t, ts, "s1", 0)
	const n = 30
	const delay = 2 * time.Second
	ids := make([]string, n)
	due := make([]time.Time, n)
	for i := range n {
		due[i] = time.Now().Add(delay) // the run is due no earlier
		id, err := p.RunAfter(ctx, delay, ticked.With(tick{N: i}))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	var inTime []string
	for i, id := range ids {
		if err := p.Cancel(ctx, id); err != nil {
			t.Fatalf("cancel %s: %v", id, err)
		}
		if time.Now().Before(due[i]) {
			inTime = append(inTime, id)
		}
	}
	if len(inTime) < n/2 {
		t.Fatalf("only %d of %d cancels returned before their runs were due: the machine is too slow for this test", len(inTime), n)
	}
	// A run due after them: once it ran, their time has passed.
	last, err := p.RunAfter(ctx, delay, ticked.With(tick{N: n}))
	if err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 30*time.Second, "the last run handled", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.m[last] == 1
	})
	c.mu.Lock()
	for _, id := range inTime {
		if c.m[id] != 0 {
			t.Errorf("run %s, canceled before it was due, was handled %d times", id, c.m[id])
		}
	}
	c.mu.Unlock()
	st := engine.Of(p).Store()
	for _, id := range inTime {
		r, _, err := st.Decide(ctx, id)
		if err != nil || r.State != jetflow.Canceled {
			t.Fatalf("run %s: %+v, %v; want canceled", id, r, err)
		}
	}
}

var parented = jetflow.Define[tick]("sched.parent")

// The runs a retryable attempt scheduled are released when it succeeds,
// while a replica that is behind answers half of the direct gets without
// their records: the worker asks the leader before it skips a child. The
// repair sweep is kept out (an hour), so only the release can start them.
func TestChildrenOfASuccessfulAttemptRunWhenAReplicaIsBehind(t *testing.T) {
	t.Parallel()
	ts, p := staleServer(t)
	ctx := context.Background()
	var c counter
	_, wjs := ts.Connect()
	w, err := worker.New(ctx, wjs, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	worker.Handle(w, ticked, func(ctx context.Context, j *worker.Job[tick]) error { c.add(j.ID()); return nil },
		worker.Options{Concurrency: 20})
	worker.Handle(w, parented, func(ctx context.Context, j *worker.Job[tick]) error {
		if _, err := j.Enqueue(ctx, ticked.With(tick{N: j.Args.N})); err != nil {
			return err
		}
		_, err := j.RunAfter(ctx, 200*time.Millisecond, ticked.With(tick{N: -j.Args.N}))
		return err
	}, worker.Options{Concurrency: 20})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	_, sjs := ts.Connect()
	s, err := scheduler.New(ctx, sjs, scheduler.Config{ID: "s1", LeaseTTL: time.Second, RepairInterval: time.Hour, StaleAfter: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	const n = 20
	for i := 1; i <= n; i++ {
		if _, err := p.Enqueue(ctx, parented.With(tick{N: i})); err != nil {
			t.Fatal(err)
		}
	}
	testserver.Eventually(t, 30*time.Second, "every child handled", func() bool { return c.n.Load() >= 2*n })
	if d := c.dupes(); len(d) > 0 {
		t.Fatalf("%d children handled twice: %v", len(d), d)
	}
	if got := c.n.Load(); got != 2*n {
		t.Fatalf("handled %d children, want %d", got, 2*n)
	}
	if st := s.Stats(); st.Repaired != 0 {
		t.Fatalf("%d runs repaired, want 0: the release starts them", st.Repaired)
	}
}

// A scheduler that takes over repairs every pending run left without a
// message, while a replica that is behind answers half of the direct gets
// without their records: its first full sweep hands them to the run index,
// and a record a direct get found missing is not forgotten (it would then
// wait for the hourly full sweep) before the leader says so.
func TestRepairAfterATakeoverWhenAReplicaIsBehind(t *testing.T) {
	t.Parallel()
	ts, p := newServer(t)
	ctx := context.Background()
	var logs testserver.Buffer // s2's, shown if the repair does not come
	start := func(id string, every time.Duration) *scheduler.Scheduler {
		_, js := ts.Connect()
		cfg := scheduler.Config{ID: id, LeaseTTL: time.Second, RepairInterval: every,
			RepairGrace: 100 * time.Millisecond, StaleAfter: 24 * time.Hour}
		if id == "s2" {
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		s, err := scheduler.New(ctx, js, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Stop(context.Background()) })
		return s
	}
	s1 := start("s1", time.Hour)
	// s1's first sweep is over before the orphans are written: only s2
	// may repair them.
	testserver.Eventually(t, 10*time.Second, "s1 leads and swept once", func() bool { return s1.IsLeader() && s1.Stats().Sweeps > 0 })
	// What producers that crashed between the record and the message leave.
	const n = 30
	past := time.Now().Add(-time.Minute).UTC()
	st := engine.Of(p).Store()
	for i := range n {
		if _, err := st.Create(ctx, &jetflow.Run{ID: fmt.Sprintf("orphan-%d", i), Name: ticked.Name(), Kind: jetflow.Retryable,
			Args: []byte(`{"N":1}`), State: jetflow.Pending, ScheduledTime: past, CreationTime: past}); err != nil {
			t.Fatal(err)
		}
	}
	// s1's run index has read them: its checkpoint, stored when it
	// stops, lies past them, so s2's index starts after them and only its
	// full sweep hands them over.
	sameCounts(t, p, ticked.Name())
	if err := s1.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	ts.StaleRuns(t)
	s2 := start("s2", 200*time.Millisecond)
	deadline := time.Now().Add(90 * time.Second)
	for s2.Stats().Repaired < n {
		if time.Now().After(deadline) {
			pending := 0
			for i := range n {
				if r, _, err := st.Decide(ctx, fmt.Sprintf("orphan-%d", i)); err == nil && r.State == jetflow.Pending {
					pending++
				}
			}
			l := logs.String()
			if len(l) > 6000 {
				l = l[len(l)-6000:]
			}
			t.Fatalf("after 90 s: %+v, leading %v, %d of %d orphans still pending; s2's log ends:\n%s", s2.Stats(), s2.IsLeader(), pending, n, l)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := s2.Stats().Repaired; got != n {
		t.Fatalf("%d runs repaired, want %d", got, n)
	}
}
