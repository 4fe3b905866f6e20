package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go"
)

func TestCancelPendingNeverStarts(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	var ran atomic.Int32
	worker.Handle(e.W, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error { ran.Add(1); return nil })
	ctx := context.Background()
	// One delayed run, one queued for a worker that has not started yet.
	delayed, err := e.P.RunAfter(ctx, 500*time.Millisecond, echo.With(echoArgs{N: 1}))
	if err != nil {
		t.Fatal(err)
	}
	queued, err := e.P.Enqueue(ctx, echo.With(echoArgs{N: 2}))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{delayed, queued} {
		if err := e.P.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	e.start(t)
	// A later run proves the worker and scheduler work, and passed the canceled ones.
	marker, err := e.P.RunAfter(ctx, time.Second, echo.With(echoArgs{N: 3}))
	if err != nil {
		t.Fatal(err)
	}
	e.wait(t, marker)
	for _, id := range []string{delayed, queued} {
		r, _ := e.P.Get(ctx, id)
		if r.State != jetflow.Canceled {
			t.Errorf("%s: %s", id, r.State)
		}
	}
	if ran.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1 (only the marker)", ran.Load())
	}
	// Canceling an ended run is a no-op; an unknown one is ErrNotFound.
	if err := e.P.Cancel(ctx, marker); err != nil {
		t.Fatal(err)
	}
	if r, _ := e.P.Get(ctx, marker); r.State != jetflow.Success {
		t.Fatalf("marker became %s", r.State)
	}
	if err := e.P.Cancel(ctx, "nope"); !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("unknown: %v", err)
	}
}

var child = jetflow.Define[echoArgs]("test.child")

func TestCancelRunningCancelsContextAndChildren(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	started := make(chan string, 1)
	causes := make(chan error, 1)
	var childRuns atomic.Int32
	worker.Handle(e.W, action, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		// Children scheduled by an at-most-once run are published at once.
		if _, err := j.RunAfter(ctx, time.Hour, child.With(echoArgs{N: 1})); err != nil {
			return err
		}
		if _, err := j.RunAfter(ctx, time.Hour, child.With(echoArgs{N: 2})); err != nil {
			return err
		}
		started <- j.ID()
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	})
	worker.Handle(e.W, child, func(ctx context.Context, j *worker.Job[echoArgs]) error { childRuns.Add(1); return nil })
	e.start(t)
	ctx := context.Background()
	id, err := e.P.Enqueue(ctx, action.With(echoArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	var kids []string
	testserver.Eventually(t, 5*time.Second, "children recorded on parent", func() bool {
		r, err := e.P.Get(ctx, id)
		if err == nil {
			kids = r.Children
		}
		return len(kids) == 2
	})
	if err := e.P.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if cause := <-causes; !errors.Is(cause, jetflow.ErrCanceled) {
		t.Fatalf("cause %v", cause)
	}
	if r := e.wait(t, id); r.State != jetflow.Canceled {
		t.Fatalf("parent %s", r.State)
	}
	for _, k := range kids {
		r, err := e.P.Get(ctx, k)
		if err != nil || r.State != jetflow.Canceled || r.Parent != id {
			t.Fatalf("child %s: %+v %v", k, r, err)
		}
	}
	if childRuns.Load() != 0 {
		t.Fatalf("children ran")
	}
}

var parent = jetflow.Define[echoArgs]("test.parent")

func TestRetryableChildrenCommittedOnlyOnSuccess(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	var childRuns atomic.Int32
	worker.Handle(e.W, parent, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		if _, err := j.Enqueue(ctx, child.With(echoArgs{N: j.Attempt()})); err != nil {
			return err
		}
		if j.Attempt() < 3 {
			return errors.New("not yet")
		}
		return nil
	}, worker.Options{MaxAttempts: 3, Backoff: fastBackoff})
	worker.Handle(e.W, child, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		childRuns.Add(1)
		if j.Args.N != 3 || j.Parent() == "" {
			return jetflow.Permanent(errors.New("child of a failed attempt ran"))
		}
		return nil
	})
	e.start(t)
	ctx := context.Background()
	id, err := e.P.Enqueue(ctx, parent.With(echoArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	r := e.wait(t, id)
	if r.State != jetflow.Success || len(r.Children) != 1 {
		t.Fatalf("parent %+v", r)
	}
	c := e.wait(t, r.Children[0])
	if c.State != jetflow.Success || c.Parent != id {
		t.Fatalf("child %+v", c)
	}
	if childRuns.Load() != 1 {
		t.Fatalf("children ran %d times, want 1", childRuns.Load())
	}
	// The children of the failed attempts were written held, then canceled.
	for _, a := range []int{1, 2} {
		old, err := e.P.Get(ctx, jetflow.DerivedID(id+"-"+string(rune('0'+a))+"-1"))
		if err != nil || old.State != jetflow.Canceled {
			t.Fatalf("attempt %d child: %+v %v", a, old, err)
		}
	}
}

func TestTimeoutBeatsStuckHandler(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	worker.Handle(e.W, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		<-release // ignores its context on purpose
		return nil
	}, worker.Options{Timeout: 300 * time.Millisecond})
	e.start(t)
	id, err := e.P.Enqueue(context.Background(), echo.With(echoArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	r := e.wait(t, id)
	if r.State != jetflow.Failed || !strings.Contains(r.Error, jetflow.ErrTimeout.Error()) {
		t.Fatalf("record %+v", r)
	}
}

func TestProgressWatchedInOrder(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{ProgressInterval: time.Millisecond})
	step := make(chan struct{})
	worker.Handle(e.W, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		for i := 1; i <= 4; i++ {
			<-step
			if err := j.Progress(ctx, jetflow.Progress{Processed: int64(i), Total: 4, Message: "step"}); err != nil {
				return err
			}
		}
		return nil
	})
	// The worker and scheduler start once the watch has shown the run
	// pending: the run cannot have started before the watch began.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id, err := e.P.RunAfter(ctx, 200*time.Millisecond, echo.With(echoArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := e.P.Watch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var states []jetflow.State
	var seen []int64
	for r := range ch {
		states = append(states, r.State)
		if r.Progress != nil {
			seen = append(seen, r.Progress.Processed)
		}
		if r.State == jetflow.Pending || r.State == jetflow.InProgress {
			select {
			case step <- struct{}{}:
			default:
			}
			if len(states) == 1 {
				e.start(t)
				go func() {
					for i := 0; i < 4; i++ {
						select {
						case step <- struct{}{}:
						case <-ctx.Done():
							return
						}
					}
				}()
			}
		}
	}
	if states[0] != jetflow.Pending || states[len(states)-1] != jetflow.Success {
		t.Fatalf("states %v", states)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] < seen[i-1] {
			t.Fatalf("progress out of order: %v", seen)
		}
	}
	if len(seen) == 0 || seen[len(seen)-1] != 4 {
		t.Fatalf("progress %v, want ending at 4", seen)
	}
}

var cancelSilent = jetflow.Define[echoArgs]("cancel.silent")

// A run canceled while its worker missed the cancel notice (core NATS, best
// effort): the worker's next record write (here the heartbeat) finds the
// record canceled, and the handler's context ends with
// jetflow.ErrCanceled, not as if another worker had taken the run.
func TestCancelFoundByHeartbeatIsErrCanceled(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{AckWait: 600 * time.Millisecond})
	causes := make(chan error, 1)
	worker.Handle(e.W, cancelSilent, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil
	}, worker.Options{ClaimAfter: -1})
	e.start(t)
	ctx := context.Background()
	id, err := e.P.Enqueue(ctx, cancelSilent.With(echoArgs{N: 1}))
	if err != nil {
		t.Fatal(err)
	}
	e.waitState(t, id, jetflow.InProgress)
	// The cancel's record write alone, as the producer makes it, without
	// its notice. A heartbeat (every AckWait/3) may write the record
	// between a read and this write: the write reads it again then.
	wrote := false
	if _, err := engine.Of(e.P).Runs().Change(ctx, engine.Cancel, id, func(c *jetflow.Run) *jetflow.Run {
		wrote = c.State == jetflow.InProgress
		if !wrote {
			return nil
		}
		return engine.CancelRun(c, time.Now())
	}); err != nil || !wrote {
		t.Fatalf("cancel write: %v (written: %v)", err, wrote)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, jetflow.ErrCanceled) {
			t.Fatalf("cause %v, want jetflow.ErrCanceled", cause)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("handler context not canceled")
	}
	if r := e.wait(t, id); r.State != jetflow.Canceled {
		t.Fatalf("final %+v", r)
	}
}

// TestCancelNoticeWithoutRecordIsForgotten: a cancel notice published by
// hand, without the canceled record Producer.Cancel writes first
// (docs/wire-format.md, "Cancel notices"), stops a running handler, but
// neither drops a run's message nor discards its outcome: the run is not
// lost (no record, or a pending one, and no message) nor left inProgress.
func TestCancelNoticeWithoutRecordIsForgotten(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	started := make(chan string, 10)
	worker.Handle(e.W, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		if j.Args.N == 1 && j.Attempt() == 1 {
			started <- j.ID()
			<-ctx.Done()
			return jetflow.RetryAfter(10*time.Millisecond, context.Cause(ctx))
		}
		return nil
	})
	e.start(t)
	ctx := context.Background()
	notice := func(id string) {
		t.Helper()
		if err := e.NC.Publish("jetflow.cancel", []byte(id)); err != nil {
			t.Fatal(err)
		}
		if err := e.NC.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// Notices before the runs: one published by hand (no record), one with
	// an idempotency key (a pending record).
	notice("by-hand")
	notice("keyed")
	m := nats.NewMsg("jetflow.fn." + echo.Name() + ".by-hand")
	m.Header.Set("Nats-Msg-Id", "by-hand")
	m.Data = []byte(`{"n":2}`)
	if _, err := e.JS.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	if _, err := e.P.Enqueue(ctx, echo.With(echoArgs{N: 2}), producer.WithID("keyed")); err != nil {
		t.Fatal(err)
	}
	// A notice while a run runs: its handler stops, and the attempt is an
	// ordinary failure, retried.
	running, err := e.P.Enqueue(ctx, echo.With(echoArgs{N: 1}), producer.WithID("running"))
	if err != nil {
		t.Fatal(err)
	}
	if id := <-started; id != running {
		t.Fatalf("started %s", id)
	}
	notice(running)
	for _, id := range []string{"by-hand", "keyed", running} {
		if r := e.wait(t, id); r.State != jetflow.Success {
			t.Fatalf("%s: %s %q", id, r.State, r.Error)
		}
	}
	if r, _ := e.P.Get(ctx, running); r.Attempts != 2 {
		t.Fatalf("running: %d attempts, want 2 (the first stopped by the notice)", r.Attempts)
	}
}
