package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/jetflow-dev/jetflow/workflow"
	"github.com/nats-io/nats.go/jetstream"
)

// A failed workflow restarts from its failed step: the steps before it
// keep their results and do not run again.
func TestRestartFromFailedStep(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var mu sync.Mutex
	broken := true
	def := workflow.Define("test.restartable", func(wf *workflow.Context, in string) (string, error) {
		a, err := workflow.Step(wf, "a", func(ctx context.Context) (string, error) { e.inc("a"); return in + "-a", nil })
		if err != nil {
			return "", err
		}
		return workflow.Step(wf, "b", func(ctx context.Context) (string, error) {
			e.inc("b")
			mu.Lock()
			defer mu.Unlock()
			if broken {
				return "", errors.New("b is broken")
			}
			return a + "-b", nil
		})
	})
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, def, "x")
	must(t, err)
	if r := e.wait(t, id); r.State != jetflow.Failed {
		t.Fatalf("first run %s", r.State)
	}
	if _, err := workflow.Restart(ctx, e.P, "nope"); !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("restart of an unknown id: %v", err)
	}
	mu.Lock()
	broken = false
	mu.Unlock()
	again, err := workflow.Restart(ctx, e.P, id, workflow.WithID(id+"-again"))
	must(t, err)
	out, err := workflow.Result(ctx, e.P, def, again)
	must(t, err)
	if out != "x-a-b" || e.n("a") != 1 || e.n("b") != 2 {
		t.Fatalf("result %q; a ran %d times (want 1), b %d (want 2)", out, e.n("a"), e.n("b"))
	}
	if _, err := workflow.Restart(ctx, e.P, again); !errors.Is(err, workflow.ErrNotRestartable) {
		t.Fatalf("restart of a success: %v", err)
	}
	if _, err := workflow.Restart(ctx, e.P, id, workflow.WithID(again)); !errors.Is(err, producer.ErrAlreadyExists) {
		t.Fatalf("restart into a taken id: %v", err)
	}
}

// Concurrent Restarts into one new id, each from another failed workflow:
// exactly one wins, the others get producer.ErrAlreadyExists, and the
// new workflow's journal is exactly the winner's copy (no step of a loser's
// source, none purged by a loser), so it resumes without running its
// copied steps again.
func TestConcurrentRestartsToOneIDOneWins(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var mu sync.Mutex
	broken := true
	def := workflow.Define("test.restart.race", func(wf *workflow.Context, in string) (string, error) {
		out := in
		for _, s := range []string{"a", "b", "c"} {
			var err error
			if out, err = workflow.Step(wf, s, func(ctx context.Context) (string, error) {
				e.inc(s + "-" + in)
				return out + "-" + s, nil
			}); err != nil {
				return "", err
			}
		}
		return workflow.Step(wf, "d", func(ctx context.Context) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			if broken {
				return "", errors.New("d is broken")
			}
			return out + "-d", nil
		})
	})
	w := e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	ctx := testCtx(t)
	const n, rounds = 8, 5
	srcs := make([]*workflow.Status, n)
	for i := range n {
		id, err := workflow.Start(ctx, e.P, def, fmt.Sprintf("s%d", i), workflow.WithID(fmt.Sprintf("src-%d", i)))
		must(t, err)
		if r := e.wait(t, id); r.State != jetflow.Failed {
			t.Fatalf("source %s: %s", id, r.State)
		}
		srcs[i] = e.status(t, id)
		if len(srcs[i].Steps) != 4 {
			t.Fatalf("source %s: steps %+v", id, srcs[i].Steps)
		}
	}
	// No worker while the restarts race: the new workflows' journals stay
	// as Restart wrote them.
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	must(t, w.Stop(sctx))
	cancel()
	winners := map[string]int{}
	for round := range rounds {
		fork := fmt.Sprintf("fork-%d", round)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				var nid string
				nid, errs[i] = workflow.Restart(ctx, e.P, fmt.Sprintf("src-%d", i), workflow.WithID(fork))
				if errs[i] == nil && nid != fork {
					t.Errorf("restart %d into %s returned id %s", i, fork, nid)
				}
			})
		}
		wg.Wait()
		won := -1
		for i, err := range errs {
			switch {
			case err == nil && won >= 0:
				t.Fatalf("round %d: restarts %d and %d both won", round, won, i)
			case err == nil:
				won = i
			case !errors.Is(err, producer.ErrAlreadyExists):
				t.Fatalf("round %d: restart %d: %v, want producer.ErrAlreadyExists", round, i, err)
			}
		}
		if won < 0 {
			t.Fatalf("round %d: no restart won: %v", round, errs)
		}
		winners[fork] = won
		st := e.status(t, fork)
		if want := fmt.Sprintf("%q", fmt.Sprintf("s%d", won)); string(st.Run.Args) != want {
			t.Errorf("round %d: record's input %s, want the winner's %s", round, st.Run.Args, want)
		}
		if len(st.Steps) != 3 {
			t.Fatalf("round %d: steps %+v, want the winner's three", round, st.Steps)
		}
		for k, s := range st.Steps {
			src := srcs[won].Steps[k]
			if s.Step != src.Step || s.Name != src.Name || s.State != workflow.StepDone || string(s.Result) != string(src.Result) {
				t.Errorf("round %d: step %+v, want the winner's (src-%d) %+v", round, s, won, src)
			}
		}
		for _, k := range e.journalKeys(t, fork) {
			if !strings.HasPrefix(k, fork+".s.") && k != fork+".wf" {
				t.Errorf("round %d: journal key %s besides the copied steps", round, k)
			}
		}
	}
	mu.Lock()
	broken = false
	mu.Unlock()
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	for fork, won := range winners {
		out, err := workflow.Result(ctx, e.P, def, fork)
		must(t, err)
		if want := fmt.Sprintf("s%d-a-b-c-d", won); out != want {
			t.Errorf("%s: result %q, want %q", fork, out, want)
		}
	}
	for i := range n {
		for _, s := range []string{"a", "b", "c"} {
			if c := e.n(fmt.Sprintf("%s-s%d", s, i)); c != 1 {
				t.Errorf("step %s of s%d ran %d times, want once (its copy is journaled)", s, i, c)
			}
		}
	}
}

// A Restart that died right after its commit point (the new record,
// created held by the Restart, and one of the two steps to copy written;
// no release, no first segment) has restarted the workflow: a Restart
// into that id gets producer.ErrAlreadyExists at once, and the repair
// sweep's first segment makes the rest of the copy, releases
// the record and runs from the copied steps (a and b run once, in the
// source only). A Restart that dies before its record writes nothing: a
// refused one leaves the id free, and the next Restart into it wins at
// once.
func TestRestartThatDiedAfterItsRecordFinishes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var mu sync.Mutex
	broken := true
	def := failingRestartDef(e, "test.restart.died", &mu, &broken)
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	ctx := testCtx(t)
	src, err := workflow.Start(ctx, e.P, def, "x", workflow.WithID("died-src"))
	must(t, err)
	if r := e.wait(t, src); r.State != jetflow.Failed {
		t.Fatalf("source: %s", r.State)
	}
	srcSt := e.status(t, src)
	if len(srcSt.Steps) != 3 {
		t.Fatalf("source steps %+v", srcSt.Steps)
	}

	// Refused before its record (the source is not restartable): nothing
	// written, the id free.
	const fork = "died-fork"
	if _, err := workflow.Restart(ctx, e.P, "no-such-src", workflow.WithID(fork)); !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("restart of an unknown id: %v", err)
	}
	if keys := e.journalKeys(t, fork); len(keys) != 0 {
		t.Fatalf("journal of %s after a refused restart: %v", fork, keys)
	}
	if _, err := e.P.Get(ctx, fork); !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("record of %s after a refused restart: %v", fork, err)
	}

	must(t, workflow.RestartRecordOnly(ctx, e.P, src, fork, 1))
	r, err := e.P.Get(ctx, fork)
	must(t, err)
	if r.State != jetflow.Pending || r.HeldBy != "restart:"+src {
		t.Fatalf("record after the dead restart: %s, held by %q; want pending, held by its restart", r.State, r.HeldBy)
	}
	if keys := e.journalKeys(t, fork); len(keys) != 1 || keys[0] != fork+".s.1" {
		t.Fatalf("journal after the dead restart: %v, want its one copied step", keys)
	}
	// Committed: the id is taken, at once and for good.
	if _, err := workflow.Restart(ctx, e.P, src, workflow.WithID(fork)); !errors.Is(err, producer.ErrAlreadyExists) {
		t.Fatalf("restart into the id of a dead restart's record: %v, want producer.ErrAlreadyExists", err)
	}
	mu.Lock()
	broken = false
	mu.Unlock()
	e.startRepairingScheduler(t)
	out, err := workflow.Result(ctx, e.P, def, fork)
	must(t, err)
	if out != "x-a-b-c" || e.n("a") != 1 || e.n("b") != 1 || e.n("c") != 2 {
		t.Fatalf("result %q; a ran %d times, b %d (want once each: copied), c %d (want 2)", out, e.n("a"), e.n("b"), e.n("c"))
	}
	st := e.status(t, fork)
	if st.Run.HeldBy != "" {
		t.Errorf("record held by %q after the workflow ran", st.Run.HeldBy)
	}
	for i, s := range st.Steps[:2] {
		want := srcSt.Steps[i]
		if s.Step != want.Step || s.State != workflow.StepDone || string(s.Result) != string(want.Result) {
			t.Errorf("step %+v, want the copy of %+v", s, want)
		}
	}
}

// A Restart that died after its record, whose source's record and journal
// are gone (expired) before its first segment runs: the segment cannot
// copy the steps, and the workflow fails saying so instead of running the
// source's succeeded steps again.
func TestRestartWhoseSourceIsGoneFails(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var mu sync.Mutex
	broken := true
	def := failingRestartDef(e, "test.restart.gone", &mu, &broken)
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	ctx := testCtx(t)
	src, err := workflow.Start(ctx, e.P, def, "x", workflow.WithID("gone-src"))
	must(t, err)
	if r := e.wait(t, src); r.State != jetflow.Failed {
		t.Fatalf("source: %s", r.State)
	}
	const fork = "gone-fork"
	must(t, workflow.RestartRecordOnly(ctx, e.P, src, fork, 0))
	// The source expires: its record and its journal go.
	cfg := streams.Config{}.WithDefaults()
	runs, err := e.JS.KeyValue(ctx, cfg.RunsBucket())
	must(t, err)
	must(t, runs.Purge(ctx, src))
	jst, err := e.JS.Stream(ctx, streams.KVStream(cfg.JournalBucket()))
	must(t, err)
	must(t, jst.Purge(ctx, jetstream.WithPurgeSubject(streams.KVSubject(cfg.JournalBucket(), src+".>"))))
	mu.Lock()
	broken = false
	mu.Unlock()
	e.startRepairingScheduler(t)
	r := e.wait(t, fork)
	if r.State != jetflow.Failed || !strings.Contains(r.Error, "restarted from "+src+", which is gone") {
		t.Fatalf("workflow whose source is gone: %s, %q; want failed, saying so", r.State, r.Error)
	}
	if e.n("a") != 1 || e.n("b") != 1 {
		t.Fatalf("a ran %d times, b %d; want once each (in the source only)", e.n("a"), e.n("b"))
	}
}

// failingRestartDef is a workflow of steps a, b and c whose step c fails
// while *broken; it counts the runs of each step in e.
func failingRestartDef(e *env, name string, mu *sync.Mutex, broken *bool) *workflow.Workflow[string, string] {
	return workflow.Define(name, func(wf *workflow.Context, in string) (string, error) {
		out := in
		for _, s := range []string{"a", "b", "c"} {
			var err error
			if out, err = workflow.Step(wf, s, func(ctx context.Context) (string, error) {
				e.inc(s)
				if s == "c" {
					mu.Lock()
					defer mu.Unlock()
					if *broken {
						return "", errors.New("c is broken")
					}
				}
				return out + "-" + s, nil
			}); err != nil {
				return "", err
			}
		}
		return out, nil
	})
}

// Watch pushes the status as steps are journaled, up to the end.
func TestWatchSteps(t *testing.T) {
	t.Parallel()
	e := setup(t)
	def := workflow.Define("test.watch", func(wf *workflow.Context, _ struct{}) (string, error) {
		if _, err := workflow.Step(wf, "one", func(ctx context.Context) (int, error) { return 1, nil }); err != nil {
			return "", err
		}
		return workflow.AwaitEvent[string](wf, "go", 0)
	})
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id, err := workflow.Start(ctx, e.P, def, struct{}{})
	must(t, err)
	ch, err := workflow.Watch(ctx, e.P, id)
	must(t, err)
	sent := false
	var last *workflow.Status
	for st := range ch {
		last = st
		if st.Waiting && !sent {
			sent = true
			must(t, workflow.SendEvent(ctx, e.P, id, "go", "done"))
		}
	}
	if !sent || last == nil || last.Run.State != jetflow.Success || len(last.Steps) != 2 || last.Steps[1].State != workflow.StepDone {
		t.Fatalf("last status: %+v (event sent: %t)", last, sent)
	}
}

// Watch of a plain run (not a workflow) fails with producer.ErrNotWorkflow,
// as Get does, instead of returning a channel that closes with nothing on
// it; Watch of an unknown id fails with jetflow.ErrNotFound.
func TestWatchOfAPlainRunIsNotAWorkflow(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	fn := jetflow.Define[struct{}]("test.watch.plain")
	for _, c := range []struct {
		name string
		id   func() string
	}{
		{"pending", func() string {
			id, err := e.P.RunAfter(ctx, time.Hour, fn.With(struct{}{}), producer.WithID("plain-pending"))
			must(t, err)
			return id
		}},
		{"ended", func() string {
			id, err := e.P.Enqueue(ctx, fn.With(struct{}{}), producer.WithID("plain-ended"))
			must(t, err)
			must(t, e.P.Cancel(ctx, id))
			return id
		}},
	} {
		id := c.id()
		ch, err := workflow.Watch(ctx, e.P, id)
		if !errors.Is(err, producer.ErrNotWorkflow) || ch != nil {
			t.Errorf("Watch of a %s plain run: %v (channel %v), want producer.ErrNotWorkflow", c.name, err, ch)
		}
	}
	if ch, err := workflow.Watch(ctx, e.P, "no-such-workflow"); !errors.Is(err, jetflow.ErrNotFound) || ch != nil {
		t.Errorf("Watch of an unknown id: %v (channel %v), want jetflow.ErrNotFound", err, ch)
	}
}

// Cancel during a child call: the workflow, the running child and the
// segment are canceled; the child's handler sees jetflow.ErrCanceled.
func TestCancelDuringChild(t *testing.T) {
	t.Parallel()
	e := setup(t)
	slow := jetflow.Define[struct{}]("test.slow")
	running := make(chan struct{}, 1)
	cause := make(chan error, 1)
	def := workflow.Define("test.cancelchild", func(wf *workflow.Context, _ struct{}) (string, error) {
		return workflow.Call[string](wf, slow.With(struct{}{}))
	})
	e.startWorker(t, func(w *worker.Worker) {
		must(t, workflow.Register(w, def))
		worker.Handle(w, slow, func(ctx context.Context, j *worker.Job[struct{}]) error {
			running <- struct{}{}
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return context.Cause(ctx)
		})
	})
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, def, struct{}{})
	must(t, err)
	recv(t, running, "the child running")
	must(t, e.P.Cancel(ctx, id))
	if err := recv(t, cause, "the child canceled"); !errors.Is(err, jetflow.ErrCanceled) {
		t.Fatalf("child's cause: %v", err)
	}
	if r := e.wait(t, id); r.State != jetflow.Canceled {
		t.Fatalf("workflow %s", r.State)
	}
	st := e.status(t, id)
	child, err := e.P.Get(ctx, st.Steps[0].Waits.Run)
	must(t, err)
	if child.State != jetflow.Canceled {
		t.Fatalf("child %s", child.State)
	}
}

// The NATS server restarts while a workflow waits: nothing is lost.
func TestServerRestartMidWorkflow(t *testing.T) {
	t.Parallel()
	e := setup(t)
	def := workflow.Define("test.srvrestart", func(wf *workflow.Context, _ struct{}) (string, error) {
		a, err := workflow.Step(wf, "a", func(ctx context.Context) (string, error) { e.inc("a"); return "a", nil })
		if err != nil {
			return "", err
		}
		v, err := workflow.AwaitEvent[string](wf, "go", 0)
		return a + v, err
	})
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, def, struct{}{})
	must(t, err)
	e.waiting(t, id)
	e.Restart()
	testserver.Eventually(t, 20*time.Second, "event sent after the restart", func() bool {
		return workflow.SendEvent(ctx, e.P, id, "go", "b") == nil
	})
	out, err := workflow.Result(ctx, e.P, def, id)
	must(t, err)
	if out != "ab" || e.n("a") != 1 {
		t.Fatalf("result %q, a ran %d times", out, e.n("a"))
	}
}

// Events sent as fast as possible while the workflow runs and parks: each
// is consumed once, none is lost (no lost wake-up).
func TestEventsRaceWithSegments(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const n = 25
	def := workflow.Define("test.burst", func(wf *workflow.Context, _ struct{}) (int, error) {
		sum := 0
		for range n {
			v, err := workflow.AwaitEvent[int](wf, "tick", 0)
			if err != nil {
				return 0, err
			}
			sum += v
		}
		return sum, nil
	})
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, def, struct{}{})
	must(t, err)
	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		wg.Go(func() {
			if err := workflow.SendEvent(ctx, e.P, id, "tick", i); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	out, err := workflow.Result(ctx, e.P, def, id)
	must(t, err)
	if out != n*(n+1)/2 {
		t.Fatalf("sum %d, want %d", out, n*(n+1)/2)
	}
}

// retentionSetup starts a server, a worker serving def and a scheduler,
// all with a retention of one second, and returns a producer and the
// journal bucket.
func retentionSetup[In, Out any](t *testing.T, def *workflow.Workflow[In, Out]) (*producer.Producer, jetstream.KeyValue) {
	t.Helper()
	ts := testserver.Start(t)
	sc := streams.Config{Retention: time.Second}
	ctx := testCtx(t)
	p, err := producer.New(ctx, ts.JS, producer.Config{Streams: sc})
	must(t, err)
	_, js := ts.Connect()
	w, err := worker.New(ctx, js, worker.Config{Streams: sc})
	must(t, err)
	must(t, workflow.Register(w, def))
	must(t, w.Start(ctx))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	s, err := scheduler.New(ctx, js, scheduler.Config{Streams: sc, LeaseTTL: time.Second})
	must(t, err)
	must(t, s.Start(ctx))
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	kvb, err := ts.JS.KeyValue(ctx, sc.WithDefaults().JournalBucket())
	must(t, err)
	return p, kvb
}

// A finished workflow's journal is removed when its record expires.
func TestJournalExpiresWithRecord(t *testing.T) {
	t.Parallel()
	def := workflow.Define("test.expire", func(wf *workflow.Context, _ struct{}) (int, error) {
		return workflow.Step(wf, "one", func(ctx context.Context) (int, error) { return 1, nil })
	})
	p, kvb := retentionSetup(t, def)
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, p, def, struct{}{})
	must(t, err)
	if _, err := workflow.Result(ctx, p, def, id); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 20*time.Second, "journal of "+id+" removed", func() bool {
		_, err := kvb.Get(ctx, id+".s.1")
		return err != nil && strings.Contains(err.Error(), "not found")
	})
}

var _ = fmt.Sprint

// Canceling a parent workflow cancels the child workflow it waits for,
// and the child's own timer.
func TestCancelParentCancelsChildWorkflow(t *testing.T) {
	t.Parallel()
	e := setup(t)
	child := workflow.Define("test.sleepychild", func(wf *workflow.Context, _ struct{}) (int, error) {
		wf.Sleep(time.Hour)
		return 1, nil
	})
	parent := workflow.Define("test.waitingparent", func(wf *workflow.Context, _ struct{}) (int, error) {
		return workflow.RunChild(wf, child, struct{}{})
	})
	e.startWorker(t, func(w *worker.Worker) {
		must(t, workflow.Register(w, child))
		must(t, workflow.Register(w, parent))
	})
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, e.P, parent, struct{}{})
	must(t, err)
	st := e.waiting(t, id)
	kid := st.Steps[0].Waits.Run
	e.waiting(t, kid)
	must(t, e.P.Cancel(ctx, id))
	for _, rid := range []string{id, kid} {
		if r := e.wait(t, rid); r.State != jetflow.Canceled {
			t.Fatalf("%s is %s, want canceled", rid, r.State)
		}
	}
	kr, err := e.P.Get(ctx, kid)
	must(t, err)
	for _, c := range kr.Children {
		r, err := e.P.Get(ctx, c)
		must(t, err)
		if !r.State.Terminal() {
			t.Errorf("child's run %s is %s after the cancel", c, r.State)
		}
	}
}

// A workflow on a schedule: a cron whose call is StartCall starts one
// workflow per fire, whose record names the cron run as its parent.
func TestWorkflowOnSchedule(t *testing.T) {
	t.Parallel()
	e := setup(t)
	def := workflow.Define("test.scheduled", func(wf *workflow.Context, n int) (int, error) {
		return workflow.Step(wf, "double", func(ctx context.Context) (int, error) { return 2 * n, nil })
	})
	e.startWorker(t, func(w *worker.Worker) { must(t, workflow.Register(w, def)) })
	ctx := testCtx(t)
	_, js := e.Connect()
	s, err := scheduler.New(ctx, js, scheduler.Config{LeaseTTL: time.Second})
	must(t, err)
	_, err = s.ConfigureCrons(scheduler.CronConfig{Crons: []scheduler.CronDef{
		{Name: "wf-every-second", Schedule: scheduler.Interval(time.Second), Call: workflow.StartCall(def, 21)},
	}})
	must(t, err)
	must(t, s.Start(ctx))
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	var runs []*jetflow.Run
	testserver.Eventually(t, 20*time.Second, "a scheduled workflow done", func() bool {
		page, err := e.P.List(ctx, producer.Filter{Function: "test.scheduled", State: jetflow.Success})
		runs = page.Runs
		return err == nil && len(runs) > 0
	})
	r := runs[0]
	if !strings.HasPrefix(r.Parent, "cron-wf-every-second-") || r.ID != workflow.TriggeredID(r.Parent) || string(r.Result) != "42" {
		t.Fatalf("scheduled workflow %s: parent %q, result %s", r.ID, r.Parent, r.Result)
	}
}

// A workflow canceled while it sleeps ends with no segment to schedule the
// removal of its journal: the janitor it armed when it first parked removes
// it once the record has expired.
func TestJournalOfWorkflowCanceledAsleepExpires(t *testing.T) {
	t.Parallel()
	def := workflow.Define("test.expire.canceled", func(wf *workflow.Context, _ struct{}) (int, error) {
		if _, err := workflow.Step(wf, "one", func(ctx context.Context) (int, error) { return 1, nil }); err != nil {
			return 0, err
		}
		wf.Sleep(time.Hour)
		return 2, nil
	})
	p, kvb := retentionSetup(t, def)
	ctx := testCtx(t)
	id, err := workflow.Start(ctx, p, def, struct{}{})
	must(t, err)
	testserver.Eventually(t, 20*time.Second, "workflow "+id+" asleep", func() bool {
		st, err := workflow.Get(ctx, p, id)
		return err == nil && st.Waiting
	})
	must(t, p.Cancel(ctx, id))
	testserver.Eventually(t, 20*time.Second, "journal of canceled "+id+" removed", func() bool {
		_, err1 := kvb.Get(ctx, id+".s.1")
		_, err2 := kvb.Get(ctx, id+".wf")
		return errors.Is(err1, jetstream.ErrKeyNotFound) && errors.Is(err2, jetstream.ErrKeyNotFound)
	})
}
