package retrier_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/retrier"
)

func TestDefaults(t *testing.T) {
	t.Parallel()
	o := retrier.New(nil, retrier.Options{}).Options()
	if o.InitialBackoff != 250*time.Millisecond || o.Base != 2 || o.MaxFailures != 4 || o.NoJitter {
		t.Fatalf("defaults = %+v, want 250ms, base 2, 4 failures, jitter", o)
	}
	// Convex's schedule: initialBackoffMs * base^(failures): the first
	// retry waits 500 ms by default.
	exact := retrier.Options{NoJitter: true}
	for k, want := range map[int]time.Duration{1: 500 * time.Millisecond, 2: time.Second, 3: 2 * time.Second, 4: 4 * time.Second} {
		if got := exact.Delay(k); got != want {
			t.Errorf("Delay(%d) = %s, want %s", k, got, want)
		}
	}
	for range 200 {
		if d := (retrier.Options{}).Delay(1); d < 250*time.Millisecond || d >= 750*time.Millisecond {
			t.Fatalf("jittered Delay(1) = %s, want in [250ms, 750ms)", d)
		}
	}
	if d := (retrier.Options{NoJitter: true, MaxBackoff: time.Second}).Delay(10); d != time.Second {
		t.Errorf("capped Delay(10) = %s, want 1s", d)
	}
	if d := (retrier.Options{NoJitter: true}).Delay(200); d <= 0 {
		t.Errorf("Delay(200) overflowed to %s", d)
	}
}

// An at-most-once call failing twice succeeds on its third attempt; the
// attempts are spaced at least by the backoff schedule; the callback runs
// once with the result.
func TestRetriesUntilSuccess(t *testing.T) {
	t.Parallel()
	e := setup(t, retrier.Options{InitialBackoff: 50 * time.Millisecond, NoJitter: true})
	e.startProcess(t)
	ctx := context.Background()
	id, err := e.R.Run(ctx, Flaky.With(FlakyArgs{Key: "k", Failures: 2}),
		retrier.WithOnComplete(jetflow.Call{Name: Done.Name(), Args: DoneContext{Note: "hi"}}))
	if err != nil {
		t.Fatal(err)
	}
	st := e.wait(t, id)
	if st.State != jetflow.Success || st.Attempts != 3 || st.Function != Flaky.Name() {
		t.Fatalf("status = %+v, want success after 3 attempts of %s", st, Flaky.Name())
	}
	var res map[string]int
	if err := st.Decode(&res); err != nil || res["call"] != 3 {
		t.Fatalf("result = %v (%v), want call 3", res, err)
	}
	if got := e.tg.nCalls("k"); got != 3 {
		t.Fatalf("target called %d times, want 3", got)
	}

	// The attempts: deterministic ids, at-most-once runs, spaced at least
	// 50ms*2^k after the k-th failure ended.
	var prev *jetflow.Run
	for n, want := range []jetflow.State{jetflow.Failed, jetflow.Failed, jetflow.Success} {
		a := e.get(t, retrier.AttemptID(id, n+1))
		if a.State != want || a.Kind != jetflow.AtMostOnce || a.Attempts != 1 {
			t.Fatalf("attempt %d = %s (%s, %d attempts), want %s at-most-once", n+1, a.State, a.Kind, a.Attempts, want)
		}
		if prev != nil {
			gap := a.ScheduledTime.Sub(prev.CompletedTime)
			min := 50 * time.Millisecond << n // 100ms after failure 1, 200ms after failure 2
			if gap < min {
				t.Errorf("attempt %d scheduled %s after attempt %d ended, want >= %s", n+1, gap, n, min)
			}
		}
		prev = a
	}
	if _, err := e.P.Get(ctx, retrier.AttemptID(id, 4)); !isNotFound(err) {
		t.Fatalf("attempt 4: %v, want not found", err)
	}

	e.waitCallback(t, id)
	e.quiet(t)
	got := e.tg.completions(id)
	if len(got) != 1 {
		t.Fatalf("on-complete ran %d times, want 1", len(got))
	}
	cst, err := retrier.FromCompletion(got[0])
	if err != nil || cst.State != jetflow.Success || cst.Attempts != 3 || string(cst.Result) != `{"call":3}` {
		t.Fatalf("completion status = %+v (%v)", cst, err)
	}
	var dc DoneContext
	if err := json.Unmarshal(got[0].Context, &dc); err != nil || dc.Note != "hi" {
		t.Fatalf("context = %s (%v), want note hi", got[0].Context, err)
	}
}

// A call that always fails ends failed after MaxFailures+1 attempts with the
// last error; the callback runs once with failed.
func TestAlwaysFailing(t *testing.T) {
	t.Parallel()
	e := setup(t, retrier.Options{InitialBackoff: 10 * time.Millisecond, MaxFailures: 3, NoJitter: true})
	e.startProcess(t)
	ctx := context.Background()
	id, err := e.R.Run(ctx, Flaky.With(FlakyArgs{Key: "k", Always: true}),
		retrier.WithOnComplete(jetflow.Call{Name: Done.Name(), Args: DoneContext{Note: "x"}}))
	if err != nil {
		t.Fatal(err)
	}
	st := e.wait(t, id)
	if st.State != jetflow.Failed || st.Attempts != 4 || st.Error != "boom 4" {
		t.Fatalf("status = %+v, want failed after 4 attempts with boom 4", st)
	}
	e.waitCallback(t, id)
	e.quiet(t)
	if n := e.tg.nCalls("k"); n != 4 {
		t.Fatalf("target called %d times, want 4", n)
	}
	got := e.tg.completions(id)
	if len(got) != 1 {
		t.Fatalf("on-complete ran %d times, want 1", len(got))
	}
	if got[0].Run.State != jetflow.Failed || got[0].Run.Error != "boom 4" {
		t.Fatalf("completion = %s %q", got[0].Run.State, got[0].Run.Error)
	}
	var dc DoneContext
	if err := json.Unmarshal(got[0].Context, &dc); err != nil || dc.Note != "x" {
		t.Fatalf("context = %s (%v)", got[0].Context, err)
	}
}

// Cancel while the next attempt waits for its backoff: the retrier ends
// canceled, the waiting attempt never starts, the callback runs once with
// canceled.
func TestCancelMidRetries(t *testing.T) {
	t.Parallel()
	e := setup(t, retrier.Options{InitialBackoff: time.Minute, OnComplete: &jetflow.Call{Name: Done.Name()}})
	e.startProcess(t)
	ctx := context.Background()
	id, err := e.R.Run(ctx, Flaky.With(FlakyArgs{Key: "k", Always: true}))
	if err != nil {
		t.Fatal(err)
	}
	var st retrier.Status
	testserver.Eventually(t, 20*time.Second, "attempt 2 waiting", func() bool {
		st, err = e.R.Status(ctx, id)
		return err == nil && !st.NextAttempt.IsZero()
	})
	if st.State != jetflow.InProgress || st.Attempts != 1 || st.Error != "boom 1" {
		t.Fatalf("status while waiting = %+v", st)
	}
	if err := e.R.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	st, err = e.R.Status(ctx, id)
	if err != nil || st.State != jetflow.Canceled {
		t.Fatalf("status after cancel = %+v (%v)", st, err)
	}
	if a := e.get(t, retrier.AttemptID(id, 2)); a.State != jetflow.Canceled {
		t.Fatalf("waiting attempt is %s, want canceled", a.State)
	}
	e.waitCallback(t, id)
	e.quiet(t)
	got := e.tg.completions(id)
	if len(got) != 1 || got[0].Run.State != jetflow.Canceled {
		t.Fatalf("on-complete ran %d times (%v), want once with canceled", len(got), got)
	}
	if n := e.tg.nCalls("k"); n != 1 {
		t.Fatalf("target called %d times, want 1", n)
	}
	if err := e.R.Cancel(ctx, id); err != nil {
		t.Fatalf("second cancel: %v, want a no-op", err)
	}
	if err := e.R.Cancel(ctx, "nope"); !isNotFound(err) {
		t.Fatalf("cancel of unknown id: %v, want jetflow.ErrNotFound", err)
	}
}

// A retrier canceled before its start time never calls the target; the
// callback still runs once with canceled. WithID is an idempotency key.
func TestCancelBeforeStart(t *testing.T) {
	t.Parallel()
	e := setup(t, retrier.Options{})
	e.startProcess(t)
	ctx := context.Background()
	call := Flaky.With(FlakyArgs{Key: "k"})
	id, err := e.R.RunAfter(ctx, time.Hour, call, retrier.WithID("later"), retrier.WithOnComplete(jetflow.Call{Name: Done.Name()}))
	if err != nil || id != "later" {
		t.Fatalf("RunAfter = %q, %v", id, err)
	}
	if again, err := e.R.RunAfter(ctx, time.Hour, call, retrier.WithID("later")); !errors.Is(err, producer.ErrAlreadyExists) || again != id {
		t.Fatalf("second RunAfter with the same id = %q, %v; want %q, ErrAlreadyExists", again, err, id)
	}
	st, err := e.R.Status(ctx, id)
	if err != nil || st.State != jetflow.Pending || st.Attempts != 0 || st.Function != Flaky.Name() {
		t.Fatalf("status before start = %+v (%v)", st, err)
	}
	if err := e.R.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	st, err = e.R.Status(ctx, id)
	if err != nil || st.State != jetflow.Canceled {
		t.Fatalf("status after cancel = %+v (%v)", st, err)
	}
	if r := e.get(t, retrier.StartID(id)); r.State != jetflow.Canceled {
		t.Fatalf("start run is %s, want canceled", r.State)
	}
	e.waitCallback(t, id)
	e.quiet(t)
	if got := e.tg.completions(id); len(got) != 1 || got[0].Run.State != jetflow.Canceled {
		t.Fatalf("on-complete ran %d times, want once with canceled", len(got))
	}
	if n := e.tg.nCalls("k"); n != 0 {
		t.Fatalf("target called %d times, want 0", n)
	}
	if _, err := e.R.Status(ctx, "unknown"); !isNotFound(err) {
		t.Fatalf("status of unknown id: %v, want jetflow.ErrNotFound", err)
	}
}

// Retries survive a restart of every process: the worker and scheduler stop
// between two attempts, the NATS server restarts, new ones start on new
// connections, and the retrier completes.
func TestSurvivesRestart(t *testing.T) {
	t.Parallel()
	e := setup(t, retrier.Options{InitialBackoff: 100 * time.Millisecond, NoJitter: true, OnComplete: &jetflow.Call{Name: Done.Name()}})
	first := e.startProcess(t)
	ctx := context.Background()
	id, err := e.R.Run(ctx, Flaky.With(FlakyArgs{Key: "k", Failures: 2}))
	if err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 20*time.Second, "attempt 1 failed", func() bool {
		st, err := e.R.Status(ctx, id)
		return err == nil && st.Attempts >= 1 && st.Error != ""
	})
	first.stop()
	e.Restart()
	e.startProcess(t)
	st := e.wait(t, id)
	if st.State != jetflow.Success || st.Attempts != 3 {
		t.Fatalf("status = %+v, want success after 3 attempts", st)
	}
	e.waitCallback(t, id)
	e.quiet(t)
	if got := e.tg.completions(id); len(got) != 1 {
		t.Fatalf("on-complete ran %d times, want 1", len(got))
	}
	if n := e.tg.nCalls("k"); n != 3 {
		t.Fatalf("target called %d times, want 3", n)
	}
}

// The worker dies around the end of the retrier: right after the attempt's
// terminal write, right after the retrier's terminal write, or as the last
// call returns. Another worker takes over; the retrier ends and its
// callback runs exactly once.
func TestOnCompleteOnceWhenWorkerKilled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// at returns the run whose terminal write triggers the kill, or ""
		// to kill when the target's successful call returns.
		at func(id string) string
	}{
		{"after the attempt's terminal write", func(id string) string { return retrier.AttemptID(id, 2) }},
		{"after the retrier's terminal write", func(id string) string { return id }},
		{"as the call returns", func(string) string { return "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, retrier.Options{InitialBackoff: 20 * time.Millisecond, NoJitter: true,
				OnComplete: &jetflow.Call{Name: Done.Name()}})
			first := e.startProcess(t)
			killed := make(chan struct{})
			var once sync.Once
			kill := func() {
				once.Do(func() {
					first.kill()
					close(killed)
				})
			}
			id := "r1"
			if at := tc.at(id); at != "" {
				watchTerminal(t, e.JS, at, kill)
			} else {
				e.tg.mu.Lock()
				e.tg.hook = func(_ string, _ int, err error) {
					if err == nil {
						kill()
					}
				}
				e.tg.mu.Unlock()
			}
			ctx := context.Background()
			if _, err := e.R.Run(ctx, Flaky.With(FlakyArgs{Key: "k", Failures: 1}), retrier.WithID(id)); err != nil {
				t.Fatal(err)
			}
			select {
			case <-killed:
			case <-time.After(20 * time.Second):
				t.Fatal("the worker was never killed")
			}
			e.startProcess(t)
			st := e.wait(t, id)
			if st.State != jetflow.Success {
				t.Fatalf("status = %+v, want success", st)
			}
			e.waitCallback(t, id)
			e.quiet(t)
			// One callback run (its id is derived from the retrier's), with
			// one recorded outcome. Its handler is retryable: if the killed
			// worker had already started it, the replacement runs it again
			// (at-least-once, like every retryable handler), always with the
			// same outcome.
			got := e.tg.completions(id)
			if len(got) == 0 || len(got) > 2 {
				t.Fatalf("on-complete handler ran %d times, want 1 (2 only when the killed worker had started it)", len(got))
			}
			for _, c := range got {
				if c.Run.State != jetflow.Success || c.Run.ID != id {
					t.Fatalf("on-complete saw %s of %s, want success of %s", c.Run.State, c.Run.ID, id)
				}
			}
			if tc.name != "after the retrier's terminal write" && len(got) != 1 {
				t.Fatalf("on-complete ran %d times, want once", len(got))
			}
		})
	}
}
