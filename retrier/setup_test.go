package retrier_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/retrier"
	"github.com/jetflow-dev/jetflow/scheduler"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Functions of the tests: an unreliable at-most-once call and the
// on-complete callback.
var (
	Flaky = jetflow.Define[FlakyArgs]("test.flaky", jetflow.WithKind(jetflow.AtMostOnce))
	Done  = jetflow.Define[jetflow.Completion]("test.done")
)

// FlakyArgs: the call fails its first Failures attempts, or always.
type FlakyArgs struct {
	Key      string `json:"key"`
	Failures int    `json:"failures"`
	Always   bool   `json:"always,omitempty"`
}

// DoneContext is the context of the callback.
type DoneContext struct {
	Note string `json:"note"`
}

// target counts calls and callbacks; handlers of several workers share it.
type target struct {
	mu        sync.Mutex
	calls     map[string]int
	completes map[string][]jetflow.Completion
	// hook, when set, runs after a call decided its outcome, before it
	// returns.
	hook func(key string, call int, err error)
}

func newTarget() *target {
	return &target{calls: map[string]int{}, completes: map[string][]jetflow.Completion{}}
}

func (tg *target) flaky(_ context.Context, j *worker.Job[FlakyArgs]) error {
	tg.mu.Lock()
	tg.calls[j.Args.Key]++
	n := tg.calls[j.Args.Key]
	hook := tg.hook
	tg.mu.Unlock()
	var err error
	if j.Args.Always || n <= j.Args.Failures {
		err = fmt.Errorf("boom %d", n)
	} else {
		err = j.SetResult(map[string]int{"call": n})
	}
	if hook != nil {
		hook(j.Args.Key, n, err)
	}
	return err
}

func (tg *target) done(_ context.Context, j *worker.Job[jetflow.Completion]) error {
	st, err := retrier.FromCompletion(j.Args)
	if err != nil {
		return jetflow.Permanent(err)
	}
	tg.mu.Lock()
	tg.completes[st.ID] = append(tg.completes[st.ID], j.Args)
	tg.mu.Unlock()
	return nil
}

func (tg *target) nCalls(key string) int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.calls[key]
}

func (tg *target) completions(id string) []jetflow.Completion {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return append([]jetflow.Completion(nil), tg.completes[id]...)
}

type env struct {
	*testserver.Env
	P  *producer.Producer
	R  *retrier.Retrier
	tg *target
	// register, when set, registers more handlers on each process's worker.
	register func(w *worker.Worker)
}

var fastWorkerBackoff = jetflow.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}

func setup(t *testing.T, opts retrier.Options) *env {
	t.Helper()
	ts := testserver.Start(t)
	p, err := producer.New(context.Background(), ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return &env{Env: ts, P: p, R: retrier.New(p, opts), tg: newTarget()}
}

// process is one worker and one scheduler on their own connection: one
// "process" of the service.
type process struct {
	nc *nats.Conn
	W  *worker.Worker
	S  *scheduler.Scheduler
}

// startProcess starts a worker serving the target, the callback and the
// retrier's functions, and a scheduler, on a new connection.
func (e *env) startProcess(t *testing.T) *process {
	t.Helper()
	ctx := context.Background()
	nc, js := e.Connect()
	// The process's logs, shown when the test fails: they say which step
	// failed and why.
	logs := &testserver.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("process logs:\n%s", logs)
		}
	})
	w, err := worker.New(ctx, js, worker.Config{AckWait: time.Second, LostAfter: 3 * time.Second, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	worker.Handle(w, Flaky, e.tg.flaky)
	worker.Handle(w, Done, e.tg.done, worker.Options{Backoff: fastWorkerBackoff})
	if err := e.R.Register(w); err != nil {
		t.Fatal(err)
	}
	if e.register != nil {
		e.register(w)
	}
	s, err := scheduler.New(ctx, js, scheduler.Config{LeaseTTL: time.Second, RepairInterval: 300 * time.Millisecond, RepairGrace: 300 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pr := &process{nc: nc, W: w, S: s}
	t.Cleanup(func() { pr.stop() })
	return pr
}

// stop stops the process gracefully (idempotent).
func (pr *process) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = pr.W.Stop(ctx)
	_ = pr.S.Stop(ctx)
}

// kill drops the process's connection at once, then stops what is left:
// writes in flight are lost, as in a crash.
func (pr *process) kill() {
	pr.nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_ = pr.W.Stop(ctx)
	_ = pr.S.Stop(ctx)
}

// wait waits for retrier id to end.
func (e *env) wait(t *testing.T, id string) retrier.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := e.R.Wait(ctx, id)
	if err != nil {
		t.Fatalf("retrier %s did not end: %v", id, err)
	}
	return st
}

// waitCallback waits until retrier id's on-complete run has succeeded and
// returns the completions the callback handler saw.
func (e *env) waitCallback(t *testing.T, id string) []jetflow.Completion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := e.P.Wait(ctx, jetflow.CompletionID(id))
	if err != nil {
		t.Fatalf("on-complete of %s did not end: %v", id, err)
	}
	if r.State != jetflow.Success {
		t.Fatalf("on-complete of %s ended %s: %s", id, r.State, r.Error)
	}
	return e.tg.completions(id)
}

// quiet waits until no run is pending or in progress: nothing more can
// happen, so counts taken afterwards are final. (It polls every 50 ms: a
// listing scans the runs bucket.)
func (e *env) quiet(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		live := false
		for _, st := range []jetflow.State{jetflow.Pending, jetflow.InProgress} {
			page, err := e.P.List(context.Background(), producer.Filter{State: st, Limit: 1})
			if err != nil || len(page.Runs) > 0 {
				live = true
			}
		}
		if !live {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("timed out after 30s waiting for no live runs")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *env) get(t *testing.T, id string) *jetflow.Run {
	t.Helper()
	r, err := e.P.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return r
}

// watchTerminal calls f once, from the KV watcher, as soon as run id is
// written in a terminal state.
func watchTerminal(t *testing.T, js jetstream.JetStream, id string, f func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	kvb, err := js.KeyValue(ctx, "jetflow_runs")
	if err != nil {
		t.Fatal(err)
	}
	w, err := kvb.Watch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer w.Stop()
		for e := range w.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var r jetflow.Run
			if json.Unmarshal(e.Value(), &r) == nil && r.State.Terminal() {
				f()
				return
			}
		}
	}()
}

func isNotFound(err error) bool { return errors.Is(err, jetflow.ErrNotFound) }
