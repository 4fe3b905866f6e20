package retrier_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/retrier"
	"github.com/jetflow-dev/jetflow/worker"
)

// errOutage stands for NATS refusing the writes of an internal run's
// attempt: a failure that is not permanent.
var errOutage = errors.New("injected outage")

// fastInternal are internal options whose budget is 3 attempts (instead
// of 25, about 10 minutes) and whose backoff is a few milliseconds.
var fastInternal = worker.Options{MaxAttempts: 3, Backoff: jetflow.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}}

// endsOrStuck waits until retrier id has ended and returns its record. It
// fails at once when internal run inner has ended unsuccessfully while the
// retrier is still open (nothing would then ever end it), or after 30 s.
func (e *env) endsOrStuck(t *testing.T, id, inner string) *jetflow.Run {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rec, err := e.P.Get(ctx, id)
		if err == nil && rec.State.Terminal() {
			return rec
		}
		if in, ierr := e.P.Get(ctx, inner); ierr == nil && in.State.Terminal() && in.State != jetflow.Success {
			// Look once more: the retrier may have ended just before.
			if rec, err := e.P.Get(ctx, id); err == nil && rec.State.Terminal() {
				return rec
			}
			st, serr := e.R.Status(ctx, id)
			t.Fatalf("internal run %s ended %s (%s) and retrier %s has no ended record (status %s, %v): it would never end, nor its callback run",
				inner, in.State, in.Error, id, st.State, serr)
		}
		if time.Now().After(deadline) {
			st, serr := e.R.Status(ctx, id)
			t.Fatalf("retrier %s did not end within 30s: status %+v (%v)", id, st, serr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The step's writes are refused for more attempts than its budget (an
// outage longer than 25 attempts, about 10 minutes, shrunk here to 3): the
// step keeps retrying with its capped backoff, and once writes work again
// the retrier goes on and succeeds, its callback run once.
func TestStepOutlastsAnOutage(t *testing.T) {
	t.Parallel()
	e := setup(t, retrier.Options{})
	retrier.SetInternalOptions(e.R, fastInternal)
	const outage = 8 // attempts of the step refused, work and end alike
	retrier.SetFault(e.R, func(_ context.Context, at retrier.Fault) error {
		if at.Fn == retrier.StepFunction && at.Attempt <= outage {
			return errOutage
		}
		return nil
	})
	e.startProcess(t)
	ctx := context.Background()
	id, err := e.R.Run(ctx, Flaky.With(FlakyArgs{Key: "k"}), retrier.WithOnComplete(jetflow.Call{Name: Done.Name()}))
	if err != nil {
		t.Fatal(err)
	}
	step := jetflow.CompletionID(retrier.AttemptID(id, 1))
	rec := e.endsOrStuck(t, id, step)
	if rec.State != jetflow.Success {
		t.Fatalf("retrier ended %s (%s), want success", rec.State, rec.Error)
	}
	e.waitCallback(t, id)
	e.quiet(t)
	if got := e.tg.completions(id); len(got) != 1 || got[0].Run.State != jetflow.Success {
		t.Fatalf("callbacks %v, want one success", got)
	}
	if s := e.get(t, step); s.State != jetflow.Success || s.Attempts != outage+1 {
		t.Fatalf("step run %s: %s after %d attempts, want success after %d", step, s.State, s.Attempts, outage+1)
	}
}

// An internal run (start or step) whose work fails for good, by a
// permanent error, a panic, or a failure on every attempt of its budget,
// ends the retrier failed, naming the internal run and what happened, and
// the retrier's callback runs once: the retrier is never left in progress.
func TestInternalFailureEndsRetrier(t *testing.T) {
	t.Parallel()
	for _, fn := range []string{retrier.StartFunction, retrier.StepFunction} {
		for _, tc := range []struct {
			name string
			fail func() error
			want string
		}{
			{"permanent", func() error { return jetflow.Permanent(errors.New("injected: permanent")) }, "injected: permanent"},
			{"panic", func() error { panic("injected panic") }, "injected panic"},
			{"every attempt of its budget", func() error { return errors.New("injected: always") }, "failed 3 attempts: injected: always"},
		} {
			t.Run(fn+" "+tc.name, func(t *testing.T) {
				t.Parallel()
				e := setup(t, retrier.Options{})
				retrier.SetInternalOptions(e.R, fastInternal)
				retrier.SetFault(e.R, func(_ context.Context, at retrier.Fault) error {
					if at.Fn == fn && !at.End {
						return tc.fail()
					}
					return nil
				})
				e.startProcess(t)
				ctx := context.Background()
				id, err := e.R.Run(ctx, Flaky.With(FlakyArgs{Key: "k"}), retrier.WithOnComplete(jetflow.Call{Name: Done.Name()}))
				if err != nil {
					t.Fatal(err)
				}
				inner := retrier.StartID(id)
				if fn == retrier.StepFunction {
					inner = jetflow.CompletionID(retrier.AttemptID(id, 1))
				}
				rec := e.endsOrStuck(t, id, inner)
				if rec.State != jetflow.Failed || !strings.Contains(rec.Error, inner) || !strings.Contains(rec.Error, tc.want) {
					t.Fatalf("retrier ended %s (%q), want failed naming %s and %q", rec.State, rec.Error, inner, tc.want)
				}
				st, err := e.R.Status(ctx, id)
				if err != nil || st.State != jetflow.Failed || st.Error != rec.Error {
					t.Fatalf("status %+v (%v), want failed with the record's error", st, err)
				}
				e.waitCallback(t, id)
				e.quiet(t)
				if got := e.tg.completions(id); len(got) != 1 || got[0].Run.State != jetflow.Failed {
					t.Fatalf("callbacks %v, want one failed", got)
				}
				wantCalls := 1 // the step runs after attempt 1
				if fn == retrier.StartFunction {
					wantCalls = 0
				}
				if n := e.tg.nCalls("k"); n != wantCalls {
					t.Fatalf("target called %d times, want %d", n, wantCalls)
				}
			})
		}
	}
}

// The start run canceled directly (the producer's or the CLI's cancel of
// <id>-start), while it waits or while it runs: the retrier ends canceled
// and its callback runs once with canceled, as with the retrier's Cancel.
func TestCancelOfTheStartRun(t *testing.T) {
	t.Parallel()
	for _, running := range []bool{false, true} {
		t.Run(fmt.Sprintf("running=%v", running), func(t *testing.T) {
			t.Parallel()
			e := setup(t, retrier.Options{})
			started := make(chan struct{})
			var once atomic.Bool
			if running {
				retrier.SetFault(e.R, func(ctx context.Context, at retrier.Fault) error {
					if at.Fn != retrier.StartFunction || at.End {
						return nil
					}
					if once.CompareAndSwap(false, true) {
						close(started)
					}
					<-ctx.Done() // held until canceled
					return context.Cause(ctx)
				})
			}
			e.startProcess(t)
			ctx := context.Background()
			delay := time.Hour
			if running {
				delay = 0
			}
			id, err := e.R.RunAfter(ctx, delay, Flaky.With(FlakyArgs{Key: "k"}), retrier.WithOnComplete(jetflow.Call{Name: Done.Name()}))
			if err != nil {
				t.Fatal(err)
			}
			if running {
				select {
				case <-started:
				case <-time.After(20 * time.Second):
					t.Fatal("the start run never started")
				}
			}
			if err := e.P.Cancel(ctx, retrier.StartID(id)); err != nil {
				t.Fatal(err)
			}
			if st := e.wait(t, id); st.State != jetflow.Canceled {
				t.Fatalf("status %+v, want canceled", st)
			}
			e.waitCallback(t, id)
			e.quiet(t)
			if got := e.tg.completions(id); len(got) != 1 || got[0].Run.State != jetflow.Canceled || got[0].Run.ID != id {
				t.Fatalf("callbacks %v, want one canceled of %s", got, id)
			}
			if n := e.tg.nCalls("k"); n != 0 {
				t.Fatalf("target called %d times, want 0", n)
			}
		})
	}
}
