package integration_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/retrier"
	"github.com/jetflow-dev/jetflow/streams"
)

// A retrier's at-most-once attempt whose worker process is SIGKILLed
// mid-handler is lost (failed, not re-run by the core); the retrier retries
// it on another worker process, ends success after 2 attempts, and its
// on-complete callback runs once.
func TestRetrierWorkerSIGKILL(t *testing.T) {
	t.Parallel()
	srv := startNATS(t)
	_, js := connect(t, srv.url())
	p := newProducer(t, js, streams.Config{})
	runs := watchRuns(t, js, streams.Config{})
	fn := jetflow.Define[args]("it.kill.retrier", jetflow.WithKind(jetflow.AtMostOnce))
	done := jetflow.Define[jetflow.Completion]("it.kill.retrier-done")
	fns := fn.Name() + ":atmostonce," + done.Name() + ":retryable"

	a := startProc(t, "worker-a", workerArgs(srv.url(), "a", fns, "--block-first", "--retrier")...)
	r := retrier.New(p, retrier.Options{InitialBackoff: 20 * time.Millisecond, NoJitter: true})
	id, err := r.Run(context.Background(), fn.With(args{N: 1}), retrier.WithID("rk"),
		retrier.WithOnComplete(jetflow.Call{Name: done.Name()}))
	if err != nil {
		t.Fatal(err)
	}
	first := retrier.AttemptID(id, 1)
	a.waitLine(30*time.Second, isLine("STARTED", first, 1))
	runs.waitState(t, 30*time.Second, first, jetflow.InProgress)
	a.kill()

	b := startProc(t, "worker-b", workerArgs(srv.url(), "b", fns, "--retrier")...)
	startProc(t, "scheduler", "--url", srv.url(), "--role", "scheduler", "--id", "s")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st, err := r.Wait(ctx, id)
	if err != nil || st.State != jetflow.Success || st.Attempts != 2 {
		t.Fatalf("retrier: %+v, %v; want success after 2 attempts", st, err)
	}
	a1, _ := runs.get(first)
	if a1 == nil || a1.State != jetflow.Failed || !strings.Contains(a1.Error, "lost") {
		t.Fatalf("attempt 1: %+v, want failed (worker lost)", a1)
	}
	cb := jetflow.CompletionID(id)
	runs.waitDone(t, 60*time.Second, []string{cb})
	waitMarkers(t, 30*time.Second, "SUCCESS", []string{cb}, b)
	if c, _ := runs.get(cb); c.State != jetflow.Success {
		t.Fatalf("callback %s: %s %q", cb, c.State, c.Error)
	}
	if n := markers("SUCCESS", a, b)[cb]; n != 1 {
		t.Fatalf("callback succeeded %d times, want 1", n)
	}
	if n := markers("STARTED", a, b)[retrier.AttemptID(id, 2)]; n != 1 {
		t.Fatalf("attempt 2 started %d times, want 1", n)
	}
}
