package retrier_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/retrier"
	"github.com/jetflow-dev/jetflow/worker"
)

// A MaxBackoff or InitialBackoff near the largest Duration caps the delay:
// it never wraps to a negative delay (an immediate retry).
func TestDelayHugeValues(t *testing.T) {
	t.Parallel()
	for _, o := range []retrier.Options{
		{NoJitter: true, MaxBackoff: math.MaxInt64},
		{MaxBackoff: math.MaxInt64},
		{NoJitter: true, InitialBackoff: math.MaxInt64, MaxBackoff: math.MaxInt64},
		{InitialBackoff: math.MaxInt64},
		{NoJitter: true, InitialBackoff: math.MaxInt64 / 4, MaxBackoff: math.MaxInt64 - 1},
	} {
		for _, k := range []int{1, 2, 60, 200, math.MaxInt} {
			if d := o.Delay(k); d <= 0 {
				t.Errorf("%+v Delay(%d) = %s, want positive", o, k, d)
			}
		}
	}
}

// Status and Cancel of an id whose "<id>-start" is a plain run (not a
// retrier's start run) say so, and Cancel leaves that run alone.
func TestStatusCancelOfPlainStartLookalike(t *testing.T) {
	t.Parallel()
	e := setup(t, retrier.Options{})
	ctx := context.Background()
	if _, err := e.P.RunAfter(ctx, time.Hour, Flaky.With(FlakyArgs{Key: "k"}), producer.WithID("foo-start")); err != nil {
		t.Fatal(err)
	}
	if st, err := e.R.Status(ctx, "foo"); !errors.Is(err, jetflow.ErrNotFound) && !errors.Is(err, retrier.ErrBadRecord) {
		t.Fatalf("status of foo = %+v, %v; want ErrNotFound or ErrBadRecord", st, err)
	}
	if err := e.R.Cancel(ctx, "foo"); !errors.Is(err, jetflow.ErrNotFound) && !errors.Is(err, retrier.ErrBadRecord) {
		t.Fatalf("cancel of foo = %v; want ErrNotFound or ErrBadRecord", err)
	}
	if r := e.get(t, "foo-start"); r.State != jetflow.Pending {
		t.Fatalf("plain run foo-start is %s, want pending", r.State)
	}
	if _, err := e.P.Get(ctx, "foo"); !isNotFound(err) {
		t.Fatalf("record foo: %v, want none written", err)
	}
}

// Status of ids that are not valid run ids, of plain runs and of unknown
// ids: typed errors.
func TestStatusOfNonRetriers(t *testing.T) {
	t.Parallel()
	e := setup(t, retrier.Options{})
	ctx := context.Background()
	id, err := e.P.RunAfter(ctx, time.Hour, Flaky.With(FlakyArgs{Key: "k"}), producer.WithID("plain"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.R.Status(ctx, id); !errors.Is(err, retrier.ErrBadRecord) {
		t.Fatalf("status of a plain run: %v, want ErrBadRecord", err)
	}
	for _, bad := range []string{"", "a.b", "a b", "a*", ">", string(make([]byte, 300))} {
		if _, err := e.R.Status(ctx, bad); !errors.Is(err, jetflow.ErrInvalidRunID) {
			t.Errorf("status of %q: %v, want ErrInvalidRunID", bad, err)
		}
		if err := e.R.Cancel(ctx, bad); !errors.Is(err, jetflow.ErrInvalidRunID) {
			t.Errorf("cancel of %q: %v, want ErrInvalidRunID", bad, err)
		}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := e.R.Wait(wctx, bad)
		cancel()
		if !errors.Is(err, jetflow.ErrInvalidRunID) {
			t.Errorf("wait of %q: %v, want ErrInvalidRunID", bad, err)
		}
	}
	if _, err := e.R.Status(ctx, "nope"); !isNotFound(err) {
		t.Fatalf("status of unknown: %v", err)
	}
}

// BigArgs pads a call's args.
type BigArgs struct {
	Pad    string `json:"pad"`
	Result int    `json:"result,omitempty"` // bytes of result on success
}

var Big = jetflow.Define[BigArgs]("test.big", jetflow.WithKind(jetflow.AtMostOnce))

// A call whose args are as large as Run takes either runs to its end, with
// its callback, or is refused by Run with ErrArgsTooLarge: never a retrier
// stuck in progress.
func TestArgsAtTheSizeLimit(t *testing.T) {
	t.Parallel()
	const maxPayload = 64 << 10
	e := bigEnv(t, maxPayload)
	ctx := context.Background()
	cb := retrier.WithOnComplete(jetflow.Call{Name: Done.Name(), Args: DoneContext{Note: strings.Repeat("c", 100)}})
	// The largest args Run takes.
	n := maxPayload
	var id string
	var err error
	for ; n > 0; n -= 8 {
		id, err = e.R.Run(ctx, Big.With(BigArgs{Pad: strings.Repeat("x", n)}), cb)
		if err == nil {
			break
		}
		if !errors.Is(err, producer.ErrArgsTooLarge) {
			t.Fatalf("Run with %d bytes: %v, want nil or ErrArgsTooLarge", n, err)
		}
	}
	t.Logf("largest args Run takes: %d bytes of pad (max payload %d)", n, maxPayload)
	e.waitEnd(t, id, jetflow.Success)
	e.waitCallback(t, id)
}

// A result that fits the attempt's record but not the retrier's callback
// (with a large callback context) ends the retrier failed, naming why and
// where the result is, and the callback runs: it is not left unscheduled.
// A result too large for the record beside its callback goes to the
// payloads bucket (docs/wire-format.md, "Large payloads"): the retrier
// succeeds, and its callback is called once.
func TestResultTooLargeForTheCallback(t *testing.T) {
	t.Parallel()
	const maxPayload = 64 << 10
	e := bigEnv(t, maxPayload)
	ctx := context.Background()
	cb := retrier.WithOnComplete(jetflow.Call{Name: Done.Name(), Args: DoneContext{Note: strings.Repeat("c", 16<<10)}})
	id, err := e.R.Run(ctx, Big.With(BigArgs{Pad: "x", Result: 36 << 10}), cb)
	if err != nil {
		t.Fatal(err)
	}
	e.waitEnd(t, id, jetflow.Success)
	got := e.waitCallback(t, id)
	if len(got) != 1 || got[0].Run.State != jetflow.Success {
		t.Fatalf("callbacks: %v", got)
	}
}

func (e *env) waitEnd(t *testing.T, id string, want jetflow.State) *jetflow.Run {
	t.Helper()
	ctx := context.Background()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	rec, err := e.P.Wait(wctx, id)
	if err != nil {
		st, _ := e.R.Status(ctx, id)
		t.Fatalf("retrier %s did not end: %v (status %+v)", id, err, st)
	}
	if rec.State != want {
		t.Fatalf("retrier ended %s (%s), want %s", rec.State, rec.Error, want)
	}
	return rec
}

func bigEnv(t *testing.T, maxPayload int32) *env {
	ts := testserver.StartMaxPayload(t, maxPayload)
	p, err := producer.New(context.Background(), ts.JS, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{Env: ts, P: p, R: retrier.New(p, retrier.Options{InitialBackoff: 10 * time.Millisecond, NoJitter: true}), tg: newTarget()}
	var mu sync.Mutex
	calls := 0
	e.register = func(w *worker.Worker) {
		worker.Handle(w, Big, func(_ context.Context, j *worker.Job[BigArgs]) error {
			mu.Lock()
			calls++
			n := calls
			mu.Unlock()
			if n == 1 {
				return errors.New("first fails")
			}
			if j.Args.Result > 0 {
				return j.SetResult(strings.Repeat("r", j.Args.Result))
			}
			return nil
		})
	}
	e.startProcess(t)
	return e
}

// Start runs written by another client with a function name that is not
// valid: the retrier ends failed naming why, and its callback runs; it does
// not stay in progress.
func TestGarbageStartRunNotStuck(t *testing.T) {
	t.Parallel()
	e := setup(t, retrier.Options{})
	e.startProcess(t)
	ctx := context.Background()
	for _, fn := range []string{"bad name!", "a..b", strings.Repeat("f", 300)} {
		id := "g" + strconv.Itoa(len(fn))
		args := fmt.Sprintf(`{"retrier":%q,"fn":%q,"kind":"atMostOnce","args":{},"policy":{"initialBackoff":1000000,"base":2,"maxFailures":1},"onComplete":{"fn":%q}}`, id, fn, Done.Name())
		if _, err := e.P.Enqueue(ctx, jetflow.RawCall(retrier.StartFunction, json.RawMessage(args)), producer.WithID(retrier.StartID(id))); err != nil {
			t.Fatal(err)
		}
		rec := e.waitEnd(t, id, jetflow.Failed)
		if !strings.Contains(rec.Error, jetflow.ErrInvalidName.Error()) {
			t.Errorf("retrier %s: error %q, want it to name %v", id, rec.Error, jetflow.ErrInvalidName)
		}
		if got := e.waitCallback(t, id); len(got) != 1 || got[0].Run.State != jetflow.Failed {
			t.Errorf("retrier %s: callbacks %v", id, got)
		}
	}
}

// A retrier's record whose args another client overwrote with garbage: the
// next step ends it failed with ErrBadRecord's reason, and its callback
// runs.
func TestGarbageRecordArgsNotStuck(t *testing.T) {
	t.Parallel()
	e := setup(t, retrier.Options{InitialBackoff: time.Minute, NoJitter: true})
	e.startProcess(t)
	ctx := context.Background()
	id, err := e.R.Run(ctx, Flaky.With(FlakyArgs{Key: "k", Always: true}), retrier.WithOnComplete(jetflow.Call{Name: Done.Name()}))
	if err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 20*time.Second, "attempt 2 waiting", func() bool {
		st, err := e.R.Status(ctx, id)
		return err == nil && !st.NextAttempt.IsZero()
	})
	kvb, err := e.JS.KeyValue(ctx, "jetflow_runs")
	if err != nil {
		t.Fatal(err)
	}
	ent, err := kvb.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(ent.Value(), &raw); err != nil {
		t.Fatal(err)
	}
	raw["args"] = []int{1, 2, 3}
	b, _ := json.Marshal(raw)
	if _, err := kvb.Update(ctx, id, b, ent.Revision()); err != nil {
		t.Fatal(err)
	}
	// Attempt 2 is due in a minute: run it now.
	if _, err := e.P.Get(ctx, retrier.AttemptID(id, 2)); err != nil {
		t.Fatal(err)
	}
	if err := e.P.Cancel(ctx, retrier.AttemptID(id, 2)); err != nil {
		t.Fatal(err)
	}
	rec := e.waitEnd(t, id, jetflow.Failed)
	if !strings.Contains(rec.Error, "not a retrier record") {
		t.Errorf("error %q, want it to name the bad record", rec.Error)
	}
	if got := e.waitCallback(t, id); len(got) != 1 || got[0].Run.State != jetflow.Failed {
		t.Errorf("callbacks %v", got)
	}
}

// Run with the id of a run that is not a retrier is ErrAlreadyExists (it
// was accepted, its start run then failed, and the callback never ran);
// Wait of such an id, or of an unknown one, says so at once instead of
// blocking.
func TestIDOfPlainRun(t *testing.T) {
	t.Parallel()
	e := setup(t, retrier.Options{})
	e.startProcess(t)
	ctx := context.Background()
	if _, err := e.P.RunAfter(ctx, time.Hour, Flaky.With(FlakyArgs{Key: "p"}), producer.WithID("taken")); err != nil {
		t.Fatal(err)
	}
	id, err := e.R.Run(ctx, Flaky.With(FlakyArgs{Key: "k"}), retrier.WithID("taken"), retrier.WithOnComplete(jetflow.Call{Name: Done.Name()}))
	if !errors.Is(err, producer.ErrAlreadyExists) || id != "taken" {
		t.Fatalf("Run with a plain run's id = %q, %v; want taken, ErrAlreadyExists", id, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := e.R.Wait(wctx, "taken"); !errors.Is(err, retrier.ErrBadRecord) {
		t.Fatalf("Wait of a plain run: %v, want ErrBadRecord", err)
	}
	if _, err := e.R.Wait(wctx, "unknown"); !isNotFound(err) {
		t.Fatalf("Wait of an unknown id: %v, want ErrNotFound", err)
	}
}

var Block = jetflow.Define[FlakyArgs]("test.block", jetflow.WithKind(jetflow.AtMostOnce))

// Cancel while an attempt runs: its context is canceled, no further
// attempt is made, the retrier ends canceled and the callback runs once
// with canceled.
func TestCancelWhileRunning(t *testing.T) {
	t.Parallel()
	e := setup(t, retrier.Options{InitialBackoff: 10 * time.Millisecond, NoJitter: true})
	started := make(chan struct{}, 4)
	causes := make(chan error, 4)
	e.register = func(w *worker.Worker) {
		worker.Handle(w, Block, func(ctx context.Context, j *worker.Job[FlakyArgs]) error {
			started <- struct{}{}
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return errors.New("interrupted")
		})
	}
	e.startProcess(t)
	ctx := context.Background()
	id, err := e.R.Run(ctx, Block.With(FlakyArgs{Key: "b"}), retrier.WithOnComplete(jetflow.Call{Name: Done.Name()}))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("attempt 1 never started")
	}
	testserver.Eventually(t, 20*time.Second, "status inProgress with 1 attempt", func() bool {
		st, err := e.R.Status(ctx, id)
		return err == nil && st.State == jetflow.InProgress && st.Attempts == 1
	})
	if err := e.R.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-causes:
		if !errors.Is(c, jetflow.ErrCanceled) {
			t.Fatalf("cause %v, want ErrCanceled", c)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the running attempt's context was never canceled")
	}
	e.waitEnd(t, id, jetflow.Canceled)
	e.waitCallback(t, id)
	e.quiet(t)
	if got := e.tg.completions(id); len(got) != 1 || got[0].Run.State != jetflow.Canceled {
		t.Fatalf("callbacks %v, want one canceled", got)
	}
	if _, err := e.P.Get(ctx, retrier.AttemptID(id, 2)); !isNotFound(err) {
		t.Fatalf("attempt 2: %v, want none", err)
	}
	if len(started) != 0 {
		t.Fatal("an attempt started after the cancel")
	}
	if st, err := e.R.Status(ctx, id); err != nil || st.State != jetflow.Canceled {
		t.Fatalf("status %+v, %v", st, err)
	}
}
