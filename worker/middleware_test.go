package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
)

var mwFn = jetflow.Define[echoArgs]("middleware.work")

// Middleware wraps every handler, the first outermost; it sees the run,
// can refuse it (the error is the run's outcome) and a panic in it fails
// the run like one in a handler.
func TestMiddlewareWrapsHandlers(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var order []string
	trace := func(name string) worker.Middleware {
		return func(next worker.HandlerFunc) worker.HandlerFunc {
			return func(ctx context.Context, run worker.Run) error {
				mu.Lock()
				order = append(order, name+">"+run.ID())
				mu.Unlock()
				if run.ID() == "refused" && name == "outer" {
					return jetflow.Permanent(errors.New("refused by middleware"))
				}
				if run.ID() == "panics" && name == "inner" {
					panic("middleware panic")
				}
				err := next(ctx, run)
				mu.Lock()
				order = append(order, name+"<"+run.ID())
				mu.Unlock()
				return err
			}
		}
	}
	e := setup(t, worker.Config{Middleware: []worker.Middleware{trace("outer"), trace("inner")}})
	ran := map[string]int{}
	worker.Handle(e.W, mwFn, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		mu.Lock()
		ran[j.ID()]++
		order = append(order, "handler "+j.ID())
		mu.Unlock()
		return nil
	})
	e.start(t)
	ctx := context.Background()
	for _, id := range []string{"ok", "refused", "panics"} {
		if _, err := e.P.Enqueue(ctx, mwFn.With(echoArgs{}), producer.WithID(id)); err != nil {
			t.Fatal(err)
		}
	}
	if r := e.wait(t, "ok"); r.State != jetflow.Success {
		t.Fatalf("ok: %+v", r)
	}
	if r := e.wait(t, "refused"); r.State != jetflow.Failed || !strings.Contains(r.Error, "refused by middleware") {
		t.Fatalf("refused: %s %q", r.State, r.Error)
	}
	if r := e.wait(t, "panics"); r.State != jetflow.Failed || !strings.Contains(r.Error, "middleware panic") {
		t.Fatalf("panics: %s %q", r.State, r.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	if ran["ok"] != 1 || ran["refused"] != 0 || ran["panics"] != 0 {
		t.Fatalf("handler calls %v", ran)
	}
	want := []string{"outer>ok", "inner>ok", "handler ok", "inner<ok", "outer<ok"}
	var got []string
	for _, s := range order {
		if strings.HasSuffix(s, "ok") {
			got = append(got, s)
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("order %v, want %v", got, want)
	}
}

type orderCtx struct {
	Order string `json:"order"`
}

var (
	typedWork = jetflow.Define[echoArgs]("typed.work")
	typedDone = jetflow.Define[jetflow.CompletionOf[orderCtx]]("typed.done")
)

// An on-complete function defined on CompletionOf[C] gets the finished run
// and its context typed.
func TestTypedOnComplete(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	got := make(chan jetflow.CompletionOf[orderCtx], 1)
	worker.Handle(e.W, typedWork, func(ctx context.Context, j *worker.Job[echoArgs]) error { return nil })
	worker.Handle(e.W, typedDone, func(ctx context.Context, j *worker.Job[jetflow.CompletionOf[orderCtx]]) error {
		got <- j.Args
		return nil
	})
	e.start(t)
	id, err := e.P.Enqueue(context.Background(), typedWork.With(echoArgs{N: 1}),
		producer.WithOnComplete(jetflow.OnCompleteCall(typedDone, orderCtx{Order: "o-42"})))
	if err != nil {
		t.Fatal(err)
	}
	c := recv(t, got, "the typed callback")
	if c.Run == nil || c.Run.ID != id || c.Run.State != jetflow.Success || c.Context.Order != "o-42" {
		t.Fatalf("completion %+v (run %+v)", c, c.Run)
	}
}

var historyFn = jetflow.Define[echoArgs]("history.work")

// A run that took several attempts keeps each in its record's history:
// attempt, worker, times, outcome and error; a first-attempt success keeps
// none.
func TestAttemptHistory(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{ID: "w-hist"})
	worker.Handle(e.W, historyFn, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		if j.Attempt() < 3 && j.Args.N == 1 {
			return fmt.Errorf("attempt %d fails", j.Attempt())
		}
		return nil
	}, worker.Options{Backoff: jetflow.Backoff{Initial: time.Millisecond, Max: time.Millisecond}})
	e.start(t)
	ctx := context.Background()
	flaky, err := e.P.Enqueue(ctx, historyFn.With(echoArgs{N: 1}))
	if err != nil {
		t.Fatal(err)
	}
	once, err := e.P.Enqueue(ctx, historyFn.With(echoArgs{N: 2}))
	if err != nil {
		t.Fatal(err)
	}
	r := e.wait(t, flaky)
	if r.State != jetflow.Success || len(r.History) != 3 {
		t.Fatalf("flaky run: %s with history %+v, want success after 3 attempts listed", r.State, r.History)
	}
	for i, a := range r.History {
		want := "failed"
		if i == 2 {
			want = "success"
		}
		if a.Attempt != i+1 || a.Outcome != want || a.Worker != "w-hist" || a.StartedTime.IsZero() || a.CompletedTime.IsZero() ||
			(want == "failed") != strings.Contains(a.Error, fmt.Sprintf("attempt %d fails", i+1)) {
			t.Fatalf("history[%d] = %+v", i, a)
		}
	}
	if r := e.wait(t, once); r.State != jetflow.Success || len(r.History) != 0 {
		t.Fatalf("first-attempt success: %+v, want no history", r.History)
	}
}
