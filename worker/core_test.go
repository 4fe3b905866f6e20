package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/payload"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/worker"
	"github.com/nats-io/nats.go"
)

var action = jetflow.Define[echoArgs]("test.action", jetflow.WithKind(jetflow.AtMostOnce))

func TestFailureModesEndFailedWithReason(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	var calls sync.Map // id -> count
	count := func(id string) int32 {
		v, _ := calls.LoadOrStore(id, new(atomic.Int32))
		return v.(*atomic.Int32).Add(1)
	}
	worker.Handle(e.W, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		count(j.ID())
		switch j.Args.Text {
		case "permanent":
			return jetflow.Permanent(errors.New("card declined"))
		case "panic":
			panic("boom")
		case "always":
			return errors.New("still down")
		}
		return nil
	}, worker.Options{MaxAttempts: 3, Backoff: fastBackoff})
	e.start(t)
	ctx := context.Background()
	cases := []struct {
		text     string
		attempts int
		errHas   string
	}{
		{"permanent", 1, "card declined"},
		{"panic", 1, "handler panicked: boom"},
		{"always", 3, "still down"},
	}
	for _, c := range cases {
		id, err := e.P.Enqueue(ctx, echo.With(echoArgs{Text: c.text}))
		if err != nil {
			t.Fatal(err)
		}
		r := e.wait(t, id)
		if r.State != jetflow.Failed || r.Attempts != c.attempts || !strings.Contains(r.Error, c.errHas) {
			t.Errorf("%s: state %s attempts %d error %q", c.text, r.State, r.Attempts, r.Error)
		}
		if v, _ := calls.Load(id); v.(*atomic.Int32).Load() != int32(c.attempts) {
			t.Errorf("%s: handler ran %d times, want %d", c.text, v.(*atomic.Int32).Load(), c.attempts)
		}
	}
	// The panic's stack is recorded.
	page, err := e.P.List(ctx, producer.Filter{State: jetflow.Failed})
	if err != nil || len(page.Runs) != 3 {
		t.Fatalf("list failed: %d runs, %v", len(page.Runs), err)
	}
	for _, r := range page.Runs {
		if strings.Contains(r.Error, "panicked") && !strings.Contains(r.Error, "goroutine") {
			t.Errorf("panic without stack: %q", r.Error)
		}
	}
}

func TestRetryAfterSetsNextSchedule(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	var first atomic.Int64
	worker.Handle(e.W, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		if j.Attempt() == 1 {
			first.Store(time.Now().UnixNano())
			return jetflow.RetryAfter(300*time.Millisecond, errors.New("rate limited"))
		}
		if since := time.Since(time.Unix(0, first.Load())); since < 300*time.Millisecond {
			return jetflow.Permanent(errors.New("retried too early: " + since.String()))
		}
		return nil
	})
	e.start(t)
	id, err := e.P.Enqueue(context.Background(), echo.With(echoArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	if r := e.wait(t, id); r.State != jetflow.Success || r.Attempts != 2 {
		t.Fatalf("state %s attempts %d err %s", r.State, r.Attempts, r.Error)
	}
}

func TestAtMostOnceNeverRetried(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	var calls atomic.Int32
	states := make(chan jetflow.State, 1)
	worker.Handle(e.W, action, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		calls.Add(1)
		r, err := e.P.Get(ctx, j.ID())
		if err == nil {
			states <- r.State
		}
		return errors.New("external call failed")
	}, worker.Options{MaxAttempts: 5})
	e.start(t)
	id, err := e.P.Enqueue(context.Background(), action.With(echoArgs{}))
	if err != nil {
		t.Fatal(err)
	}
	r := e.wait(t, id)
	if r.State != jetflow.Failed || calls.Load() != 1 || r.Attempts != 1 {
		t.Fatalf("state %s calls %d attempts %d", r.State, calls.Load(), r.Attempts)
	}
	if st := <-states; st != jetflow.InProgress {
		t.Fatalf("while running the record was %s, want inProgress (the claim)", st)
	}
}

func TestBadArgsAndGarbageMessagesAreRecorded(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	var ok atomic.Int32
	worker.Handle(e.W, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error { ok.Add(1); return nil })
	e.start(t)
	ctx := context.Background()
	cfg := streams.Config{}.WithDefaults()
	// Args that do not decode into echoArgs, published as another producer would.
	m := nats.NewMsg(cfg.FunctionSubject("test.echo", "bad-args-1"))
	m.Header.Set("Nats-Msg-Id", "bad-args-1")
	m.Data = []byte(`{"n":"not a number"}`)
	if _, err := e.JS.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	// Not JSON at all.
	m = nats.NewMsg(cfg.FunctionSubject("test.echo", "garbage-1"))
	m.Data = []byte("\x00\xffnot json")
	if _, err := e.JS.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	// A Nats-Msg-Id naming another run than the subject: dead letter.
	m = nats.NewMsg(cfg.FunctionSubject("test.echo", "wrong-subject"))
	m.Header.Set("Nats-Msg-Id", "some-other-id")
	m.Data = []byte(`{}`)
	if _, err := e.JS.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"bad-args-1", "garbage-1"} {
		r := e.waitState(t, id, jetflow.Failed)
		if !strings.Contains(r.Error, "bad arguments") || r.Attempts != 1 {
			t.Errorf("%s: error %q attempts %d", id, r.Error, r.Attempts)
		}
	}
	var dlq *jetflow.Run
	testserver.Eventually(t, 10*time.Second, "dead-letter record", func() bool {
		page, err := e.P.List(ctx, producer.Filter{State: jetflow.Failed})
		for _, r := range page.Runs {
			if strings.HasPrefix(r.ID, "dlq-") {
				dlq = r
			}
		}
		return err == nil && dlq != nil
	})
	if !strings.Contains(dlq.Error, "bad message") || !strings.Contains(dlq.Error, "some-other-id") {
		t.Errorf("dead letter reason %q", dlq.Error)
	}
	// The worker keeps running.
	id, err := e.P.Enqueue(ctx, echo.With(echoArgs{N: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if r := e.wait(t, id); r.State != jetflow.Success {
		t.Fatalf("after bad input: %s", r.State)
	}
}

func TestForeignProducerCreatesRecord(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	got := make(chan echoArgs, 1)
	worker.Handle(e.W, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error { got <- j.Args; return nil })
	e.start(t)
	cfg := streams.Config{}.WithDefaults()
	m := nats.NewMsg(cfg.FunctionSubject("test.echo", "order-42"))
	m.Header.Set("Nats-Msg-Id", "order-42")
	m.Data = []byte(`{"n":42,"text":"from python"}`)
	// A plain core NATS publish, as any client library can do.
	if err := e.NC.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	r := e.wait(t, "order-42")
	if r.State != jetflow.Success || r.Name != "test.echo" || string(r.Args) != `{"n":42,"text":"from python"}` {
		t.Fatalf("record %+v", r)
	}
	if a := <-got; a.N != 42 {
		t.Fatalf("args %+v", a)
	}
}

func TestIdempotencyKeyReturnsExistingRun(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	ctx := context.Background()
	id, err := e.P.RunAfter(ctx, time.Hour, echo.With(echoArgs{N: 1}), producer.WithID("order-123-payment-check"))
	if err != nil || id != "order-123-payment-check" {
		t.Fatal(id, err)
	}
	id2, err := e.P.RunAfter(ctx, time.Hour, echo.With(echoArgs{N: 2}), producer.WithID("order-123-payment-check"))
	if !errors.Is(err, producer.ErrAlreadyExists) || id2 != id {
		t.Fatalf("second schedule: %q %v", id2, err)
	}
	r, _ := e.P.Get(ctx, id)
	if string(r.Args) != `{"n":1,"text":""}` {
		t.Fatalf("args overwritten: %s", r.Args)
	}
	if _, err := e.P.Enqueue(ctx, echo.With(echoArgs{}), producer.WithID("has space")); !errors.Is(err, jetflow.ErrInvalidRunID) {
		t.Fatalf("bad id: %v", err)
	}
	if _, err := jetflow.NewFunction[echoArgs]("emails.*"); !errors.Is(err, jetflow.ErrInvalidName) {
		t.Fatalf("bad name: %v", err)
	}
}

func TestBatchAllOrNone(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	var ran atomic.Int32
	worker.Handle(e.W, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error { ran.Add(1); return nil })
	e.start(t)
	ctx := context.Background()
	items := make([]producer.Item, 1000)
	for i := range items {
		items[i] = producer.Item{Call: echo.With(echoArgs{N: i})}
		if i%10 == 0 {
			items[i].At = time.Now().Add(300 * time.Millisecond)
		}
	}
	ids, err := e.P.Batch(ctx, items)
	if err != nil || len(ids) != 1000 {
		t.Fatalf("batch: %d ids, %v", len(ids), err)
	}
	testserver.Eventually(t, 30*time.Second, "1000 runs", func() bool { return ran.Load() >= 1000 })
	for _, id := range []string{ids[0], ids[10], ids[999]} {
		if r := e.wait(t, id); r.State != jetflow.Success {
			t.Fatalf("%s: %s", id, r.State)
		}
	}
	if ran.Load() != 1000 {
		t.Fatalf("ran %d", ran.Load())
	}

	// Limits are checked before anything is written.
	if _, err := e.P.Batch(ctx, make([]producer.Item, 1001)); !errors.Is(err, producer.ErrTooManyRuns) {
		t.Fatalf("1001: %v", err)
	}
	big := json.RawMessage(`"` + strings.Repeat("x", 900_000) + `"`)
	var large []producer.Item
	for i := 0; i < 10; i++ {
		large = append(large, producer.Item{Call: jetflow.RawCall("test.echo", big)})
	}
	if _, err := e.P.Batch(ctx, large); !errors.Is(err, producer.ErrArgsTooLarge) {
		t.Fatalf("9 MB: %v", err)
	}
	huge := json.RawMessage(`"` + strings.Repeat("x", payload.MaxSize) + `"`)
	if _, err := e.P.Enqueue(ctx, jetflow.RawCall("test.echo", huge)); !errors.Is(err, producer.ErrArgsTooLarge) {
		t.Fatalf("one run above what jetflow offloads: %v", err)
	}
	// A batch naming an existing id writes nothing.
	if _, err := e.P.RunAfter(ctx, time.Hour, echo.With(echoArgs{}), producer.WithID("taken")); err != nil {
		t.Fatal(err)
	}
	_, err = e.P.Batch(ctx, []producer.Item{
		{Call: echo.With(echoArgs{}), Options: []producer.Option{producer.WithID("fresh-1")}, At: time.Now().Add(time.Hour)},
		{Call: echo.With(echoArgs{}), Options: []producer.Option{producer.WithID("taken")}, At: time.Now().Add(time.Hour)},
	})
	if !errors.Is(err, producer.ErrAlreadyExists) {
		t.Fatalf("batch with existing id: %v", err)
	}
	if _, err := e.P.Get(ctx, "fresh-1"); !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("fresh-1 was written: %v", err)
	}
}

func TestUnservedFunctionWaitsPending(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	ctx := context.Background()
	id, err := e.P.Enqueue(ctx, echo.With(echoArgs{N: 7}))
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := e.P.Get(ctx, id); r.State != jetflow.Pending {
		t.Fatalf("state %s", r.State)
	}
	worker.Handle(e.W, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error { return nil })
	e.start(t)
	if r := e.wait(t, id); r.State != jetflow.Success {
		t.Fatalf("state %s", r.State)
	}
}

func TestForeignRunIsPendingBeforeAnyWorker(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	cfg := streams.Config{}.WithDefaults()
	m := nats.NewMsg(cfg.FunctionSubject("test.echo", "foreign-7"))
	m.Header.Set("Nats-Msg-Id", "foreign-7")
	m.Data = []byte(`{"n":7}`)
	if _, err := e.JS.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	r, err := e.P.Get(context.Background(), "foreign-7")
	if err != nil || r.State != jetflow.Pending || r.Name != "test.echo" || string(r.Args) != `{"n":7}` {
		t.Fatalf("before any worker: %+v %v", r, err)
	}
	worker.Handle(e.W, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error { return nil })
	e.start(t)
	if r := e.wait(t, "foreign-7"); r.State != jetflow.Success {
		t.Fatalf("state %s", r.State)
	}
}

var done = jetflow.Define[jetflow.Completion]("test.done")

func TestOnCompleteRunsOnceWithOutcome(t *testing.T) {
	t.Parallel()
	e := setup(t, worker.Config{})
	got := make(chan jetflow.Completion, 4)
	worker.Handle(e.W, echo, func(ctx context.Context, j *worker.Job[echoArgs]) error {
		if j.Args.Text == "fail" {
			return jetflow.Permanent(errors.New("nope"))
		}
		return j.SetResult(j.Args.N)
	})
	worker.Handle(e.W, done, func(ctx context.Context, j *worker.Job[jetflow.Completion]) error {
		got <- j.Args
		return nil
	})
	e.start(t)
	ctx := context.Background()
	ok, err := e.P.Enqueue(ctx, echo.With(echoArgs{N: 5}), producer.WithOnComplete(jetflow.RawCall("test.done", json.RawMessage(`{"order":1}`))))
	if err != nil {
		t.Fatal(err)
	}
	bad, err := e.P.RunAfter(ctx, 100*time.Millisecond, echo.With(echoArgs{Text: "fail"}), producer.WithOnComplete(jetflow.RawCall("test.done", nil)))
	if err != nil {
		t.Fatal(err)
	}
	canceled, err := e.P.RunAfter(ctx, time.Hour, echo.With(echoArgs{}), producer.WithOnComplete(jetflow.RawCall("test.done", nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.P.Cancel(ctx, canceled); err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]jetflow.Completion{}
	for len(outcomes) < 3 {
		select {
		case c := <-got:
			if _, dup := outcomes[c.Run.ID]; dup {
				t.Fatalf("on-complete of %s ran twice", c.Run.ID)
			}
			outcomes[c.Run.ID] = c
		case <-time.After(20 * time.Second):
			t.Fatalf("on-complete ran for %d of 3 runs", len(outcomes))
		}
	}
	if c := outcomes[ok]; c.Run.State != jetflow.Success || string(c.Run.Result) != "5" || string(c.Context) != `{"order":1}` {
		t.Fatalf("success completion %+v", c)
	}
	if c := outcomes[bad]; c.Run.State != jetflow.Failed || c.Run.Error != "nope" {
		t.Fatalf("failed completion %+v", c.Run)
	}
	if c := outcomes[canceled]; c.Run.State != jetflow.Canceled {
		t.Fatalf("canceled completion %+v", c.Run)
	}
	for _, id := range []string{ok, bad, canceled} {
		if r := e.wait(t, jetflow.CompletionID(id)); r.State != jetflow.Success || r.Parent != id {
			t.Fatalf("completion run of %s: %+v", id, r)
		}
	}
}
